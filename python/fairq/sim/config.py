"""What the simulator runs (:class:`SimConfig`): workers, the local policy
(:data:`LOCAL_POLICIES`), the dispatcher, the KV memory model
(:data:`MEMORY_MODELS`, described in :mod:`fairq.sim.engine`) and the step
model. :mod:`fairq.sim.engine` runs it."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairq.dispatch import LABELS
from fairq.sched import POLICIES, VARIANTS, policy_name
from fairq.sim.model import StepModel

__all__ = ["LOCAL_LABELS", "LOCAL_POLICIES", "MEMORY_MODELS", "SimConfig", "base_policy"]

#: Local policies the simulator runs: fairq's four and the named engine
#: variants (``lpm-sglang``: LPM as SGLang runs it; ``preble-local``: Preble's
#: multi-level priority wait queue over LPM's prefix matches).
LOCAL_POLICIES = (*POLICIES, *VARIANTS)

#: KV memory models of :class:`SimConfig` (:mod:`fairq.sim.engine`'s docs, "Memory").
MEMORY_MODELS = ("estimate", "oracle")

#: How a local policy reads in results.
LOCAL_LABELS = {"lpm-sglang": "LPM-SGLang", "preble-local": "Preble-local"}


def base_policy(name: str) -> str:
    """The fairq policy behind a :data:`LOCAL_POLICIES` name (``lpm-sglang``
    -> ``lpm``); ValueError naming the known ones for anything else."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in VARIANTS:
        return VARIANTS[key][0]
    try:
        return policy_name(name)
    except ValueError:
        raise ValueError(
            f"policy must be one of {', '.join(LOCAL_POLICIES)}; got {name!r}"
        ) from None


@dataclass
class SimConfig:
    """What to simulate: workers, local policy, dispatcher and knobs."""

    workers: int = 1
    policy: str = "dlpm"
    dispatcher: str | None = None  # None with 1 worker; else a fairq.dispatch name
    #: DLPM's Q_u: a number (fixed) or "auto" (ALGORITHMS.md §6: quantum_scale
    #: times the recent mean request charge)
    user_quantum: float | str = 2000.0
    #: DLPM's quantum_scale (None: 0 with a number above, the core's default
    #: with "auto"; > 0 with a number: automatic, starting from that number)
    quantum_scale: float | None = None
    #: DLPM's strict_credit (None: on with "auto", off with a number, as the
    #: class decides; ALGORITHMS.md §6)
    strict_credit: bool | None = None
    worker_quantum: float = 20000.0  # D2LPM's Q_w
    w_e: float = 1.0
    w_q: float = 2.0
    model: StepModel = field(default_factory=StepModel)
    max_time: float = 36_000.0  # simulated seconds before giving up
    #: KV memory model (fairq.sim.engine's docs, "Memory"): "estimate" (output lengths
    #: unknown to the engine: SGLang's new-token-ratio reservation, retraction
    #: and recomputation) or "oracle" (each request's whole output reserved
    #: at admission, as fairq's simulator did before; the pool may overcommit)
    memory: str = "estimate"
    #: "estimate": the max_new_tokens every request carries (None: the
    #: workload's longest output, as a client sets max_tokens to cover its
    #: task); at least every request's output length
    max_new_tokens: int | None = None
    #: check at every step that the KV pool is not exceeded (tests)
    validate: bool = False
    #: routers in front of the workers, each its own dispatcher
    #: (:mod:`fairq.sim.routers`); 1 with view_staleness 0: the one global router
    routers: int = 1
    #: age in seconds of the shared view each router sees of the others'
    #: dispatches and finishes and the workers' evictions (inf: no shared
    #: view: each router counts its own dispatches only, as before the view)
    view_staleness: float = 0.0
    #: how requests are assigned to routers: rr, random or tenant
    router_assign: str = "rr"
    #: D2LPM's agreed placement (:mod:`fairq.dispatch`'s ``D2LPM``): new
    #: prefixes hashed among the workers loaded at most this much above the
    #: least; 0: least loaded (the paper's rule)
    placement_slack: int = 0
    #: D2LPM's ``match_threshold``: a held prefix covering less of the
    #: prompt than this fraction places nothing; 0: the paper's rule
    match_threshold: float = 0.0
    #: D2LPM's ``spread_by_credit``: a request its held prefix does not
    #: place goes where its client has the most credit; False: least loaded
    spread_by_credit: bool = False
    #: several D2LPM routers agree where each new document goes
    #: (:class:`fairq.dispatch.FirstPlacement`: one table, asked at no
    #: delay, as the Ray routers' hub with ``hub_placement``)
    hub_placement: bool = False
    #: documents a worker may hold above the fewest and still take a new
    #: one its router chose (``hub_placement``)
    hub_placement_slack: int = 0

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_MODELS:
            raise ValueError(
                f"memory must be one of {', '.join(MEMORY_MODELS)}; got {self.memory!r}"
            )
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        from fairq.sim.routers import check_fleet

        check_fleet(self.routers, self.view_staleness, self.router_assign)

    @property
    def fleet(self) -> bool:
        """Several routers, or one with a stale view (:mod:`fairq.sim.routers`)."""
        return self.workers > 1 and (self.routers > 1 or self.view_staleness > 0)

    def label(self) -> str:
        local = LOCAL_LABELS.get(self.policy, self.policy.upper())
        if self.workers == 1 or not self.dispatcher:
            return local
        label = f"{LABELS.get(self.dispatcher, self.dispatcher)}+{local}"
        if self.fleet:
            t = self.view_staleness
            view = f"T={t:g}s" if t < float("inf") else "no view"
            label += f" x{self.routers} {self.router_assign} {view}"
        if self.placement_slack and self.dispatcher == "d2lpm":
            label += f" slack={self.placement_slack}"
        if self.match_threshold and self.dispatcher == "d2lpm":
            label += f" match>={self.match_threshold:g}"
        if self.spread_by_credit and self.dispatcher == "d2lpm":
            label += " spread"
        if self.hub_placement and self.fleet and self.dispatcher == "d2lpm":
            label += f" agreed/{self.hub_placement_slack}"
        return label
