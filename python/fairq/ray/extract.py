"""Tenant and prompt token ids of a pending Ray Serve request (no Ray import).

The router sees a request as the positional and keyword arguments of the
handle call (``PendingRequest.args`` / ``.kwargs``). The default extractors
read OpenAI-style bodies, as a dict or an object with attributes (a pydantic
``ChatCompletionRequest`` of ``ray.serve.llm``):

Tenant (:func:`default_tenant`), first that applies:

1. the body's ``vllm_xargs["tenant"]`` (what fairq's scheduler inside a vLLM
   replica reads, so router and engine agree on the tenant), a non-empty str;
2. the body's ``user`` field (OpenAI's end-user id), a non-empty str;
3. the ``tenant_header`` HTTP header (default ``x-fairq-tenant``) of a request
   that reaches the deployment straight from Serve's HTTP proxy (the router
   sees its ASGI scope, not its body), then the fairness headers gateways
   send (:data:`GATEWAY_HEADERS`: GIE's ``x-gateway-inference-fairness-id``,
   llm-d's ``x-llm-d-inference-fairness-id``);
4. ``default_tenant`` (default ``"default"``).

Prompt tokens (:func:`default_tokens`), first that applies:

1. token ids the body carries: ``prompt_token_ids`` or ``input_ids``, or a
   ``prompt`` that is a list of ints (OpenAI's pre-tokenized prompt);
2. the prompt text (``prompt`` as a str, or the ``messages`` of a chat
   request: each message as ``role + "\\n" + content + "\\n"``, content parts'
   ``text`` joined) as **pseudo-tokens**: the UTF-8 bytes cut into pages of
   4 bytes (the last one zero-padded), each page read as one little-endian
   uint32. The mapping is stable (no hashing, no seed, the same on every
   process and release) and injective on pages, so two prompts that share
   their first ``k * 4`` bytes share their first ``k`` pseudo-tokens, and
   one pseudo-token is about one real token of English text (so
   ``worker_quantum`` and the output-token charges stay in one unit);
3. nothing (an empty prompt): the request still routes, without affinity.

An extractor never raises into the router: a body it cannot read gives the
default tenant and no tokens, and the replica then answers the request
through Ray's normal error path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from fairq.tenancy import GATEWAY_HEADERS

#: Bytes of text per pseudo-token.
PAGE_BYTES = 4

_TOKEN_FIELDS = ("prompt_token_ids", "input_ids")


def text_to_pseudo_tokens(text: str) -> np.ndarray:
    """``text`` as pseudo-tokens: its UTF-8 bytes in pages of 4, each page one
    little-endian uint32, the last page padded with ``0xFF`` (a byte UTF-8
    never holds, so texts that differ only in trailing NUL bytes differ:
    equal tokens mean equal bytes).

    >>> text_to_pseudo_tokens("abcdefg").tolist() == [0x64636261, 0xFF676665]
    True
    """
    raw = text.encode("utf-8", "surrogatepass")
    pad = (-len(raw)) % PAGE_BYTES
    return np.frombuffer(raw + b"\xff" * pad, dtype="<u4").astype(np.uint32)


def _field(body: Any, name: str) -> Any:
    if isinstance(body, Mapping):
        return body.get(name)
    return getattr(body, name, None)


def _body(args: Sequence[Any], kwargs: Mapping[Any, Any]) -> Any:
    """The request body: the first positional argument, else a ``body`` or
    ``request`` keyword argument."""
    if args:
        return args[0]
    for key in ("body", "request"):
        if key in kwargs:
            return kwargs[key]
    return None


def _header(body: Any, name: str) -> str | None:
    """Header ``name`` of a request straight from the HTTP proxy (an object
    with an ASGI scope: ``StreamingHTTPRequest.asgi_scope``), or of a dict
    body with a ``headers`` mapping."""
    scope = getattr(body, "asgi_scope", None)
    if isinstance(scope, Mapping):
        want = name.lower().encode("latin-1")
        for key, value in scope.get("headers") or ():
            if bytes(key).lower() == want:
                return bytes(value).decode("latin-1")
        return None
    headers = _field(body, "headers")
    if isinstance(headers, Mapping):
        for key, value in headers.items():
            if isinstance(key, str) and key.lower() == name.lower():
                return str(value)
    return None


def default_tenant(
    args: Sequence[Any],
    kwargs: Mapping[Any, Any],
    *,
    tenant_header: str = "x-fairq-tenant",
    default: str = "default",
) -> str:
    """The tenant of a request (see the module docstring); never raises."""
    try:
        body = _body(args, kwargs)
        xargs = _field(body, "vllm_xargs")
        tenant = xargs.get("tenant") if isinstance(xargs, Mapping) else None
        if isinstance(tenant, str) and tenant:
            return tenant
        user = _field(body, "user")
        if isinstance(user, str) and user:
            return user
        for name in (tenant_header, *GATEWAY_HEADERS):
            header = _header(body, name)
            if header:
                return header
    except Exception:  # a body the extractor cannot read: the default tenant
        pass
    return default


def _message_text(messages: Any) -> str:
    parts: list[str] = []
    for m in messages:
        role = _field(m, "role")
        content = _field(m, "content")
        if isinstance(content, list):
            content = "".join(
                str(_field(p, "text")) for p in content if isinstance(_field(p, "text"), str)
            )
        parts.append(f"{role if isinstance(role, str) else ''}\n{content or ''}\n")
    return "".join(parts)


def _int_ids(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
        if value.size and (value.min() < 0 or value.max() > 0xFFFFFFFF):
            return None
        return value.astype(np.uint32)
    if isinstance(value, (list, tuple)) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= 0xFFFFFFFF for t in value
    ):
        return np.asarray(value, dtype=np.uint32)
    return None


EMPTY = np.zeros(0, dtype=np.uint32)


def default_tokens(args: Sequence[Any], kwargs: Mapping[Any, Any]) -> np.ndarray:
    """The prompt token ids (or pseudo-tokens) of a request; never raises."""
    try:
        body = _body(args, kwargs)
        if body is None:
            return EMPTY
        for name in _TOKEN_FIELDS:
            ids = _int_ids(_field(body, name))
            if ids is not None:
                return ids
        prompt = _field(body, "prompt")
        ids = _int_ids(prompt)
        if ids is not None and len(ids):
            return ids
        if isinstance(prompt, str):
            return text_to_pseudo_tokens(prompt)
        messages = _field(body, "messages")
        if isinstance(messages, (list, tuple)):
            return text_to_pseudo_tokens(_message_text(messages))
        if isinstance(body, str):
            return text_to_pseudo_tokens(body)
    except Exception:  # a body the extractor cannot read: no tokens
        pass
    return EMPTY


TenantExtractor = Callable[[Sequence[Any], Mapping[Any, Any]], str]
TokensExtractor = Callable[[Sequence[Any], Mapping[Any, Any]], Any]


def estimate_tokens(prompt: int, args: Sequence[Any], kwargs: Mapping[Any, Any]) -> int:
    """What admission control counts for a request: its ``prompt`` (pseudo-)
    tokens plus the output it asks for
    (:func:`fairq.ledger.door.output_tokens`: ``max_tokens`` /
    ``max_completion_tokens``, else
    :data:`fairq.ledger.door.DEFAULT_MAX_TOKENS`, times ``n``); never
    raises."""
    from fairq.ledger.door import DEFAULT_MAX_TOKENS, output_tokens

    out = DEFAULT_MAX_TOKENS
    try:
        out = output_tokens(_body(args, kwargs))
    except Exception:  # a body the extractor cannot read
        pass
    return max(prompt, 1) + out
