"""Weighted Fair Queuing (WFQ) on per-flow virtual finish times.

:class:`WFQQueue` is a generic priority queue of arbitrary Python items that
serves *flows* (clients, tenants) in proportion to their weights, measured in
tokens. It is the Rust core ``fairq._core.WFQQueue``; every method is one FFI
call. The vLLM drop-in built on it is :class:`fairq.vllm.wfq.WFQRequestQueue`.

Algorithm (``ALGORITHMS.md`` section 3)::

    add:  S = max(V, F_last[flow]);  F = S + tokens / weight;  F_last[flow] = F
    pop:  the smallest (F, S, arrival, insertion order);  V = max(V, S)

- ``tokens`` is the work the item needs (for an LLM request: prompt tokens +
  max new tokens), ``weight > 0`` its share. Virtual time is dimensionless
  (tokens / weight) and never decreases.
- Finish tags are chained per flow through ``F_last``, so a client that
  queues many requests pushes its *own* later requests back instead of
  crowding out others: two continuously backlogged flows receive tokens in
  the ratio of their weights (within one request's size). With one request
  per flow (``flow=None``: the item is its own flow) this is the seed
  design's per-request formula.
- Equal weights degrade to FCFS within a flow, and across flows of one
  request each when requests have equal size.

.. warning::
   Requests that are their own flow (``flow=None``) all start at ``V``, and
   ``V`` only advances to the start tags of popped requests, so among them
   the contract's rule is *shortest (tokens / weight) first*: a long request
   can wait indefinitely behind a steady stream of shorter ones. Fairness
   (and bounded waiting) comes from giving requests a client flow.

API summary (items are compared by **identity**, like vLLM requests)::

    q = WFQQueue()
    q.add(item, tokens=..., flow=None, weight=1.0, arrival=0.0)
    q.pop() / q.peek()               # IndexError when empty
    q.remove(item)                   # ValueError if absent; q.discard(item) -> bool
    q.prepend(item)                  # preemption: restore the popped item's tags
    q.update_remaining(item, n)      # partial prefill: F = S + n / weight, re-keyed
    q.virtual_time, q.times(item), q.tags(item), q.flow_last_finish(flow)
    len(q), bool(q), item in q, list(q)   # iteration: pop order, snapshot

Validation: ``weight`` must be finite and ``> 0`` (``<= 0``, NaN or inf is a
``ValueError``, never replaced by a default), ``tokens`` finite and ``>= 0``,
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
``V`` anyway), so one-shot flows do not accumulate forever.

Complexity: ``add``, ``pop``, ``remove``, ``prepend`` and ``update_remaining``
are O(log n); ``peek``, ``len``, ``in`` O(1); iteration O(n log n).
"""

from __future__ import annotations

from fairq._core import WFQQueue

__all__ = ["WFQQueue"]
