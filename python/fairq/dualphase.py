"""The dual-phase (think / output) queue for reasoning models.

Reasoning models decode two kinds of tokens: hidden *think* tokens, where
throughput matters, and user-visible *output* tokens, where time-to-output-
token matters. :class:`DualPhaseQueue` keeps the active decode requests in two
FIFOs and picks each engine step's batch (``ALGORITHMS.md`` section 4)::

    q = DualPhaseQueue(think_batch_multiplier=2.5, min_think_reservation=1)
    q.add("r1", req1)                    # phase="think" by default
    q.add("r2", req2, phase="output")
    batch = q.schedule(output_budget=8, available_blocks=20)
    # -> [(request_id, item), ...]: the output slots, then the think slots
    q.on_phase_event("r1")               # r1 emitted </think>: front of output
                                         # (several before one schedule: latest first)
    q.remove("r2")                       # finished or aborted

``schedule(output_budget, available_blocks)``:

1. output requests from the front, up to ``min(output_budget, available_blocks)``;
2. think requests from the front, up to
   ``floor(output_budget * think_batch_multiplier)``, capped by the blocks left.

Each request takes one block. Requests stay queued until :meth:`remove`;
scheduled ones move to the back of their queue, so every request of a phase
gets its turn. ``schedule_phases`` returns the two lists separately.

Starvation guard: while ``len(output) < output_budget``, up to
``min_think_reservation`` blocks (no more than there are think requests) are
held back from output for think, so output traffic that fills the memory cap
without filling its budget cannot starve think forever. ``0`` disables it.
When output is at its budget, think waits its turn, as the decision record
intends. ``think_batch_multiplier`` must be finite and ``>= 1.0``
(``ValueError``).

Metrics (:meth:`DualPhaseQueue.metrics`, a plain dict):

=================================  ==========================================
``queue_depth_output``             requests queued in output
``queue_depth_think``              requests queued in think
``batch_size_output``              output slots of the last ``schedule``
``batch_size_think``               think slots of the last ``schedule``
``scheduled_output_total``         output slots dispatched so far
``scheduled_think_total``          think slots dispatched so far
``budget_force_triggered_total``   schedule calls where the guard gave think
                                   more slots than the plain rule
``think_wait_longest_rounds``      schedule calls the longest-waiting think
                                   request has gone unscheduled
``phase_transitions_total``        think -> output moves
``schedule_calls_total``           schedule calls
=================================  ==========================================

With the ``metrics`` extra (``prometheus_client``) installed,
:meth:`DualPhaseQueue.register_prometheus` exports them at scrape time as
``<prefix>_queue_depth{queue="output"|"think"}``,
``<prefix>_batch_size{phase=...}`` (gauges),
``<prefix>_scheduled_total{phase=...}``, ``<prefix>_budget_force_triggered_total``,
``<prefix>_phase_transitions_total``, ``<prefix>_schedule_calls_total``
(counters) and ``<prefix>_think_wait_longest_rounds`` (gauge); the default
prefix is ``fairq_dualphase``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fairq._core import DualPhaseQueue as _DualPhaseCore

__all__ = ["DualPhaseQueue", "DualPhaseCollector"]


class DualPhaseQueue(_DualPhaseCore):
    """Think / output dual-phase queue (see the module docstring).

    ``DualPhaseQueue(think_batch_multiplier=2.5, min_think_reservation=1)``.
    ``add(request_id, item=None, phase="think")`` (``request_id``: any unique
    hashable; duplicate: ``ValueError``), ``remove(request_id)`` returns the
    item (``KeyError`` if absent), ``on_phase_event(request_id)`` moves a
    think request to the front of output (``False`` if already in output),
    ``schedule(output_budget, available_blocks)`` and
    ``schedule_phases(...)``, ``len(phase=None)``, ``ids(phase)``,
    ``phase_of(request_id)``, ``metrics()``.
    """

    def register_prometheus(
        self, registry: Any = None, prefix: str = "fairq_dualphase", name: str | None = None
    ) -> DualPhaseCollector:
        """Export :meth:`metrics` through ``prometheus_client``.

        Registers a collector that reads the metrics at scrape time with
        ``registry`` (default: ``prometheus_client.REGISTRY``) and returns it
        (``registry.unregister(collector)`` removes it). Needs the ``metrics``
        extra; ``ImportError`` otherwise. ``name``: a constant ``name`` label
        on every series (tells several queues apart in one registry).
        """
        import prometheus_client

        collector = DualPhaseCollector(self, prefix, name)
        (registry if registry is not None else prometheus_client.REGISTRY).register(collector)
        return collector


class DualPhaseCollector:
    """A ``prometheus_client`` collector for one :class:`DualPhaseQueue`.

    ``name``: when given, every series carries the constant label
    ``name=<name>`` (as :class:`fairq.metrics.FairqCollector` does), so
    several queues can share one registry.
    """

    def __init__(
        self, queue: _DualPhaseCore, prefix: str = "fairq_dualphase", name: str | None = None
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self.queue = queue
        self.prefix = prefix
        self.name = name

    def describe(self) -> list[Any]:
        """Metric families without values (lets the registry check names);
        none with a ``name`` label, whose families several queues share."""
        return [] if self.name is not None else list(self._families(None))

    def collect(self) -> Iterator[Any]:
        """Current metric families (called by the registry at scrape time)."""
        yield from self._families(self.queue.metrics())

    def _families(self, m: dict[str, int] | None) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        p = self.prefix
        const = [] if self.name is None else ["name"]
        cv = [] if self.name is None else [self.name]

        def val(k: str) -> float:
            return float(m[k]) if m is not None else 0.0

        depth = GaugeMetricFamily(
            f"{p}_queue_depth", "Requests queued per queue", labels=[*const, "queue"]
        )
        batch = GaugeMetricFamily(
            f"{p}_batch_size", "Slots per phase in the last schedule call", labels=[*const, "phase"]
        )
        sched = CounterMetricFamily(
            f"{p}_scheduled", "Slots dispatched per phase", labels=[*const, "phase"]
        )
        if m is not None:
            for ph in ("output", "think"):
                depth.add_metric([*cv, ph], val(f"queue_depth_{ph}"))
                batch.add_metric([*cv, ph], val(f"batch_size_{ph}"))
                sched.add_metric([*cv, ph], val(f"scheduled_{ph}_total"))
        yield depth
        yield batch
        yield sched
        for cls, suffix, doc, key in (
            (
                CounterMetricFamily,
                "budget_force_triggered",
                "Schedule calls where the starvation guard forced think slots",
                "budget_force_triggered_total",
            ),
            (
                CounterMetricFamily,
                "phase_transitions",
                "Requests moved from think to output",
                "phase_transitions_total",
            ),
            (CounterMetricFamily, "schedule_calls", "Schedule calls", "schedule_calls_total"),
            (
                GaugeMetricFamily,
                "think_wait_longest_rounds",
                "Schedule calls the longest-waiting think request has gone unscheduled",
                "think_wait_longest_rounds",
            ),
        ):
            fam = cls(f"{p}_{suffix}", doc, labels=const)
            if m is not None:
                fam.add_metric(cv, val(key))
            yield fam
