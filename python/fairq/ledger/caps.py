"""Admission control: per-tenant and global caps on what a server holds, and
per-tenant token rates, with fair refusals (pure Python, engine-neutral).

One object, :class:`AdmissionControl`, decides at a front door (vLLM's
API server, the Ray Serve router, SGLang's HTTP server) whether a new request
is accepted (:meth:`AdmissionControl.offer`, one call, ``O(log n)`` in the
tenants) and is told when an accepted one leaves
(:meth:`AdmissionControl.release`). It keeps its **own exact count** of what
each tenant holds (accepted, not yet answered: waiting or running in the
engine), so the decision never waits for the engine's state, and ranks
tenants by the active policy's account of how far each is over its fair
share (:meth:`fairq.LocalScheduler.share_lead`, fed by
:meth:`AdmissionControl.set_accounts` from the scheduler's published
metrics: VTC's counter, minus DLPM's deficit, LAS's attained service, WFQ's
``F_last - V``).

The rule (``docs/design/admission.md`` argues it):

1. **Per-tenant caps** (``tenant_max_requests``, ``tenant_max_tokens``,
   each scaled by the tenant's weight, at least one request): a tenant
   never holds more; past them its request is refused.
2. **Token rate** (``tenant_token_rate`` tokens/s, a bucket of
   ``tenant_token_burst`` tokens; scaled by weight): a request whose tokens
   the bucket does not hold is refused; the bucket pays only for accepted
   requests.
3. **Global caps** (``max_requests``, ``max_tokens``: ``G``). Below them
   everything is accepted. Once a request would pass one, the request is
   refused if its tenant is the one furthest over its fair share (its
   *lead*, the policy's account plus its held tokens over its weight, is at
   least every other holding tenant's), or if the tenant already holds its
   weighted share of ``G`` (``G * w / W``, ``W`` the weights of the tenants
   holding something, itself included; at least one request, and a tenant
   holding no tokens is within its token share). Otherwise (a light tenant arriving
   at a queue the heavy one filled) it is accepted: the global cap is soft.
   The **hard bound** is ``2 G``: past it every request is refused. So a
   tenant under its share is never refused while a heavier one holds work,
   unless the server holds twice its global cap.
4. A request larger than a cap it alone would pass (its tokens over
   ``max_tokens``, ``tenant_max_tokens`` or the burst) can never be
   accepted: reason ``too_large``.

What is accepted is never dropped by admission control: it only decides at
the door, before anything is spent on the request. A refusal carries a
``retry_after_s`` estimated from the tenant's position: the time the
tenant's recent completion rate takes to drain what it holds beyond what it
may hold, or the bucket's refill time.

Not thread-safe by itself: callers serialise (the front doors run it on one
event loop, or under a lock).
"""

from __future__ import annotations

import heapq
import math
import operator
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fairq.tenancy import tenant_weights

__all__ = ["AdmissionControl", "Limits", "Refusal", "REASONS"]

#: Why a request is refused (the ``reason`` label of the refusal metric).
REASONS = ("tenant_requests", "tenant_tokens", "tenant_rate", "global", "global_hard", "too_large")

#: Retry-After bounds (seconds), and the estimate before any completion
#: was seen (nothing to measure a drain rate by yet).
MIN_RETRY_S = 1.0
MAX_RETRY_S = 300.0
UNKNOWN_RETRY_S = 10.0

#: Tenants kept with no request held before idle ones are forgotten (their
#: counts restart at 0 if they come back; a full token bucket is what a new
#: tenant gets anyway).
MAX_IDLE_TENANTS = 10_000

_INT_KEYS = ("max_requests", "max_tokens", "tenant_max_requests", "tenant_max_tokens")
_RATE_KEYS = ("tenant_token_rate", "tenant_token_burst")


