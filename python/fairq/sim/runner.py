"""The embedded comparison (``fairq simulate``) and the quantum sweeps.

:data:`DEFAULT_SUITE` holds the paper's workloads with one misbehaving client
each. Every workload runs on 1 worker under each local policy (FCFS, LPM,
VTC, DLPM) and on 4 workers under each dispatcher + local policy pair of the
paper's Section 6 (RR+LPM, ClientRR+VTC, SGLangRouter+LPM: the SGLang router's
cache-aware rule, D2LPM+DLPM). ``fairq simulate --paper``
(:mod:`fairq.sim.paper`) runs the faithful baselines instead.
Arrival rates are per worker (the paper scales the rate with the GPUs), and
are set so that the workers are overloaded: a scheduler only matters when
requests queue.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from fairq.sim.config import LOCAL_POLICIES, SimConfig
from fairq.sim.engine import Simulator
from fairq.sim.metrics import service_over_time, summarize
from fairq.sim.model import StepModel
from fairq.sim.workloads import Workload, make_workload


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload with its generator arguments (rates per worker)."""

    name: str
    misbehave: str | None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: the workload column's text (default: ``name-misbehave``)
    label: str | None = None

    @property
    def key(self) -> str:
        if self.label is not None:
            return self.label
        return f"{self.name}-{self.misbehave}" if self.misbehave else self.name

    def build(self, workers: int, seed: int, overrides: dict[str, Any] | None = None) -> Workload:
        kw = {**self.kwargs, **(overrides or {})}
        per_worker = kw.pop("clients_per_worker", None)
        if per_worker is not None:  # more clients with more workers, each at its rate
            kw["num_clients"] = max(2, round(per_worker * workers))
        elif "rate" in kw:
            kw["rate"] = kw["rate"] * workers
        return make_workload(self.name, misbehave=self.misbehave, seed=seed, **kw)


DEFAULT_SUITE: tuple[WorkloadSpec, ...] = (
    WorkloadSpec("qa", "S1", {"scale": 0.25, "rate": 4.0, "duration": 40.0, "docs_per_client": 16}),
    WorkloadSpec("tot", "S2", {"scale": 0.5, "rate": 0.6, "duration": 40.0}),
    WorkloadSpec("judge", "S1", {"scale": 0.5, "rate": 1.0, "duration": 40.0}),
)

#: Extra workloads selectable with ``--workload``.
EXTRA: dict[str, WorkloadSpec] = {
    "chat": WorkloadSpec("chat", None, {"rate": 1.0, "duration": 60.0}),
    "qa-S2": WorkloadSpec(
        "qa", "S2", {"scale": 0.25, "rate": 3.0, "duration": 40.0, "docs_per_client": 8}
    ),
    "tot-S1": WorkloadSpec("tot", "S1", {"scale": 0.5, "rate": 0.1, "duration": 40.0}),
    "judge-S2": WorkloadSpec("judge", "S2", {"scale": 0.5, "rate": 1.0, "duration": 40.0}),
    # one client per worker (each at 4 requests/s on 16 documents of its own),
    # so that the workers and the routers scale together (docs/results/routers.md)
    "qa-fleet": WorkloadSpec(
        "qa",
        "S1",
        {
            "scale": 0.25,
            "rate": 4.0,
            "duration": 20.0,
            "docs_per_client": 16,
            "clients_per_worker": 1.0,
        },
        label="qa-fleet",
    ),
}

LOCAL_ONE = ("fcfs", "lpm", "vtc", "dlpm")
PAIRS = (("rr", "lpm"), ("client-rr", "vtc"), ("affinity", "lpm"), ("d2lpm", "dlpm"))
#: Pairs a ``--policy`` / ``--dispatch`` filter also selects from: the paper's
#: baselines as the systems run them (Preble with its own local queue; RR with
#: SGLang's LPM).
FAITHFUL_PAIRS = (("preble", "preble-local"), ("rr", "lpm-sglang"))

DEFAULT_PRESET = "a10g-3b"


def find_spec(name: str) -> WorkloadSpec:
    """A workload spec by key (``qa``, ``qa-S1``, ``tot``, ``chat`` ...)."""
    for s in DEFAULT_SUITE:
        if name in (s.key, s.name):
            return s
    if name in EXTRA:
        return EXTRA[name]
    known = [s.key for s in DEFAULT_SUITE] + list(EXTRA)
    raise ValueError(f"workload must be one of {', '.join(known)}; got {name!r}")


@dataclass
class Run:
    """One simulation to perform."""

    spec: WorkloadSpec | None
    cfg: SimConfig
    trace: Workload | None = None
    tag: str = ""


def plan_runs(
    specs: list[WorkloadSpec] | None,
    workers: list[int],
    base: SimConfig,
    *,
    policies: list[str] | None = None,
    dispatchers: list[str] | None = None,
    trace: Workload | None = None,
) -> list[Run]:
    """Every (workload, workers, policy) combination of the comparison.

    One worker: ``policies`` (default :data:`LOCAL_ONE`), in
    :data:`~fairq.sim.engine.LOCAL_POLICIES` order. Several: the pairs of
    :data:`PAIRS` (with a filter, :data:`FAITHFUL_PAIRS` too) that pass the
    filters given."""
    runs: list[Run] = []
    sources: list[tuple[WorkloadSpec | None, Workload | None]] = (
        [(None, trace)] if trace is not None else [(s, None) for s in specs or []]
    )
    for spec, tr in sources:
        for w in workers:
            if w == 1:
                for p in LOCAL_POLICIES:
                    if p not in (policies or LOCAL_ONE):
                        continue
                    runs.append(Run(spec, replace(base, workers=1, policy=p, dispatcher=None), tr))
            else:
                pairs = PAIRS + (FAITHFUL_PAIRS if policies or dispatchers else ())
                for d, p in pairs:
                    if (policies and p not in policies) or (dispatchers and d not in dispatchers):
                        continue
                    runs.append(Run(spec, replace(base, workers=w, policy=p, dispatcher=d), tr))
    return runs


