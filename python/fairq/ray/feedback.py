"""Replica-side feedback for the D2LPM router (no Ray import at module level).

A replica tells the routers two things the router cannot see: how many output
tokens a finished request generated (D2LPM charges ``w_q`` per output token to
the tenant on that replica) and which cached prefixes its engine evicted (the
router's global prefix tree stops believing the replica holds them).

The channel is Ray Serve's routing-stats hook: Serve calls the deployment's
``record_routing_stats()`` every ``request_routing_stats_period_s`` seconds,
the controller broadcasts the returned dict to every router of the deployment
with the replica list, and the router reads it as ``replica.routing_stats``
when its ``update_replicas`` runs. We chose it over a deployment method the
router would call because it is Ray's public, documented path; it needs no
actor handle or extra RPC in the router, never blocks a request (the router
reads what has arrived) and reaches *every* router of the deployment (one per
handle and per proxy), which all keep their own D2LPM state. Its cost is
delay: a finish is charged up to one stats period (plus the controller's
broadcast) after it happened, so a tenant's deficit on a replica runs ahead by
at most the output tokens it finished there in one period.

``ReplicaFeedback`` keeps the last ``capacity`` events, numbered; each router
applies the ones it has not seen (per replica, by number) and counts any it
missed because more than ``capacity`` happened between two broadcasts
(``FairqD2LPMRouter.feedback_lost``).

The same entry carries the routers' shared view (:mod:`fairq.ray.view`):
``record_start`` when the replica takes a request (tenant, the prompt's first
``view_tokens`` token ids, its length), the tenant in each finish, and, once
``record_start`` has been called, the ids of the requests the replica holds
now (``inflight``) with a publication stamp (``time``).
"""

from __future__ import annotations

import operator
import threading
import time
import uuid
from collections import OrderedDict, deque
from typing import Any

#: Key of fairq's entry in the routing-stats dict.
FEEDBACK_KEY = "fairq"


def current_request_id() -> str | None:
    """The internal request id of the Serve request being handled (the id the
    router sees as ``PendingRequest.metadata.internal_request_id``), or None
    outside a request."""
    try:
        from ray.serve.context import _get_serve_request_context
    except ImportError:  # pragma: no cover - fairq[ray] not installed
        return None
    ctx = _get_serve_request_context()
    rid = getattr(ctx, "_internal_request_id", "") or getattr(ctx, "request_id", "")
    return rid or None


def _request_id(request_id: str | None) -> str:
    """``request_id``, or the current Serve request's; ValueError naming it."""
    rid = request_id if request_id is not None else current_request_id()
    if not isinstance(rid, str) or not rid:
        raise ValueError(
            f"request_id must be a non-empty str (none given outside a request), got {rid!r}"
        )
    return rid