@dataclass(frozen=True)
class Limits:
    """Validated limits (every field ``None``: unlimited), checked when
    built, directly or by :meth:`from_mapping` (the ``limits`` mapping of an
    engine's options), each error naming its field as ``limits.<field>``."""

    max_requests: int | None = None
    max_tokens: int | None = None
    tenant_max_requests: int | None = None
    tenant_max_tokens: int | None = None
    #: tokens per second per unit of weight
    tenant_token_rate: float | None = None
    #: the bucket's size (default: ten seconds of the rate)
    tenant_token_burst: float | None = None

    def __post_init__(self) -> None:
        """Integers ``>= 1`` for the caps, finite numbers ``> 0`` for the
        rate and burst (stored as floats); a burst needs a rate. Raises
        ``ValueError``/``TypeError`` naming the field as ``limits.<field>``."""
        for key in _INT_KEYS:
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"limits.{key} must be an integer >= 1, got {v!r}")
        for key in _RATE_KEYS:
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"limits.{key} must be a number, got {v!r}")
            try:
                x = float(v)
            except OverflowError:  # an int past a float's range
                x = math.inf
            if not math.isfinite(x) or x <= 0:
                raise ValueError(f"limits.{key} must be a finite number > 0, got {v!r}")
            object.__setattr__(self, key, x)
        if self.tenant_token_burst is not None and self.tenant_token_rate is None:
            raise ValueError("limits.tenant_token_burst needs limits.tenant_token_rate")

    @classmethod
    def from_mapping(cls, raw: Any) -> Limits:
        """Validate ``raw`` (a mapping of the fields; ``None``: no limits),
        as the constructor does, and reject unknown keys."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TypeError(f"limits must be a mapping of limit -> value, got {raw!r}")
        for key in raw:
            if key not in _INT_KEYS + _RATE_KEYS:
                known = ", ".join(_INT_KEYS + _RATE_KEYS)
                raise ValueError(f"unknown option limits.{key} (options: {known})")
        return cls(**{k: v for k, v in raw.items() if v is not None})

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return any(getattr(self, k) is not None for k in _INT_KEYS + _RATE_KEYS)

    @property
    def burst(self) -> float | None:
        """The bucket's size per unit of weight (None: no rate)."""
        if self.tenant_token_rate is None:
            return None
        if self.tenant_token_burst is not None:
            return self.tenant_token_burst
        return 10.0 * self.tenant_token_rate


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: ``reason`` (one of :data:`REASONS`),
    ``tenant``, ``retry_after_s`` (``None`` for ``too_large``: retrying
    cannot help) and a human ``message``."""

    reason: str
    tenant: str
    retry_after_s: float | None
    message: str

    @property
    def status(self) -> int:
        """The HTTP status a front door answers: 413 for ``too_large``, else 429."""
        return 413 if self.reason == "too_large" else 429

    def retry_after_header(self) -> str | None:
        """``Retry-After`` in whole seconds (rounded up), or None."""
        if self.retry_after_s is None:
            return None
        return str(math.ceil(self.retry_after_s))

    def body(self) -> dict[str, Any]:
        """The JSON error body (OpenAI's error shape)."""
        return {
            "error": {
                "message": self.message,
                "type": "rate_limit_exceeded" if self.status == 429 else "request_too_large",
                "code": self.status,
                "param": None,
                "fairq": {"reason": self.reason, "tenant": self.tenant},
            }
        }


@dataclass
class _Tenant:
    requests: int = 0
    tokens: int = 0
    #: token bucket level, last refill time
    bucket: float = 0.0
    refilled: float = 0.0
    #: completions per second (exponentially weighted), last completion time
    rate: float = 0.0
    last_done: float | None = None
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)


class _Leads:
    """Max-heap of tenants' leads with lazy deletion: ``top(excluding)``
    in amortised ``O(log n)``."""

    def __init__(self) -> None:
        self.lead: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def set(self, tenant: str, value: float | None) -> None:
        if value is None:
            self.lead.pop(tenant, None)
        else:
            self.lead[tenant] = value
            heapq.heappush(self._heap, (-value, tenant))
        if len(self._heap) > 4 * len(self.lead) + 64:
            self._heap = [(-v, t) for t, v in self.lead.items()]
            heapq.heapify(self._heap)

    def top(self, excluding: str) -> float | None:
        """The largest lead of a tenant other than ``excluding``."""
        heap, held = self._heap, []
        out = None
        while heap:
            neg, t = heap[0]
            if self.lead.get(t) != -neg:
                heapq.heappop(heap)  # stale
                continue
            if t == excluding:
                held.append(heapq.heappop(heap))
                continue
            out = -neg
            break
        for e in held:
            heapq.heappush(heap, e)
        return out


