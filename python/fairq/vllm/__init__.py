"""fairq.vllm: drop-in replacements for vLLM's request queues.

Same interface and semantics as ``vllm/v1/core/sched/request_queue.py``
(``RequestQueue``, ``FCFSRequestQueue``, ``PriorityRequestQueue``,
``SchedulingPolicy``, ``create_request_queue``), with the queues implemented in
Rust: removing a request is O(1) (FCFS) / O(log n) (priority) instead of
vLLM's O(n) scan, and priority order is computed from keys read once at
``add_request`` instead of calling ``Request.__lt__`` in Python.

vLLM is never imported by this package; :func:`install` does that on demand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairq._lazy import lazy_attributes
from fairq.vllm._base import RequestQueue, SchedulingPolicy

if TYPE_CHECKING:  # pragma: no cover
    from fairq.vllm._install import install, uninstall
    from fairq.vllm._queues import FCFSRequestQueue, PriorityRequestQueue

__all__ = [
    "FCFSRequestQueue",
    "PriorityRequestQueue",
    "RequestQueue",
    "SchedulingPolicy",
    "create_request_queue",
    "install",
    "uninstall",
]

_LAZY = {
    "FCFSRequestQueue": "fairq.vllm._queues",
    "PriorityRequestQueue": "fairq.vllm._queues",
    "install": "fairq.vllm._install",
    "uninstall": "fairq.vllm._install",
}


__getattr__, __dir__ = lazy_attributes("fairq.vllm", _LAZY, globals())


def as_policy(policy: object) -> SchedulingPolicy:
    """Normalise ``policy`` to a :class:`SchedulingPolicy`.

    Accepts the enum itself, its string value in any case and with
    surrounding space (``"fcfs"``, ``"WFQ"``), or any enum whose ``.value`` is
    such a string (vLLM's own ``SchedulingPolicy``). Unknown policies raise
    ``ValueError("Unknown scheduling policy: ...")`` as vLLM does, followed by
    the names fairq knows.
    """
    if isinstance(policy, SchedulingPolicy):
        return policy
    value = getattr(policy, "value", policy)
    if isinstance(value, str):
        try:
            return SchedulingPolicy(value.strip().lower())
        except ValueError:
            pass
    known = ", ".join(p.value for p in SchedulingPolicy)
    raise ValueError(f"Unknown scheduling policy: {policy} (fairq's policies: {known})")


#: Keyword options of each standalone queue (:func:`create_request_queue`);
#: FCFS and priority take none.
QUEUE_OPTIONS: dict[SchedulingPolicy, tuple[str, ...]] = {
    SchedulingPolicy.FCFS: (),
    SchedulingPolicy.PRIORITY: (),
    SchedulingPolicy.WFQ: ("flow_key", "default_weight", "virtual_clock"),
}


def check_queue_options(policy: SchedulingPolicy | str, options: Any) -> SchedulingPolicy:
    """Refuse option names the queue of ``policy`` does not take, before it
    is built (``TypeError`` listing the ones it does); the values are checked
    by the queue. Returns the policy."""
    p = as_policy(policy)
    allowed = QUEUE_OPTIONS.get(p)
    if allowed is None:
        raise ValueError(
            f"policy {p.value!r} runs inside vLLM's scheduler, not as a standalone queue: "
            f"FAIRQ_VLLM_POLICY={p.value} vllm serve MODEL "
            "--scheduler-cls fairq.vllm.scheduler.FairqAsyncScheduler"
        )
    unknown = [k for k in options if k not in allowed]
    if unknown:
        valid = ", ".join(allowed) if allowed else "none"
        raise TypeError(f"unknown option {unknown[0]!r} for policy {p.value!r} (options: {valid})")
    return p


def create_request_queue(policy: SchedulingPolicy | str, **options: Any) -> RequestQueue:
    """Create a request queue for ``policy`` (enum member or its string value,
    any case).

    ``FCFS`` -> :class:`FCFSRequestQueue`, ``PRIORITY`` ->
    :class:`PriorityRequestQueue`, ``WFQ`` -> ``fairq.vllm.wfq.WFQRequestQueue``
    (imported lazily). ``options`` are passed to the queue's constructor (only
    the WFQ queue takes any: :data:`QUEUE_OPTIONS`). Unknown policy, or a fair
    policy (``vtc``, ``lpm``, ``dlpm``: they need vLLM's scheduler):
    ``ValueError``; an option the queue does not take: ``TypeError`` listing
    the ones it does.
    """
    p = check_queue_options(policy, options)
    if p is SchedulingPolicy.FCFS:
        from fairq.vllm._queues import FCFSRequestQueue

        return FCFSRequestQueue(**options)
    if p is SchedulingPolicy.PRIORITY:
        from fairq.vllm._queues import PriorityRequestQueue

        return PriorityRequestQueue(**options)
    from fairq.vllm.wfq import WFQRequestQueue

    queue: RequestQueue = WFQRequestQueue(**options)
    return queue