class ReplicaFeedback:
    """Numbered finish and eviction events, read by the routers.

    Use it in a deployment::

        @serve.deployment(request_router_config=fairq_router_config(...))
        class Engine:
            def __init__(self):
                self.feedback = ReplicaFeedback()

            async def __call__(self, body):
                out = ...  # generate
                self.feedback.record_finish(output_tokens=len(out))
                return out

            def record_routing_stats(self) -> dict:
                return self.feedback.routing_stats()

    Thread-safe (engines report from their own threads).

    For the routers' shared view, call :meth:`record_start` when a request
    arrives (before it waits for the engine) and :meth:`record_finish` on
    every way out, failures included (``output_tokens=0``).

    Args:
        capacity: events kept for routers that have not read them yet (> 0).
        key: the routing-stats key (the router's ``feedback_key``).
        view_tokens: prompt token ids a start event carries (>= 0; the
            prompt's length is always sent): what the other routers' prefix
            trees learn; each routing-stats payload carries up to
            ``capacity`` events of this size.
        max_inflight: started requests remembered until their finish (> 0;
            the oldest are dropped past it, so a lost finish cannot leak).
    """

    def __init__(
        self,
        capacity: int = 4096,
        key: str = FEEDBACK_KEY,
        view_tokens: int = 2048,
        max_inflight: int = 65536,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty str, got {key!r}")
        if isinstance(view_tokens, bool) or not isinstance(view_tokens, int) or view_tokens < 0:
            raise ValueError(f"view_tokens must be an int >= 0, got {view_tokens!r}")
        if isinstance(max_inflight, bool) or not isinstance(max_inflight, int) or max_inflight < 1:
            raise ValueError(f"max_inflight must be an int >= 1, got {max_inflight!r}")
        self.key = key
        self.epoch = uuid.uuid4().hex
        self.view_tokens = view_tokens
        self.max_inflight = max_inflight
        self._seq = 0
        self._events: deque[list[Any]] = deque(maxlen=capacity)
        #: started and not finished: request id -> tenant
        self._inflight: OrderedDict[str, str] = OrderedDict()
        self._view = False  # record_start was called: publish the view
        self._lock = threading.Lock()

    def record_start(
        self,
        request_id: str | None = None,
        tenant: str = "default",
        tokens: Any = (),
        input_len: int | None = None,
    ) -> int:
        """The replica took a request of ``tenant`` whose prompt is ``tokens``
        (token ids; ``input_len``: its length, default ``len(tokens)``).
        ``request_id`` defaults to the current Serve request's internal id.
        Returns the event number."""
        rid = _request_id(request_id)
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"tenant must be a non-empty str, got {tenant!r}")
        # a sequence (list, tuple, numpy array) is sliced as it is; any other
        # iterable (a generator) is read once
        seq = (
            tokens
            if hasattr(tokens, "__len__") and hasattr(tokens, "__getitem__")
            else list(tokens)
        )
        try:
            ids = [operator.index(t) for t in seq[: self.view_tokens]]
        except TypeError:
            raise ValueError("tokens must be token ids (ints) in 0..2**32-1") from None
        if any(t < 0 or t > 0xFFFFFFFF for t in ids):
            raise ValueError("tokens must be token ids in 0..2**32-1")
        n = len(seq) if input_len is None else input_len
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"input_len must be an int >= 0, got {input_len!r}")
        with self._lock:
            self._view = True
            self._inflight[rid] = tenant
            if len(self._inflight) > self.max_inflight:
                self._inflight.popitem(last=False)
        return self._push(["start", rid, tenant, ids, n])

    def record_finish(self, request_id: str | None = None, output_tokens: int = 0) -> int:
        """A request finished after ``output_tokens`` output tokens.
        ``request_id`` defaults to the current Serve request's internal id.
        Returns the event number."""
        rid = _request_id(request_id)
        if isinstance(output_tokens, bool) or not isinstance(output_tokens, int):
            raise TypeError(f"output_tokens must be an int, got {type(output_tokens).__name__}")
        if output_tokens < 0:
            raise ValueError(f"output_tokens must be >= 0, got {output_tokens}")
        with self._lock:
            tenant = self._inflight.pop(rid, None)
        return self._push(["finish", rid, output_tokens, tenant])

    def record_evict(self, tokens: Any, kept: int = 0) -> int:
        """The engine evicted ``tokens[kept:]`` from its prefix cache (it keeps
        ``tokens[:kept]``). Returns the event number."""
        ids = [int(t) for t in tokens]
        if any(t < 0 or t > 0xFFFFFFFF for t in ids):
            raise ValueError("tokens must be token ids in 0..2**32-1")
        if isinstance(kept, bool) or not isinstance(kept, int) or kept < 0:
            raise ValueError(f"kept must be an int >= 0, got {kept!r}")
        return self._push(["evict", ids, kept])

    def _push(self, event: list[Any]) -> int:
        with self._lock:
            self._seq += 1
            self._events.append([self._seq, *event])
            return self._seq

    def routing_stats(self) -> dict[str, Any]:
        """The routing-stats dict to return from ``record_routing_stats``."""
        with self._lock:
            entry: dict[str, Any] = {
                "epoch": self.epoch,
                "seq": self._seq,
                "events": [list(e) for e in self._events],
            }
            if self._view:
                entry["inflight"] = list(self._inflight)
                entry["time"] = time.time()
            return {self.key: entry}