def with_routers(
    runs: list[Run], routers: list[int], staleness: list[float], assign: list[str]
) -> list[Run]:
    """Each run on several workers once per (routers, view staleness,
    assignment) setting (:mod:`fairq.sim.routers`), and once with one router
    and a fresh view (the baseline) first; runs on one worker once."""
    out: list[Run] = []
    settings = [(1, 0.0, "rr")] + [(n, t, a) for n in routers for t in staleness for a in assign]
    for run in runs:
        if run.cfg.workers == 1:
            out.append(run)
            continue
        seen = set()
        for n, t, a in settings:
            key = (1, 0.0, "rr") if n == 1 and t == 0 else (n, t, a)
            if key in seen:
                continue
            seen.add(key)
            cfg = replace(run.cfg, routers=key[0], view_staleness=key[1], router_assign=key[2])
            out.append(replace(run, cfg=cfg))
    return out


def _progress(total: int, desc: str) -> tuple[Callable[[str], None], Callable[[], None]]:
    """(advance(label), close()) for a progress bar on stderr."""
    try:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)

        def advance(label: str) -> None:
            bar.set_postfix_str(label)
            bar.update(1)

        return advance, bar.close
    except ImportError:  # pragma: no cover - tqdm is optional
        count = [0]

        def advance(label: str) -> None:
            count[0] += 1
            print(f"\r{desc}: {count[0]}/{total} {label:40s}", end="", file=sys.stderr, flush=True)

        def close() -> None:
            print(file=sys.stderr)

        return advance, close


def execute(
    runs: list[Run],
    *,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    timelines: bool = False,
    progress: bool = True,
    desc: str = "simulate",
    observe: Callable[[Simulator], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every planned simulation; one metrics dict each (plus the
    ``timeline`` for plots when ``timelines``). ``observe(sim)`` is called
    with each simulator before it runs (e.g. to export its schedulers'
    metrics while it runs)."""
    out: list[dict[str, Any]] = []
    advance, close = _progress(len(runs), desc) if progress else (lambda _s: None, lambda: None)
    cache: dict[tuple[str, int], Workload] = {}
    try:
        for run in runs:
            if run.trace is not None:
                wl = run.trace
                key = wl.name
            else:
                assert run.spec is not None
                ck = (run.spec.key, run.cfg.workers)
                if ck not in cache:
                    cache[ck] = run.spec.build(run.cfg.workers, seed, overrides)
                wl = cache[ck]
                key = run.spec.key
            sim = Simulator(wl, run.cfg)
            if observe is not None:
                observe(sim)
            sim.run()
            m = summarize(sim)
            m["workload"] = key
            m["seed"] = seed
            if run.tag:
                m["tag"] = run.tag
            if run.cfg.policy == "dlpm":
                m["user_quantum"] = run.cfg.user_quantum
                # the largest Q_u a refill used (= the fixed one once refilled)
                m["largest_quantum"] = max(
                    getattr(w.sched, "largest_quantum", 0.0) for w in sim.workers
                )
            if run.cfg.dispatcher == "d2lpm":
                m["worker_quantum"] = run.cfg.worker_quantum
            if run.cfg.fleet:
                m["router_requests"] = sim.dispatcher.dispatched
            if sim.placements is not None:
                m["placements"] = dict(sim.placements)
            tl = service_over_time(sim)
            if not timelines:
                del tl["response"]  # per-request points are only for plots
            m["timeline"] = tl
            out.append(m)
            advance(f"{key} {m['scheduler']}")
    finally:
        close()
    return out


# ---- sweeps (Figures 1 and 10) -------------------------------------------------

# fairq.DLPM needs a finite quantum: 1e12 stands for infinity (LPM order).
USER_QUANTA = (50.0, 200.0, 1000.0, 4000.0, 16000.0, 64000.0, 1e12)
WORKER_QUANTA = (500.0, 2000.0, 5000.0, 10000.0, 20000.0, 40000.0, math.inf)


def plan_sweep(spec: WorkloadSpec, base: SimConfig, workers: int = 4) -> Iterator[Run]:
    """DLPM's ``Q_u`` on 1 worker (with VTC and LPM as the end points,
    Figure 1) and D2LPM's ``Q_w`` on ``workers`` workers (with the baselines,
    Figure 10)."""
    for p in ("vtc", "lpm"):
        yield Run(spec, replace(base, workers=1, policy=p, dispatcher=None), tag="Q_u")
    for q in USER_QUANTA:
        yield Run(
            spec,
            replace(base, workers=1, policy="dlpm", dispatcher=None, user_quantum=q),
            tag="Q_u",
        )
    for d, p in PAIRS[:3]:
        yield Run(spec, replace(base, workers=workers, policy=p, dispatcher=d), tag="Q_w")
    for q in WORKER_QUANTA:
        yield Run(
            spec,
            replace(base, workers=workers, policy="dlpm", dispatcher="d2lpm", worker_quantum=q),
            tag="Q_w",
        )


def base_config(
    preset: str = DEFAULT_PRESET,
    model_overrides: list[str] | None = None,
    user_quantum: float | str = 2000.0,
    worker_quantum: float = 20000.0,
    memory: str = "estimate",
) -> SimConfig:
    """The :class:`SimConfig` every run of the comparison starts from."""
    model = StepModel.from_overrides(model_overrides, StepModel.preset(preset))
    return SimConfig(
        model=model, user_quantum=user_quantum, worker_quantum=worker_quantum, memory=memory
    )
