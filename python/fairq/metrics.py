"""Prometheus metrics for every fairq policy (the ``metrics`` extra:
``pip install '.[metrics]'``).

:class:`FairqCollector` is a ``prometheus_client`` collector over one fairq
object: a local scheduler (FCFS, LPM, VTC, DLPM), a dispatcher (D2LPM and the
baselines), a :class:`fairq.DRRQueue`, a :class:`fairq.WFQQueue` (the vLLM WFQ
queue included) or a :class:`fairq.DualPhaseQueue`. It reads the object at
scrape time, with one call into the core per scrape (the object's
``state_dict()``, or ``stats()`` for DRR), so the hot path pays nothing.

Metric names (prefix ``fairq``, Prometheus conventions: base units, ``_total``
counters; every series has the constant label ``name``):

================================================  =======  ==============  =========================
metric                                            type     labels          from
================================================  =======  ==============  =========================
``fairq_scheduler_service_tokens_total``          counter  tenant          weighted tokens served
``fairq_scheduler_admissions_total``              counter  tenant          requests admitted
``fairq_scheduler_waiting_requests``              gauge    tenant          waiting depth
``fairq_scheduler_running_requests``              gauge    tenant          admitted, unfinished
``fairq_scheduler_share_lead``                    gauge    tenant          how far over share
``fairq_scheduler_vtc_counter``                   gauge    tenant          VTC's virtual counter
``fairq_scheduler_deficit``                       gauge    tenant          DLPM's deficit
``fairq_scheduler_<state field>``                 gauge    tenant          another policy's own
``fairq_scheduler_refills_total``                 counter  -               DLPM's refills
``fairq_dispatch_dispatched_total``               counter  worker          requests dispatched
``fairq_dispatch_inflight_requests``              gauge    worker          ``s_w``
``fairq_dispatch_deficit``                        gauge    tenant, worker  D2LPM's ``q[c][w]``
``fairq_drr_deficit_tokens``                      gauge    class           unspent credit
``fairq_drr_queue_depth``                         gauge    class           queued requests
``fairq_drr_dispatched_total``                    counter  class           requests popped
``fairq_drr_dispatched_cost_tokens_total``        counter  class           cost popped
``fairq_wfq_virtual_time``                        gauge    -               ``V``
``fairq_wfq_queue_depth``                         gauge    -               queued items
``fairq_wfq_flows``                               gauge    -               flows with state
``fairq_admission_accepted_total``                counter  tenant          accepted at the door
``fairq_admission_refused_total``                 counter  tenant, reason  refused (429 / 413)
``fairq_admission_held_requests``                 gauge    tenant          accepted, unanswered
``fairq_admission_held_tokens``                   gauge    tenant          their tokens (estimate)
``fairq_dualphase_*``                             -        queue / phase   :mod:`fairq.dualphase`
================================================  =======  ==============  =========================

**Bounded label cardinality.** The first ``max_tenants`` tenants a collector
sees (default 100) keep their own ``tenant`` label for as long as it runs;
every later tenant is reported under ``tenant="other"``: counters and request
gauges are summed there (a tenant never moves between labels, so series do
not flap), per-tenant state gauges (counter, deficit) are the mean over those
tenants. ``fairq_tenants_other`` says how many tenants ``other`` holds. A
scheduler forgets idle tenants as its client table grows (docs/design/core.md,
"Tenants that come and go"); their counters then leave the sums, which
Prometheus reads as a counter reset (``rate()`` handles it).

**From the engine integrations.** With ``FAIRQ_METRICS=1`` in the
environment the vLLM scheduler classes (``fairq.vllm.scheduler``: the WFQ
queues, ``name="vllm-waiting"``...) and the transformers schedulers
(``name="transformers-<policy>"``) register their collectors with
``prometheus_client``'s default registry of their process (:func:`publish`).
In vLLM's OpenAI server that process is the engine core, not the API server
that serves ``/metrics``: there fairq's metrics reach ``/metrics`` through
vLLM's scheduler statistics instead, with no setting
(:mod:`fairq.vllm.stats`). ``fairq simulate --metrics-port PORT``
serves the simulator's schedulers and dispatcher.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

from fairq.sched import POLICY_INFO

__all__ = ["FairqCollector", "register", "publish", "OTHER", "ENV_VAR"]

ENV_VAR = "FAIRQ_METRICS"
"""Set to ``1`` (``true``, ``yes``) to make the engine integrations publish
their metrics (:func:`publish`)."""

OTHER = "other"
"""The ``tenant`` label of the tenants beyond ``max_tenants``."""


class FairqCollector:
    """A ``prometheus_client`` collector for one fairq object (see the module doc).

    ``FairqCollector(obj, name="default", max_tenants=100)``; ``name`` is the
    constant label telling several objects apart (e.g. one scheduler per
    worker). Register it with :func:`register` or ``registry.register``.
    """

    def __init__(self, obj: Any, name: str = "default", max_tenants: int = 100) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if isinstance(max_tenants, bool) or not isinstance(max_tenants, int) or max_tenants < 0:
            raise ValueError(f"max_tenants must be an int >= 0, got {max_tenants!r}")
        self.kind = _kind(obj)
        self.obj = obj
        self.name = name
        self.max_tenants = max_tenants
        self._labelled: dict[str, None] = {}  # the first max_tenants tenants, in order

    def _tenant(self, t: str) -> str:
        if t in self._labelled:
            return t
        if len(self._labelled) < self.max_tenants:
            self._labelled[t] = None
            return t
        return OTHER

    def describe(self) -> list[Any]:
        """No up-front description (families depend on the object's state)."""
        return []

    def collect(self) -> Iterator[Any]:
        """Current metric families (the registry calls this at scrape time)."""
        if self.kind == "dualphase":
            from fairq.dualphase import DualPhaseCollector

            yield from DualPhaseCollector(self.obj, name=self.name).collect()
            return
        yield from getattr(self, f"_{self.kind}")()

    # -- one method per kind -------------------------------------------------

    def _families(self, specs: list[tuple[str, str, str, list[str]]]) -> dict[str, Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        out: dict[str, Any] = {}
        for key, kind, doc, labels in specs:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            out[key] = cls(f"fairq_{key}", doc, labels=["name", *labels])
        return out

    def _per_tenant(
        self, rows: list[tuple[str, dict[str, float]]], sums: list[str], means: list[str]
    ) -> tuple[dict[str, dict[str, float]], int]:
        """Fold rows by tenant label: ``sums`` add up, ``means`` average."""
        folded: dict[str, dict[str, float]] = {}
        counts: dict[str, int] = {}
        for tenant, vals in rows:
            label = self._tenant(tenant)
            acc = folded.setdefault(label, dict.fromkeys(sums + means, 0.0))
            counts[label] = counts.get(label, 0) + 1
            for k in sums + means:
                if k in vals:
                    acc[k] += vals[k]
        for label, acc in folded.items():
            for k in means:
                acc[k] /= counts[label]
        return folded, counts.get(OTHER, 0)

    def _scheduler(self) -> Iterator[Any]:
        st = self.obj.state_dict()
        info = POLICY_INFO.get(st["policy"])
        field = info.state_fields[0] if info and info.state_fields else None
        running: dict[str, int] = {}
        for r in st["running"]:
            running[r["client"]] = running.get(r["client"], 0) + 1
        rows = [
            (
                c["name"],
                {
                    "service": c["service"],
                    "admitted": c["admitted"],
                    "waiting": c["waiting"],
                    "running": running.get(c["name"], 0),
                    "counter": c.get(field.name, 0.0) if field else 0.0,
                    "lead": self.obj.share_lead(c["name"]),
                },
            )
            for c in st["clients"]
        ]
        folded, n_other = self._per_tenant(
            rows, ["service", "admitted", "waiting", "running"], ["counter", "lead"]
        )
        f = self._families(
            [
                ("scheduler_service_tokens", "counter", "Weighted tokens served", ["tenant"]),
                ("scheduler_admissions", "counter", "Requests admitted", ["tenant"]),
                ("scheduler_waiting_requests", "gauge", "Waiting requests", ["tenant"]),
                ("scheduler_running_requests", "gauge", "Admitted, unfinished", ["tenant"]),
                (
                    "scheduler_share_lead",
                    "gauge",
                    "How far over its fair share by the policy's account (larger: further)",
                    ["tenant"],
                ),
                ("tenants_other", "gauge", "Tenants reported as tenant=other", []),
            ]
        )
        state = None
        if field is not None:
            state = self._families([(field.metric, "gauge", field.help, ["tenant"])])
        for label, v in folded.items():
            ls = [self.name, label]
            f["scheduler_service_tokens"].add_metric(ls, v["service"])
            f["scheduler_admissions"].add_metric(ls, v["admitted"])
            f["scheduler_waiting_requests"].add_metric(ls, v["waiting"])
            f["scheduler_running_requests"].add_metric(ls, v["running"])
            f["scheduler_share_lead"].add_metric(ls, v["lead"])
            if state is not None:
                next(iter(state.values())).add_metric(ls, v["counter"])
        f["tenants_other"].add_metric([self.name], n_other)
        yield from f.values()
        if state is not None:
            yield from state.values()
        if info is not None and info.refills:
            (refills,) = self._families(
                [("scheduler_refills", "counter", "DLPM refills", [])]
            ).values()
            refills.add_metric([self.name], st["refills"])
            yield refills

    def _dispatcher(self) -> Iterator[Any]:
        st = self.obj.state_dict(include_tree=False)
        load = [0] * st["num_workers"]
        for r in st["inflight"]:
            load[r["worker"]] += 1
        f = self._families(
            [
                ("dispatch_dispatched", "counter", "Requests dispatched", ["worker"]),
                ("dispatch_inflight_requests", "gauge", "In-flight requests (s_w)", ["worker"]),
            ]
        )
        for w, (n, s) in enumerate(zip(st["dispatched"], load, strict=True)):
            f["dispatch_dispatched"].add_metric([self.name, str(w)], n)
            f["dispatch_inflight_requests"].add_metric([self.name, str(w)], s)
        yield from f.values()
        if st["policy"] == "D2LPM":
            rows = [
                (c["name"], {str(w): q for w, q in enumerate(c["deficits"])}) for c in st["clients"]
            ]
            keys = [str(w) for w in range(st["num_workers"])]
            folded, _ = self._per_tenant(rows, [], keys)
            (deficit,) = self._families(
                [("dispatch_deficit", "gauge", "D2LPM deficit", ["tenant", "worker"])]
            ).values()
            for label, v in folded.items():
                for worker in keys:
                    deficit.add_metric([self.name, label, worker], v[worker])
            yield deficit

    def _drr(self) -> Iterator[Any]:
        f = self._families(
            [
                ("drr_deficit_tokens", "gauge", "Unspent DRR credit", ["class"]),
                ("drr_queue_depth", "gauge", "Queued requests", ["class"]),
                ("drr_dispatched", "counter", "Requests popped", ["class"]),
                ("drr_dispatched_cost_tokens", "counter", "Cost popped", ["class"]),
            ]
        )
        for cls, s in self.obj.stats().items():
            ls = [self.name, cls]
            f["drr_deficit_tokens"].add_metric(ls, s["deficit"])
            f["drr_queue_depth"].add_metric(ls, s["depth"])
            f["drr_dispatched"].add_metric(ls, s["dispatched"])
            f["drr_dispatched_cost_tokens"].add_metric(ls, s["dispatched_cost"])
        yield from f.values()

    def _admission(self) -> Iterator[Any]:
        from fairq.ledger.caps import REASONS

        stats = self.obj.stats()
        rows = [
            (
                t,
                {
                    "held_requests": v["held_requests"],
                    "held_tokens": v["held_tokens"],
                    "accepted": v["accepted"],
                    **{f"refused_{r}": v["refused"].get(r, 0) for r in REASONS},
                },
            )
            for t, v in stats.items()
        ]
        keys = ["held_requests", "held_tokens", "accepted", *(f"refused_{r}" for r in REASONS)]
        folded, _ = self._per_tenant(rows, keys, [])
        f = self._families(
            [
                ("admission_accepted", "counter", "Requests accepted", ["tenant"]),
                ("admission_refused", "counter", "Requests refused", ["tenant", "reason"]),
                ("admission_held_requests", "gauge", "Accepted, unanswered", ["tenant"]),
                ("admission_held_tokens", "gauge", "Their tokens (estimate)", ["tenant"]),
            ]
        )
        for label, v in folded.items():
            ls = [self.name, label]
            f["admission_accepted"].add_metric(ls, v["accepted"])
            f["admission_held_requests"].add_metric(ls, v["held_requests"])
            f["admission_held_tokens"].add_metric(ls, v["held_tokens"])
            for r in REASONS:
                if v[f"refused_{r}"]:
                    f["admission_refused"].add_metric([*ls, r], v[f"refused_{r}"])
        yield from f.values()

    def _wfq(self) -> Iterator[Any]:
        f = self._families(
            [
                ("wfq_virtual_time", "gauge", "WFQ virtual time V", []),
                ("wfq_queue_depth", "gauge", "Queued items", []),
                ("wfq_flows", "gauge", "Flows with state", []),
            ]
        )
        f["wfq_virtual_time"].add_metric([self.name], self.obj.virtual_time)
        f["wfq_queue_depth"].add_metric([self.name], len(self.obj))
        f["wfq_flows"].add_metric([self.name], self.obj.flow_count)
        yield from f.values()


def _kind(obj: Any) -> str:
    import fairq

    if isinstance(obj, fairq.DualPhaseQueue):
        return "dualphase"
    if isinstance(obj, fairq.LocalScheduler):  # every registered policy
        return "scheduler"
    if isinstance(obj, fairq.Dispatcher):
        return "dispatcher"
    if isinstance(obj, fairq.DRRQueue):
        return "drr"
    if isinstance(obj, fairq.WFQQueue):
        return "wfq"
    from fairq.ledger.caps import AdmissionControl

    if isinstance(obj, AdmissionControl):
        return "admission"
    raise TypeError(f"no fairq metrics for a {type(obj).__name__}")


def register(
    obj: Any, name: str = "default", *, registry: Any = None, max_tenants: int = 100
) -> FairqCollector:
    """Register a :class:`FairqCollector` for ``obj`` with ``registry``
    (default ``prometheus_client.REGISTRY``) and return it
    (``registry.unregister(collector)`` removes it). ``ImportError`` without
    the ``metrics`` extra (the message says ``pip install '.[metrics]'``)."""
    from fairq.extras import require

    require("metrics", what="fairq.metrics.register")
    import prometheus_client

    collector = FairqCollector(obj, name, max_tenants)
    (registry if registry is not None else prometheus_client.REGISTRY).register(collector)
    return collector


_published: dict[str, FairqCollector] = {}


def publish(obj: Any, name: str) -> FairqCollector | None:
    """What the engine integrations call for each fairq object they build:
    when ``$FAIRQ_METRICS`` is set (``1``, ``true``, ``yes``), register
    ``obj``'s collector with ``prometheus_client``'s default registry under
    ``name``, replacing an earlier one of the same name (an engine reset);
    otherwise, or without ``prometheus_client`` (a warning), do nothing."""
    if os.environ.get(ENV_VAR, "").strip().lower() not in ("1", "true", "yes"):
        return None
    try:
        import prometheus_client
    except ImportError:
        from fairq.extras import install_hint

        warnings.warn(
            f"{ENV_VAR} is set but prometheus_client is not installed "
            f"({install_hint('metrics')}): no fairq metrics",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    try:
        collector = FairqCollector(obj, name)
    except TypeError:  # an object without fairness state (a FIFO queue)
        return None
    old = _published.pop(name, None)
    if old is not None:
        prometheus_client.REGISTRY.unregister(old)
    prometheus_client.REGISTRY.register(collector)
    _published[name] = collector
    return collector
