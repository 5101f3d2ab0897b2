"""Weighted Fair Queuing (WFQ) on per-flow virtual finish times.

:class:`WFQQueue` is a generic priority queue of arbitrary Python items that
serves *flows* (clients, tenants) in proportion to their weights, measured in
tokens. It is the Rust core ``fairq._core.WFQQueue``; every method is one FFI
call. The vLLM drop-in built on it is :class:`fairq.vllm.wfq.WFQRequestQueue`.

Algorithm (``ALGORITHMS.md`` section 3)::

    add:  S = max(V, F_last[flow]);  F = S + tokens / weight;  F_last[flow] = F
    pop:  the smallest (F, S, arrival, insertion order), then
          V = max(V, S)   virtual_clock="start"  (default; ALGORITHMS.md exactly)
          V = max(V, F)   virtual_clock="finish" (self-clocked fair queueing)

- ``tokens`` is the work the item needs (for an LLM request: prompt tokens +
  max new tokens), ``weight > 0`` its share. Virtual time is dimensionless
  (tokens / weight) and never decreases.
- Finish tags are chained per flow through ``F_last``, so a client that
  queues many requests pushes its *own* later requests back instead of
  crowding out others: two continuously backlogged flows receive tokens in
  the ratio of their weights (within one request's size), under either
  clock. With one request per flow (``flow=None``: the item is its own flow)
  this is the seed design's per-request formula.
- Equal weights degrade to FCFS within a flow, and across flows of one
  request each when requests have equal size.

.. warning::
   With the default ``virtual_clock="start"``, requests that are their own
   flow (``flow=None``) all start at ``V``, and ``V`` only advances to the
   start tags of popped requests, so among them the rule is *shortest
   (tokens / weight) first*: a long request can wait indefinitely behind a
   steady stream of shorter ones (``V`` can stay at 0). Use
   ``WFQQueue(virtual_clock="finish")`` when items are their own flows:
   ``V`` then reaches the finish tag of each popped item, so items added
   later start at or beyond the finish tags already served and a waiting
   item is eventually first. Its wait is bounded: e.g. with one item added
   before each pop, an item queued alone with ``F - V = T`` is popped within
   ``ceil(T / d) + 1`` pops, ``d`` the smallest ``tokens / weight`` of the
   others (zero-token items do not move ``V`` under either clock). Giving
   requests a client flow also restores fairness between clients.

``virtual_clock`` is keyword-only and fixed at construction (read it back
from the ``virtual_clock`` property); any other string is a ``ValueError``
naming ``virtual_clock`` and the value, a non-string a ``TypeError``
(``None`` means the default).

API summary (items are compared by **identity**, like vLLM requests)::

    q = WFQQueue()                   # or WFQQueue(virtual_clock="finish")
    q.add(item, tokens=..., flow=None, weight=1.0, arrival=0.0)
    q.pop() / q.peek()               # IndexError when empty
    q.remove(item)                   # ValueError if absent; q.discard(item) -> bool
    q.prepend(item)                  # preemption: restore the popped item's tags
    q.update_remaining(item, n)      # partial prefill: F = S + n / weight, re-keyed
    q.virtual_time, q.virtual_clock, q.times(item), q.tags(item), q.flow_last_finish(flow)
    len(q), bool(q), item in q, list(q)   # iteration: pop order, snapshot

Validation: ``weight`` must be finite and ``> 0`` (``<= 0``, NaN or inf is a
``ValueError``, never replaced by a default; a ``bool``, for every number
argument, a ``TypeError``), ``tokens`` finite and ``>= 0``,
``arrival`` finite, and the resulting ``F`` finite. A failing call leaves the
queue unchanged.

Preemption: ``pop()`` remembers the popped item's tags (virtual start and
finish, arrival, insertion order, flow, weight) against a *weak* reference,
so ``prepend(item)`` puts it back exactly where it was and a finished item is
not kept alive. Items that cannot be weakly referenced (``int``, ``str``,
``tuple``...) are not remembered; ``prepend(item, tokens=...)`` then adds them
fresh. ``remembers(item)`` tells which case applies; ``forget(item)`` drops
the memory early.

Removal (``remove``/``discard``) does not rewind the flow's ``F_last``:
cancelling a request cannot buy a client an earlier slot. Flow state is
dropped once a flow has nothing queued and ``F_last <= V`` (it would start at
``V`` anyway), so one-shot flows do not accumulate forever; this is exact
under both clocks, since it only relies on ``V`` never decreasing.

Complexity: ``add``, ``pop``, ``remove``, ``prepend`` and ``update_remaining``
are O(log n); ``peek``, ``len``, ``in`` O(1); iteration O(n log n).
"""

from __future__ import annotations

from fairq._core import WFQQueue

__all__ = ["WFQQueue"]
