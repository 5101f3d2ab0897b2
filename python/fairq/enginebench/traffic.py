"""Multi-tenant HTTP traffic against an OpenAI-compatible server.

:func:`send_all` sends :class:`HttpRequest` s, each at its arrival time, with
a real HTTP client (``httpx``), concurrently, to ``/v1/completions`` (the
prompt as token ids, so prefixes are exact) or ``/v1/chat/completions`` (the
prompt as words ``t<id>`` of :func:`fairq.enginebench.server.write_model`'s
tokenizer), streaming or not, and returns one :class:`HttpResult` per
request: HTTP status, tokens received, time of the first token and of every
streamed chunk, the end. A request's tenant travels in the body
(``vllm_xargs.tenant``), in the ``X-Request-Id`` header (``tenant:id``), or
not at all (the server's default tenant).

:func:`scrape` reads a Prometheus ``/metrics`` page into ``{name: {labels:
value}}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "HttpRequest",
    "HttpResult",
    "metric_sum",
    "scrape",
    "metric_delta",
    "send_all",
    "settle_metrics",
]

Endpoint = Literal["completions", "chat"]
TenantVia = Literal["xargs", "header", "none"]


@dataclass(frozen=True)
class HttpRequest:
    """One request to send.

    ``prompt``: token ids. ``max_tokens``: tokens asked for (sent with
    ``ignore_eos`` so exactly that many come back). ``cancel_after``: a
    streaming request closes its connection after that many chunks (a client
    that goes away mid-generation). ``extra``: more body fields, sent as
    they are (``vllm_xargs`` here replaces the tenant's).
    """

    request_id: str
    tenant: str
    prompt: Sequence[int]
    max_tokens: int
    arrival: float = 0.0
    endpoint: Endpoint = "completions"
    stream: bool = False
    tenant_via: TenantVia = "xargs"
    priority: int | None = None
    cancel_after: int | None = None
    #: seconds after which the client gives up and closes the connection
    #: (a client that goes away; None: the client's default)
    client_timeout: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: sent as the ``x-session-id`` header (Ray Serve's session affinity:
    #: its session routers key on it); None: no header
    session_id: str | None = None


@dataclass
class HttpResult:
    """What came back for one :class:`HttpRequest` (times: seconds since
    :func:`send_all` started)."""

    request: HttpRequest
    status: int = 0
    sent: float = 0.0
    first_token: float | None = None
    end: float = 0.0
    #: arrival time of each streamed chunk that carried text
    chunk_times: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    #: prompt tokens vLLM served from its prefix cache when it first
    #: scheduled the request (``usage.prompt_tokens_details.cached_tokens``;
    #: None unless the server runs with ``--enable-prompt-tokens-details``)
    cached_tokens: int | None = None
    finish_reason: str | None = None
    #: the client closed the stream on purpose (``cancel_after``)
    cancelled: bool = False
    error: str | None = None
    #: the answer's text (``choices[0].text``, or the chat message's
    #: ``content``: what follows the reasoning when the server runs a
    #: reasoning parser) and the chat message's ``reasoning`` (vLLM's
    #: ``--reasoning-parser``); streamed: the chunks' ``delta`` s joined.
    #: None when none came
    content: str | None = None
    reasoning: str | None = None
    #: the output token ids (``choices[0].token_ids``, streamed: joined),
    #: sent by vLLM when the request asks ``return_token_ids``
    token_ids: list[int] | None = None

    @property
    def ok(self) -> bool:
        """HTTP 200, no error in the stream, not cancelled by the client.
        (A stream that ends early without an error is ``ok`` but not
        :attr:`complete`.)"""
        return self.status == 200 and self.error is None and not self.cancelled

    @property
    def complete(self) -> bool:
        """``ok`` and every token asked for came back (the requests are sent
        with ``min_tokens = max_tokens`` and ``ignore_eos``)."""
        return self.ok and self.completion_tokens == self.request.max_tokens

    @property
    def latency(self) -> float:
        """End-to-end seconds."""
        return self.end - self.sent

    @property
    def ttft(self) -> float | None:
        """Seconds to the first token (streaming: the first chunk; not
        streaming: the whole answer)."""
        return None if self.first_token is None else self.first_token - self.sent


def _body(model: str, r: HttpRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": r.max_tokens,
        "min_tokens": r.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": r.stream,
    }
    if r.endpoint == "completions":
        body["prompt"] = list(r.prompt)
    else:
        body["messages"] = [{"role": "user", "content": " ".join(f"t{t}" for t in r.prompt)}]
    if r.stream:
        body["stream_options"] = {"include_usage": True}
    if r.tenant_via == "xargs":
        body["vllm_xargs"] = {"tenant": r.tenant}
    if r.priority is not None:
        body["priority"] = r.priority
    body.update(r.extra)
    return body


def _read_usage(res: HttpResult, usage: dict[str, Any]) -> None:
    res.completion_tokens = int(usage.get("completion_tokens", 0))
    res.prompt_tokens = int(usage.get("prompt_tokens", 0))
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        res.cached_tokens = int(cached)


async def _one(client: Any, base: str, model: str, r: HttpRequest, t0: float) -> HttpResult:
    res = HttpResult(r)
    delay = t0 + r.arrival - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    path = "/v1/completions" if r.endpoint == "completions" else "/v1/chat/completions"
    headers = {"X-Request-Id": f"{r.tenant}:{r.request_id}"} if r.tenant_via == "header" else {}
    if r.session_id is not None:
        headers["x-session-id"] = r.session_id
    res.sent = time.perf_counter() - t0
    kw: dict[str, Any] = {} if r.client_timeout is None else {"timeout": r.client_timeout}
    try:
        if not r.stream:
            resp = await client.post(base + path, json=_body(model, r), headers=headers, **kw)
            res.status = resp.status_code
            res.end = res.first_token = time.perf_counter() - t0
            if resp.status_code != 200:
                res.error = resp.text[:500]
                return res
            data = resp.json()
            usage = data.get("usage") or {}
            _read_usage(res, usage)
            choice = data["choices"][0]
            res.finish_reason = choice.get("finish_reason")
            message = choice.get("message") or {}
            res.content = choice.get("text", message.get("content"))
            res.reasoning = message.get("reasoning")
            if choice.get("token_ids") is not None:
                res.token_ids = [int(t) for t in choice["token_ids"]]
            return res
        async with client.stream(
            "POST", base + path, json=_body(model, r), headers=headers, **kw
        ) as s:
            res.status = s.status_code
            if s.status_code != 200:
                res.error = (await s.aread()).decode(errors="replace")[:500]
                res.end = time.perf_counter() - t0
                return res
            async for line in s.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                now = time.perf_counter() - t0
                if "error" in chunk:
                    res.error = json.dumps(chunk["error"])[:500]
                    break
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = choice.get("text")
                    if text is None:
                        text = delta.get("content")
                    if text is not None:
                        res.content = (res.content or "") + text
                    if delta.get("reasoning") is not None:
                        res.reasoning = (res.reasoning or "") + delta["reasoning"]
                    if choice.get("token_ids") is not None:
                        res.token_ids = [*(res.token_ids or []), *map(int, choice["token_ids"])]
                    if text:
                        if res.first_token is None:
                            res.first_token = now
                        res.chunk_times.append(now)
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                usage = chunk.get("usage")
                if usage:
                    _read_usage(res, usage)
                if r.cancel_after is not None and len(res.chunk_times) >= r.cancel_after:
                    res.cancelled = True
                    break
    except Exception as e:  # noqa: BLE001 (a failed request is a result)
        waited = time.perf_counter() - t0 - res.sent
        if r.client_timeout is not None and (
            "Timeout" in type(e).__name__ or waited >= r.client_timeout
        ):
            # gave up on purpose (on a starved event loop the connection's
            # end can surface before the client's own timeout does)
            res.cancelled = True
        else:
            res.error = f"{type(e).__name__}: {e}"
    res.end = time.perf_counter() - t0
    return res


async def _send_all(
    base: str,
    model: str,
    requests: Sequence[HttpRequest],
    timeout: float,
    limit: int,
    t0: float | None,
) -> list[HttpResult]:
    import httpx

    limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        # one request before the clock starts: httpx's lazy imports and the
        # first connection cost a busy 2-core machine up to seconds, which
        # would otherwise delay every arrival due in that time
        await client.get(base + "/health")
        start = time.perf_counter() if t0 is None else t0
        return list(await asyncio.gather(*(_one(client, base, model, r, start) for r in requests)))


def send_all(
    base_url: str,
    model: str,
    requests: Sequence[HttpRequest],
    *,
    timeout: float = 600.0,
    max_connections: int = 1024,
    t0: float | None = None,
) -> list[HttpResult]:
    """Send ``requests`` (each at its ``arrival``, concurrently) to the
    server at ``base_url`` serving ``model``; results in the same order.
    Never raises for a request that fails: its result says why. ``t0``: the
    clock's zero, a ``time.perf_counter()`` value, for arrivals and the
    results' times (to share one clock with another ``send_all`` running
    beside it); default: when the first connection is made."""
    return asyncio.run(_send_all(base_url, model, requests, timeout, max_connections, t0))


#: A parsed ``/metrics`` page: ``{metric name: {sorted label pairs: value}}``.
Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(base_url: str, timeout: float = 10.0) -> Metrics:
    """``GET /metrics`` parsed (:data:`Metrics`)."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as r:
        text = r.read().decode()
    out: Metrics = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name, brace, rest = name_labels.partition("{")
        labels: list[tuple[str, str]] = []
        if brace:
            body = rest.rstrip("}")
            for part in _split_labels(body):
                k, _, v = part.partition("=")
                labels.append((k.strip(), v.strip().strip('"')))
        try:
            out.setdefault(name.strip(), {})[tuple(sorted(labels))] = float(value)
        except ValueError:
            continue
    return out


def _split_labels(body: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def metric_sum(metrics: Metrics, metric: str, /, **labels: str) -> float:
    """Sum of ``metric`` over the series whose labels include ``labels``
    (any label, ``name`` included)."""
    total = 0.0
    for key, value in metrics.get(metric, {}).items():
        d = dict(key)
        if all(d.get(k) == v for k, v in labels.items()):
            total += value
    return total


def settle_metrics(base_url: str, model: str) -> None:
    """Make fairq's counters on ``/metrics`` current: they travel at most
    once a second while the engine steps (:mod:`fairq.vllm.stats`), so wait
    past that, then make the engine step once more (a 2-token request)."""
    import time

    time.sleep(1.2)
    (r,) = send_all(base_url, model, [HttpRequest("settle", "settle", [3, 4, 5], 2)])
    if not r.ok:
        raise RuntimeError(f"the settling request failed: {r.status} {r.error}")


def metric_delta(before: Metrics, after: Metrics, metric: str) -> float:
    """How much ``metric`` (summed over its series) grew from ``before`` to ``after``."""
    return metric_sum(after, metric) - metric_sum(before, metric)
