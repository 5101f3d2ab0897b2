"""vLLM drop-in: Weighted Fair Queuing across clients (``SchedulingPolicy.WFQ``).

:class:`WFQRequestQueue` has vLLM's full ``RequestQueue`` interface and is
what ``fairq.vllm.create_request_queue("wfq")`` returns. It is the Rust
:class:`fairq.wfq.WFQQueue` (pop, peek, iteration, ``len`` are direct core
calls) plus the code that reads a request's scheduling inputs **once**, at
``add_request``:

- flow (fairness key): by default the request's ``client_id`` attribute if it
  has one (and it is not ``None``), else the request alone; configurable with
  ``flow_key`` (an attribute name, a callable ``request -> hashable | None``,
  or ``None`` for "every request is its own flow");
- ``weight``: the request's ``weight`` attribute, ``default_weight`` (1.0)
  when missing; ``<= 0``, NaN or infinite is a ``ValueError`` from the core
  naming ``weight`` (never replaced by the default: that would hide a client
  bug);
- ``arrival_time`` (0.0 when missing; a tie-break only);
- tokens needed = prompt length (``num_prompt_tokens``, else
  ``len(prompt_token_ids)``) + ``max_tokens`` (``sampling_params.max_tokens``,
  else a ``max_tokens`` attribute, else 0).

:meth:`WFQRequestQueue.settle` charges a finished request's flow its real
tokens instead of the estimate (the scheduler classes of
:mod:`fairq.vllm.scheduler` call it with vLLM's numbers).

``prepend_request`` (preemption) restores a request popped from this queue
with its original virtual times and place; a request this queue never popped
is added fresh. ``remove_request`` is O(log n) by identity (``ValueError`` if
absent); ``remove_requests`` removes every occurrence of each request and
ignores absent ones. Adding a request that is already queued is a
``ValueError`` (as in fairq's ``PriorityRequestQueue``). Empty
``pop_request``/``peek_request``: ``IndexError``.

Requests without a flow (no ``client_id``) are each their own flow. With the
default ``virtual_clock="start"`` (exactly ``ALGORITHMS.md`` section 3) they
are served shortest-first and a long request can wait forever behind a steady
stream of shorter ones (see the warning in :mod:`fairq.wfq`). Pass
``virtual_clock="finish"`` (self-clocked fair queueing: ``V`` advances to the
finish tag of each popped request) to bound every request's wait, e.g.
``create_request_queue("wfq", virtual_clock="finish")``; and/or set
``client_id`` (or ``flow_key``) to get per-client fairness.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Literal

from fairq._core import WFQQueue
from fairq.ledger.hooks import StepHook
from fairq.vllm._base import RequestQueue

__all__ = ["WFQRequestQueue", "WfqSettlement", "request_tokens"]

FlowKey = str | Callable[[Any], Hashable | None] | None
VirtualClock = Literal["start", "finish"]

_MISSING = object()


def _count(field: str, v: Any) -> int:
    """``v`` as an int >= 0: ints (and numpy ints) as they are, finite floats
    truncated; anything else raises naming ``field``."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"request {field} must be a finite number >= 0, got {v!r}")
        n = int(v)
    elif isinstance(v, bool):
        raise TypeError(f"request {field} must be an int, got bool {v!r}")
    else:
        try:
            n = operator.index(v)
        except TypeError:
            raise TypeError(f"request {field} must be an int, got {type(v).__name__}") from None
    if n < 0:
        raise ValueError(f"request {field} must be >= 0, got {v!r}")
    return n


def request_tokens(request: Any) -> int:
    """Prompt length + max new tokens of a vLLM-like request."""
    n = getattr(request, "num_prompt_tokens", None)
    if n is None:
        ids = getattr(request, "prompt_token_ids", None)
        if ids is None:
            raise TypeError(
                "request has neither a num_prompt_tokens nor a prompt_token_ids attribute: "
                f"{type(request).__name__}"
            )
        try:
            n = len(ids)
        except TypeError:
            raise TypeError(
                f"request prompt_token_ids must be a sequence, got {type(ids).__name__}"
            ) from None
    else:
        n = _count("num_prompt_tokens", n)
    sp = getattr(request, "sampling_params", None)
    mt = getattr(sp, "max_tokens", None) if sp is not None else None
    if mt is None:
        mt = getattr(request, "max_tokens", None)
    return n + (_count("max_tokens", mt) if mt is not None else 0)