class AdmissionControl:
    """The front door's decision (see the module doc). ``limits``: the
    validated :class:`Limits`; ``weights``: ``{tenant: weight}`` (others 1;
    finite and > 0, else a ``ValueError`` naming ``tenant_weights[...]``);
    ``clock``: seconds (monotonic by default)."""

    def __init__(
        self,
        limits: Limits,
        weights: Mapping[str, float] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(limits, Limits):
            raise TypeError(f"limits must be a Limits (Limits.from_mapping), got {limits!r}")
        self.limits = limits
        self.weights = tenant_weights(weights)
        self.clock = clock
        self._t: dict[str, _Tenant] = {}
        self._accounts: dict[str, float] = {}
        self._leads = _Leads()
        #: totals held (accepted, not released)
        self.requests = 0
        self.tokens = 0
        #: weights of the tenants holding something
        self._active_weight = 0.0
        self._rate = 0.0
        self._last_done: float | None = None
        self._sweep_at = MAX_IDLE_TENANTS

    # -- inputs -------------------------------------------------------------
    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def set_accounts(self, accounts: Mapping[str, float]) -> None:
        """The policy's account of each tenant (``share_lead``, larger =
        further over its share); tenants not given count 0. ``O(n)``."""
        self._accounts = dict(accounts)
        for t, st in self._t.items():
            if st.requests:
                self._leads.set(t, self._lead(t, st.tokens))

    def _lead(self, tenant: str, tokens: int) -> float:
        return self._accounts.get(tenant, 0.0) + tokens / self.weight(tenant)

    def _state(self, tenant: str, now: float) -> _Tenant:
        st = self._t.get(tenant)
        if st is None:
            if len(self._t) >= self._sweep_at:
                self._forget_idle(now)
            st = self._t[tenant] = _Tenant()
            burst = self.limits.burst
            if burst is not None:
                st.bucket = burst * self.weight(tenant)
            st.refilled = now
        return st

    def _forget_idle(self, now: float) -> None:
        """Forget the tenants that hold nothing and whose bucket has
        refilled (bounded state under tenant churn; amortised ``O(1)``)."""
        lim = self.limits
        for t in [t for t, st in self._t.items() if st.requests == 0]:
            st = self._t[t]
            if lim.burst is not None and lim.tenant_token_rate is not None:
                w = self.weight(t)
                if st.bucket + (now - st.refilled) * lim.tenant_token_rate * w < lim.burst * w:
                    continue
            del self._t[t]
        self._sweep_at = max(MAX_IDLE_TENANTS, 2 * len(self._t))

    # -- the decision -------------------------------------------------------
    def offer(self, tenant: str, tokens: int, now: float | None = None) -> Refusal | None:
        """Accept (``None``; the request is now held, :meth:`release` it
        when it leaves) or refuse (a :class:`Refusal`; nothing changed but
        the refusal count) one request of ``tenant`` with ``tokens`` tokens
        (an int; below 0 counts as 0). A ``tokens`` that is not an int is a
        ``TypeError`` and changes nothing."""
        tokens = _tokens(tokens)
        now = self.clock() if now is None else now
        st = self._state(tenant, now)
        refusal = self._check(tenant, st, tokens, now)
        if refusal is not None:
            st.refused[refusal.reason] = st.refused.get(refusal.reason, 0) + 1
            return refusal
        if self.limits.burst is not None:
            st.bucket -= tokens
        if st.requests == 0:
            self._active_weight += self.weight(tenant)
        st.requests += 1
        st.tokens += tokens
        st.accepted += 1
        self.requests += 1
        self.tokens += tokens
        self._leads.set(tenant, self._lead(tenant, st.tokens))
        return None

    def _check(self, tenant: str, st: _Tenant, n: int, now: float) -> Refusal | None:
        lim, w = self.limits, self.weight(tenant)
        cap_r = _scaled(lim.tenant_max_requests, w)
        cap_t = _scaled(lim.tenant_max_tokens, w)
        burst = None if lim.burst is None else lim.burst * w
        for cap, what in ((cap_t, "limits.tenant_max_tokens"), (burst, "the token burst")):
            if cap is not None and n > cap:
                return self._too_large(tenant, n, f"{what} ({cap:g})")
        if lim.max_tokens is not None and n > lim.max_tokens:
            return self._too_large(tenant, n, f"limits.max_tokens ({lim.max_tokens})")
        if cap_r is not None and st.requests + 1 > cap_r:
            return self._refuse("tenant_requests", tenant, st, st.requests + 1 - cap_r, now)
        if cap_t is not None and st.tokens + n > cap_t:
            excess = (st.tokens + n - cap_t) / max(st.tokens, 1) * st.requests
            return self._refuse("tenant_tokens", tenant, st, excess, now)
        if burst is not None and lim.tenant_token_rate is not None:
            rate = lim.tenant_token_rate * w
            st.bucket = min(burst, st.bucket + (now - st.refilled) * rate)
            st.refilled = now
            if st.bucket < n:
                wait = (n - st.bucket) / rate
                return self._refusal("tenant_rate", tenant, wait, "its token rate")
        return self._check_global(tenant, st, n, now)

    def _check_global(self, tenant: str, st: _Tenant, n: int, now: float) -> Refusal | None:
        g_r, g_t = self.limits.max_requests, self.limits.max_tokens
        over_r = g_r is not None and self.requests + 1 > g_r
        over_t = g_t is not None and self.tokens + n > g_t
        if not (over_r or over_t):
            return None
        if (g_r is not None and self.requests + 1 > 2 * g_r) or (
            g_t is not None and self.tokens + n > 2 * g_t
        ):
            return self._refuse("global_hard", tenant, st, 1, now)
        w = self.weight(tenant)
        active = self._active_weight + (0.0 if st.requests else w)
        excess = 0.0
        if g_r is not None:
            excess = max(excess, st.requests + 1 - max(1.0, g_r * w / active))
        if g_t is not None and st.tokens:
            excess = max(excess, (st.tokens + n - g_t * w / active) / st.tokens * st.requests)
        other = self._leads.top(excluding=tenant)
        heaviest = other is None or self._lead(tenant, st.tokens + n) >= other
        if heaviest or excess > 0:
            return self._refuse("global", tenant, st, max(excess, 1.0), now)
        return None

    def _too_large(self, tenant: str, n: int, cap: str) -> Refusal:
        msg = f"request of {n} tokens from tenant {tenant!r} is larger than {cap}"
        return Refusal("too_large", tenant, None, msg)

    def _refuse(self, reason: str, tenant: str, st: _Tenant, excess: float, now: float) -> Refusal:
        """A refusal whose Retry-After is the time to drain ``excess``
        requests at the tenant's completion rate (else the server's, shared
        by weight; else :data:`UNKNOWN_RETRY_S`)."""
        rate = _decayed(st.rate, st.last_done, now)
        if rate <= 0:
            total = _decayed(self._rate, self._last_done, now)
            share = self.weight(tenant) / max(self._active_weight, self.weight(tenant))
            rate = total * share
        wait = excess / rate if rate > 0 else UNKNOWN_RETRY_S
        what = {
            "tenant_requests": "its request cap",
            "tenant_tokens": "its token cap",
            "global": "its fair share of the server's capacity",
            "global_hard": "the server's hard capacity bound",
        }[reason]
        return self._refusal(reason, tenant, wait, what)

    def _refusal(self, reason: str, tenant: str, wait: float, what: str) -> Refusal:
        wait = min(max(wait, MIN_RETRY_S), MAX_RETRY_S)
        msg = f"tenant {tenant!r} is over {what}; retry after {math.ceil(wait)} s"
        return Refusal(reason, tenant, wait, msg)

    # -- leaving --------------------------------------------------------------
    def release(self, tenant: str, tokens: int, now: float | None = None) -> None:
        """An accepted request of ``tenant`` with ``tokens`` tokens left
        (answered, failed or cancelled): the ``tokens`` it was offered with.
        A tenant holding no request is a ``KeyError``, more tokens than the
        tenant holds a ``ValueError``; either changes nothing."""
        tokens = _tokens(tokens)
        st = self._t.get(tenant)
        if st is None or st.requests <= 0:
            raise KeyError(f"tenant {tenant!r} holds no request")
        if tokens > st.tokens or (st.requests == 1 and tokens != st.tokens):
            raise ValueError(
                f"tenant {tenant!r} holds {st.tokens} tokens in {st.requests} requests; "
                f"cannot release a request of {tokens}"
            )
        now = self.clock() if now is None else now
        st.requests -= 1
        st.tokens -= tokens
        self.requests -= 1
        self.tokens -= tokens
        st.rate, st.last_done = _observe(st.rate, st.last_done, now)
        self._rate, self._last_done = _observe(self._rate, self._last_done, now)
        if st.requests == 0:
            self._active_weight -= self.weight(tenant)
            if abs(self._active_weight) < 1e-9 or self.requests == 0:
                self._active_weight = 0.0
            self._leads.set(tenant, None)
        else:
            self._leads.set(tenant, self._lead(tenant, st.tokens))

    # -- introspection ------------------------------------------------------
    def held(self, tenant: str) -> tuple[int, int]:
        """``(requests, tokens)`` ``tenant`` holds."""
        st = self._t.get(tenant)
        return (st.requests, st.tokens) if st else (0, 0)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per tenant: ``held_requests``, ``held_tokens``, ``accepted``,
        ``refused`` (by reason)."""
        return {
            t: {
                "held_requests": st.requests,
                "held_tokens": st.tokens,
                "accepted": st.accepted,
                "refused": dict(st.refused),
            }
            for t, st in self._t.items()
        }


def _tokens(tokens: Any) -> int:
    """A request's tokens as :meth:`AdmissionControl.offer` counts them."""
    if isinstance(tokens, bool):
        raise TypeError(f"tokens must be an int, got {tokens!r}")
    try:
        return max(operator.index(tokens), 0)
    except TypeError:
        raise TypeError(f"tokens must be an int, got {tokens!r}") from None


def _scaled(cap: int | None, w: float) -> int | None:
    return None if cap is None else max(1, int(cap * w))


#: Time constant (s) of the completion-rate estimate.
_TAU = 10.0


def _observe(rate: float, last: float | None, now: float) -> tuple[float, float]:
    """One more completion at ``now``: the rate decays over the gap, plus one
    completion's worth (an exponentially weighted count over ``_TAU``)."""
    return _decayed(rate, last, now) + 1.0 / _TAU, now


def _decayed(rate: float, last: float | None, now: float) -> float:
    if last is None:
        return 0.0
    return rate * math.exp(-max(now - last, 0.0) / _TAU)
