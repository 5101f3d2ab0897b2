"""The rule every engine integration's tenant resolver follows (pure Python).

A resolver tries its sources in a configured ``order``; the first that
yields a non-empty string is the request's tenant, none gives ``default``.
:class:`SourceOrder` holds that rule and the checks of its options, each
error naming its field (``tenant.order[1]``, ``tenant.default``); the
engines' resolvers (:class:`fairq.vllm.tenants.TenantResolver`,
:class:`fairq.sglang.tenants.TenantResolver`) name their sources and read
them from the engine's request. :func:`tenant_weights` checks the
per-tenant weights, for the engines' options and the front door alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["GATEWAY_HEADERS", "SourceOrder", "finite_number", "tenant_weights"]

#: The HTTP headers gateways put the tenant in: the Gateway API Inference
#: Extension's and llm-d's (the ``header`` source's default in every engine,
#: and the Ray router's).
GATEWAY_HEADERS = ("x-gateway-inference-fairness-id", "x-llm-d-inference-fairness-id")


class SourceOrder:
    """Base of the engines' tenant resolvers: ``__call__`` returns the first
    non-empty string :meth:`_from` gives for a source in :attr:`order`, else
    :attr:`default`. Subclasses set :attr:`SOURCES` and implement
    :meth:`_from` (which must never raise for a request)."""

    #: the sources a subclass can read, in its default order
    SOURCES: tuple[str, ...] = ()
    order: tuple[str, ...]
    separator: str
    default: str
    #: the string options :meth:`__repr__` shows, after ``order``
    _shown: tuple[str, ...] = ()

    def _set_order(
        self, order: tuple[str, ...] | list[str], separator: str, default: str, **names: str
    ) -> None:
        """Check and set ``order``, ``separator``, ``default`` and the
        subclass's other string options ``names`` (``tenant.<name>`` in
        errors); raises ValueError naming the first bad one, setting nothing."""
        order = tuple(order)
        for i, src in enumerate(order):
            if src not in self.SOURCES:
                raise ValueError(
                    f"tenant.order[{i}] must be one of {', '.join(self.SOURCES)}, got {src!r}"
                )
        if len(set(order)) != len(order):
            raise ValueError(f"tenant.order has a duplicate source: {list(order)}")
        strings = {**names, "separator": separator, "default": default}
        for name, v in strings.items():
            if not isinstance(v, str) or not v:
                raise ValueError(f"tenant.{name} must be a non-empty string, got {v!r}")
        self.order = order
        for name, v in strings.items():
            setattr(self, name, v)
        self._shown = tuple(strings)

    def _check_headers(self, headers: Any, carrier: str) -> tuple[str, ...]:
        """Check the ``headers`` option (non-empty strings; returned lower
        case) and that, with the ``header`` source in :attr:`order`,
        ``carrier`` (the source the front door hands a header's tenant on
        through) comes after it. Call after :meth:`_set_order`."""
        if isinstance(headers, (str, bytes)) or not isinstance(headers, (list, tuple)):
            raise TypeError(f"tenant.headers must be a list of header names, got {headers!r}")
        hdrs = tuple(headers)
        for i, h in enumerate(hdrs):
            if not isinstance(h, str) or not h:
                raise ValueError(f"tenant.headers[{i}] must be a non-empty string, got {h!r}")
        if "header" in self.order and (
            carrier not in self.order or self.order.index(carrier) < self.order.index("header")
        ):
            raise ValueError(
                f"tenant.order: 'header' needs {carrier!r} after it (the front door hands "
                f"the header's tenant on to the engine through it)"
            )
        return tuple(h.lower() for h in hdrs)

    def _header(self, request: Any) -> Any:
        """The first of ``self.headers`` the request's ``headers`` mapping
        holds (only a front door's view of a request has one)."""
        hs = getattr(request, "headers", None)
        if isinstance(hs, Mapping):
            for h in getattr(self, "headers", ()):
                v = hs.get(h)
                if isinstance(v, str) and v:
                    return v
        return None

    def __call__(self, request: Any) -> str:
        """The tenant of ``request``: never raises."""
        return self.resolve(request)[0]

    def resolve(self, request: Any) -> tuple[str, str | None]:
        """``(tenant, the source that named it)``; the source is None where
        none did (the tenant is then :attr:`default`). Never raises."""
        for src in self.order:
            t = self._from(src, request)
            if isinstance(t, str) and t:
                return t, src
        return self.default, None

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__name__}(order={list(self.order)}, {shown})"

    def _from(self, src: str, request: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


def finite_number(name: str, v: Any, *, positive: bool = False) -> float:
    """``v`` as a float, finite and >= 0 (> 0 with ``positive``); else a
    ``TypeError``/``ValueError`` naming ``name``. Shared by the engines'
    options (:mod:`fairq.engineopts`) and the front door
    (:mod:`fairq.ledger.caps`)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, got {v!r}")
    x = float(v)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        kind = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {kind}, got {v!r}")
    return x


def tenant_weights(raw: Any) -> dict[str, float]:
    """Validate ``tenant_weights`` (``{tenant: weight}``, non-empty names,
    finite weights > 0; None: none). Raises ``TypeError``/``ValueError``
    naming the field."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"tenant_weights must be a mapping of tenant -> weight, got {raw!r}")
    weights: dict[str, float] = {}
    for t, w in raw.items():
        if not isinstance(t, str) or not t:
            raise ValueError(f"tenant_weights: tenant names must be non-empty strings, got {t!r}")
        weights[t] = finite_number(f"tenant_weights[{t!r}]", w, positive=True)
    return weights
