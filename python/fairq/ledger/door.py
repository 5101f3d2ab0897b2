"""A front door for an HTTP server: an ASGI middleware that runs
:class:`fairq.ledger.caps.AdmissionControl` on each generation request and
answers a refusal with HTTP 429 (``Retry-After``) or 413, before the server
has parsed, tokenized or queued anything (pure Python; no engine imported).

An engine's front door (:mod:`fairq.vllm.door`, :mod:`fairq.sglang.door`)
subclasses :class:`AdmissionDoor` with how it reads a request: its tenant
(:meth:`AdmissionDoor.tenant`, the engine's resolver over a view of the body
and headers), how it hands that tenant on to the engine
(:meth:`AdmissionDoor.hand_on`) and where the policy's accounts come from
(:meth:`AdmissionDoor.accounts`).

Exactness: the door counts what each tenant holds itself, in the server's
event loop: a request is held from its acceptance until the app has sent its
whole response (or failed, or the client went away), whatever the engine's
process layout. The policy's accounts only rank tenants; they may lag by a
metrics interval without breaking a bound (see ``docs/design/admission.md``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from fairq.ledger.caps import AdmissionControl, Limits, Refusal

__all__ = ["AdmissionDoor", "estimate_tokens", "output_tokens", "GENERATE_PATHS"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The OpenAI-compatible generation endpoints a door guards.
GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions", "/generate", "/v1/responses")

#: Output tokens counted for a request that gives no ``max_tokens``.
DEFAULT_MAX_TOKENS = 256
#: Bytes of text per token in the estimate of a text prompt.
BYTES_PER_TOKEN = 4


def _text_tokens(x: Any) -> int:
    """Tokens of a prompt field (iterative: a deeply nested body costs no
    recursion)."""
    total, stack = 0, [x]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            total += -(-len(x.encode("utf-8", "replace")) // BYTES_PER_TOKEN)
        elif isinstance(x, list):
            if x and all(isinstance(i, int) for i in x):
                total += len(x)  # token ids: exact
            else:
                stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(v for k, v in x.items() if k in ("content", "text"))
    return total


def _field(body: Any, name: str) -> Any:
    if isinstance(body, Mapping):
        return body.get(name)
    return getattr(body, name, None)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def output_tokens(body: Any) -> int:
    """The output tokens a request (a JSON body, or a request object with
    those attributes) may occupy: its ``max_tokens`` /
    ``max_completion_tokens`` (the latter when both) / ``sampling_params``'s
    ``max_new_tokens`` (default :data:`DEFAULT_MAX_TOKENS`), times the
    completions it asks for (``n``, also in ``sampling_params``; at least
    1). Never raises for a body of any shape."""
    out = None
    for key in ("max_tokens", "max_completion_tokens"):
        v = _int(_field(body, key))
        if v is not None:
            out = v
    sp = _field(body, "sampling_params")
    if out is None:
        out = _int(_field(sp, "max_new_tokens"))
    n = _int(_field(body, "n"))
    if n is None:
        n = _int(_field(sp, "n"))
    return max(out if out is not None else DEFAULT_MAX_TOKENS, 0) * max(n or 1, 1)


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """The tokens a request may occupy: its prompt (token ids counted
    exactly, text at :data:`BYTES_PER_TOKEN` bytes a token; chat messages'
    contents) plus :func:`output_tokens`. An estimate made before
    tokenizing, on purpose: the door spends nothing on a request it
    refuses."""
    prompt = 0
    for key in ("prompt", "messages", "input_ids", "text", "input"):
        if key in body:
            prompt += _text_tokens(body[key])
    return max(prompt, 1) + output_tokens(body)


class AdmissionDoor:
    """ASGI middleware (see the module doc). ``app``: the wrapped ASGI app;
    ``limits``, ``weights``: the admission options (already validated);
    ``paths``: the request paths it guards (POST only).

    Subclasses override :meth:`tenant`, :meth:`hand_on` and :meth:`accounts`.
    """

    def __init__(
        self,
        app: Any,
        limits: Limits,
        weights: Mapping[str, float] | None = None,
        *,
        paths: tuple[str, ...] = GENERATE_PATHS,
        name: str = "door",
    ) -> None:
        self.app = app
        self.control = AdmissionControl(limits, weights)
        self.paths = paths
        self.name = name
        self.collector = _register(self.control, name)
        self._warned = float("-inf")

    # -- what an engine's door says ------------------------------------------
    def tenant(
        self, body: Mapping[str, Any], headers: Mapping[str, str], scope: Scope
    ) -> tuple[str, bool]:
        """``(tenant, hand_on)``: the request's tenant, and whether the
        engine cannot resolve it by itself (then :meth:`hand_on` writes it
        into the body)."""
        return "default", False

    def hand_on(self, body: dict[str, Any], tenant: str) -> None:
        """Write ``tenant`` into ``body`` where the engine's resolver reads it."""

    def accounts(self) -> Mapping[str, float] | None:
        """The policy's accounts per tenant (``share_lead``) when new since
        the last call, else None. An exception is logged and the request
        decided on the last accounts."""
        return None

    def _fresh_accounts(self) -> Mapping[str, float] | None:
        """:meth:`accounts`, or None (rank by the last ones) when reading
        them fails: the policy's accounts only rank tenants, and a failure
        to read them must not fail the request (logged once a minute)."""
        try:
            return self.accounts()
        except Exception:
            now = time.monotonic()
            if now - self._warned >= 60.0:
                self._warned = now
                logger.warning("%s: cannot read the policy's accounts", self.name, exc_info=True)
            return None

    # -- ASGI ------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or scope.get("path") not in self.paths
        ):
            await self.app(scope, receive, send)
            return
        raw, more = await _read_body(receive)
        try:
            body = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError, RecursionError):
            body = None
        if not isinstance(body, dict) or not more:  # not ours to judge: the app answers it
            await self.app(scope, _replay(raw, more, receive), send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        tenant, hand_on = self.tenant(body, headers, scope)
        tokens = estimate_tokens(body)
        acc = self._fresh_accounts()
        if acc is not None:
            self.control.set_accounts(acc)
        refusal = self.control.offer(tenant, tokens)
        if refusal is not None:
            await _refuse(send, refusal)
            return
        try:
            if hand_on:
                self.hand_on(body, tenant)
                raw = json.dumps(body).encode()
                scope = dict(scope)
                scope["headers"] = [
                    (k, v) for k, v in scope["headers"] if k.lower() != b"content-length"
                ] + [(b"content-length", str(len(raw)).encode())]
            await self.app(scope, _replay(raw, more, receive), send)
        finally:
            self.control.release(tenant, tokens)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body; ``more`` is False if the client went away."""
    chunks: list[bytes] = []
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(chunks), True


def _replay(raw: bytes, intact: bool, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()  # http.disconnect, when it comes

    if not intact:

        async def gone() -> Message:
            return {"type": "http.disconnect"}

        return gone
    return again


async def _refuse(send: Send, refusal: Refusal) -> None:
    payload = json.dumps(refusal.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    retry = refusal.retry_after_header()
    if retry is not None:
        headers.append((b"retry-after", retry.encode()))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


#: The collector each door name has in the default registry (the latest door's).
_REGISTERED: dict[str, Any] = {}


def _register(control: AdmissionControl, name: str) -> Any:
    """The door's metrics (:class:`fairq.metrics.FairqCollector`) in
    ``prometheus_client``'s default registry, which the server's
    ``/metrics`` serves (None without ``prometheus_client``). A door built
    again under the same name (an app built twice, a test's many doors)
    replaces the earlier one's collector: ``/metrics`` never shows a name's
    series twice, and a replaced door is not kept alive by the registry."""
    try:
        import prometheus_client
    except ImportError:
        return None
    from fairq.metrics import FairqCollector

    collector = FairqCollector(control, name)
    old = _REGISTERED.pop(name, None)
    if old is not None:
        try:
            prometheus_client.REGISTRY.unregister(old)
        except KeyError:  # unregistered by someone else already
            pass
    prometheus_client.REGISTRY.register(collector)
    _REGISTERED[name] = collector
    return collector