class WFQRequestQueue(WFQQueue, RequestQueue):
    """Weighted fair queue with vLLM's ``RequestQueue`` interface.

    ``WFQRequestQueue(flow_key="client_id", default_weight=1.0,
    *, virtual_clock="start")``; see the module docstring for what is read
    from each request. ``virtual_clock``: ``"start"`` (``V = max(V, S)`` on
    pop, ``ALGORITHMS.md`` section 3) or ``"finish"`` (``V = max(V, F)``:
    bounded waiting for requests that are their own flow); anything else is a
    ``ValueError``.
    """

    def __new__(
        cls,
        flow_key: FlowKey = "client_id",
        default_weight: float = 1.0,
        *,
        virtual_clock: VirtualClock = "start",
    ) -> WFQRequestQueue:
        return super().__new__(cls, virtual_clock=virtual_clock)

    def __init__(
        self,
        flow_key: FlowKey = "client_id",
        default_weight: float = 1.0,
        *,
        virtual_clock: VirtualClock = "start",
    ) -> None:
        if not (isinstance(default_weight, int | float) and math.isfinite(default_weight)) or (
            default_weight <= 0
        ):
            raise ValueError(f"default_weight must be a finite number > 0, got {default_weight!r}")
        if flow_key is not None and not (isinstance(flow_key, str) or callable(flow_key)):
            raise TypeError(
                "flow_key must be an attribute name, a callable or None, "
                f"got {type(flow_key).__name__}"
            )
        self._flow_key = flow_key
        self._default_weight = float(default_weight)

    def _flow_of(self, request: Any) -> Hashable | None:
        fk = self._flow_key
        if fk is None:
            return None
        if isinstance(fk, str):
            return getattr(request, fk, None)
        return fk(request)

    def _read(self, request: Any) -> tuple[Hashable | None, int, Any, float]:
        """The request's (flow, tokens, weight, arrival), type-checked; the
        weight's value (finite, > 0) is validated by the core when added."""
        weight = getattr(request, "weight", _MISSING)
        if weight is _MISSING or weight is None:
            weight = self._default_weight
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise TypeError(f"request weight must be a number, got {type(weight).__name__}")
        arrival = getattr(request, "arrival_time", 0.0)
        if isinstance(arrival, bool) or not isinstance(arrival, numbers.Real):
            raise TypeError(f"request arrival_time must be a number, got {type(arrival).__name__}")
        # Checked here, not left to the core, only to name the request's
        # attribute (the core's field is ``arrival``).
        try:
            arrival = float(arrival)
        except OverflowError:
            raise ValueError(f"request arrival_time is too large, got {arrival!r}") from None
        if not math.isfinite(arrival):
            raise ValueError(f"request arrival_time must be a finite number, got {arrival!r}")
        return self._flow_of(request), request_tokens(request), weight, arrival

    def add_request(self, request: Any) -> None:
        """Queue ``request`` with its flow, weight, arrival and size read now."""
        # Read first: a flow_key callback runs user code that may itself queue
        # this request, so the duplicate check must come after it.
        flow, tokens, weight, arrival = self._read(request)
        if request in self:
            raise ValueError("request is already in the queue")
        self.add(request, tokens=tokens, flow=flow, weight=weight, arrival=arrival)

    def pop_request(self) -> Any:
        """Pop the request with the smallest virtual finish time (``IndexError`` if empty)."""
        return self.pop()

    def peek_request(self) -> Any:
        """The request ``pop_request`` would return (``IndexError`` if empty)."""
        return self.peek()

    def prepend_request(self, request: Any) -> None:
        """Put back a preempted request with its original virtual times."""
        if self.remembers(request):
            self.prepend(request)
        else:
            self.add_request(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        """``prepend_request`` for each; fresh ones are validated first (all or nothing)."""
        rs = list(requests)
        fresh = {id(r): self._read(r) for r in rs if not self.remembers(r)}
        seen: set[int] = set()
        for r in rs:
            if id(r) in fresh and (r in self or id(r) in seen):
                raise ValueError("request is already in the queue")
            seen.add(id(r))
        # the core validates the fresh ones as a batch (flows chain): all or nothing
        self.check_adds([fresh[id(r)] for r in rs if id(r) in fresh])
        for r in rs:
            args = fresh.get(id(r))
            if args is None:
                self.prepend(r)
            else:
                flow, tokens, weight, arrival = args
                self.add(r, tokens=tokens, flow=flow, weight=weight, arrival=arrival)

    def remove_request(self, request: Any) -> None:
        """Remove ``request`` (by identity) in O(log n); ``ValueError`` if absent."""
        self.remove(request)

    def remove_requests(self, requests: Iterable[Any]) -> None:
        """Remove every occurrence of each request; absent ones are ignored."""
        for r in requests:
            while self.discard(r):
                pass

    def settle(self, request: Any, used_tokens: int) -> float:
        """Charge ``request``'s flow what it really used: its tags were
        computed from the estimate (prompt + ``max_tokens``); the difference
        ``estimate - used_tokens`` goes back to the flow
        (:meth:`fairq.WFQQueue.refund_flow`), so its next request starts
        where the real tokens, not the estimate, put it. Call it once, when
        the request is done. Returns the virtual time given back. A request
        without a flow, or with nothing unused, changes nothing."""
        flow, estimate, weight, _ = self._read(request)
        unused = estimate - int(used_tokens)
        if flow is None or unused <= 0:
            return 0.0
        return self.refund_flow(flow, float(unused), float(weight))

    def __repr__(self) -> str:
        return (
            f"WFQRequestQueue(len={len(self)}, virtual_time={self.virtual_time}, "
            f"virtual_clock={self.virtual_clock!r})"
        )


class WfqSettlement(StepHook):
    """The WFQ queue's hooks in fairq's vLLM scheduler classes (the same
    hooks as :class:`fairq.vllm.fair.FairState`): each finished or aborted
    request's flow is settled (:meth:`WFQRequestQueue.settle`) with what it
    really used, the prompt tokens vLLM computed past its prefix hit at its
    first scheduling plus its output tokens. ``requests``: the scheduler's
    ``requests`` dict (the in-flight requests a saved state settles)."""

    def __init__(self, queue: WFQRequestQueue, requests: Mapping[str, Any] | None = None) -> None:
        self.queue = queue
        self.requests: Mapping[str, Any] = {} if requests is None else requests
        #: each request's prefix-cache hit when first scheduled, until settled
        self.hits: dict[str, int] = {}

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        for new in output.scheduled_new_reqs:
            self.hits.setdefault(new.req_id, new.num_computed_tokens)

    def output_snapshot(
        self, scheduler_output: Any, requests: Mapping[str, Any]
    ) -> list[tuple[str, Any, int]]:
        return [
            (rid, requests[rid], 0)
            for rid in scheduler_output.num_scheduled_tokens
            if rid in requests
        ]

    def after_update(self, snapshot: list[tuple[str, Any, int]]) -> None:
        self._settle(r for _, r, _ in snapshot)

    def after_finish(self, before: Mapping[str, Any]) -> None:
        self._settle(r for r in before.values() if r is not None)

    def _used(self, r: Any, hit: int) -> int:
        return int(r.num_prompt_tokens) - hit + int(r.num_output_tokens)

    def _settle(self, requests: Iterable[Any]) -> None:
        for r in requests:
            if r.is_finished() and r.request_id in self.hits:
                hit = self.hits.pop(r.request_id)
                self.queue.settle(r, self._used(r, hit))

    # -- saved state (fairq.vllm.persist) -----------------------------------
    def persisted_options(self) -> dict[str, Any]:
        """What a saved state depends on: the virtual clock and what a flow is."""
        fk = self.queue._flow_key
        return {
            "policy": "wfq",
            "virtual_clock": self.queue.virtual_clock,
            "flow_key": fk if fk is None or isinstance(fk, str) else "tenant",
            "default_weight": self.queue._default_weight,
        }

    def persisted(self) -> dict[str, Any]:
        """The queue's ``state_dict()`` as if every request were aborted now:
        the waiting requests' tags dropped (removal never rewinds a flow's
        ``F_last``), and each in-flight request's unused estimate listed as
        a refund (what its settlement at an abort would give back)."""
        doc = self.queue.state_dict()
        doc["waiting"] = []
        refunds = []
        for rid, hit in self.hits.items():
            r = self.requests.get(rid)
            if r is None or r.is_finished():
                continue
            flow, estimate, weight, _ = self.queue._read(r)
            unused = estimate - self._used(r, hit)
            if flow is not None and unused > 0:
                refunds.append({"flow": flow, "tokens": unused, "weight": float(weight)})
        return {"queue": doc, "refunds": refunds}

    def restore(self, saved: Any) -> None:
        """Load :meth:`persisted`'s output into the (empty) queue, then give
        the in-flight requests' unused estimates back to their flows.
        Validates everything first; raises (changing nothing) if invalid."""
        if (
            not isinstance(saved, dict)
            or not isinstance(saved.get("refunds"), list)
            or "queue" not in saved
        ):
            raise ValueError("state must be a mapping with queue and refunds")
        refunds = []
        for i, e in enumerate(saved["refunds"]):
            ok = isinstance(e, dict) and isinstance(e.get("flow"), (str, int))
            tokens, weight = (e.get("tokens"), e.get("weight")) if ok else (None, None)
            if not (
                ok
                and isinstance(tokens, (int, float))
                and isinstance(weight, (int, float))
                and math.isfinite(tokens)
                and tokens >= 0
                and math.isfinite(weight)
                and weight > 0
            ):
                raise ValueError(f"state.refunds[{i}] must be {{flow, tokens >= 0, weight > 0}}")
            refunds.append((e["flow"], float(tokens), float(weight)))
        try:
            self.queue.load_state_dict(saved["queue"])
        except (TypeError, ValueError) as e:
            raise type(e)(f"state.queue: {e}") from None
        for flow, tokens, weight in refunds:
            self.queue.refund_flow(flow, tokens, weight)
