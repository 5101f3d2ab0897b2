"""``fairq simulate --paper``: the DLPM paper's claims, checked in a faithful model.

Each claim of the paper (abstract, Figures 1 and 7-11, Theorems 4.1 and 5.1)
is a :class:`Claim`: the paper's number, a function that computes fairq's
number on the same metric from the simulations it needs, and a verdict. What
makes the model faithful (docs/RESULTS.md, "The paper, replicated"):

- **Baselines as the systems run them**: Preble as the paper describes it
  (longest match above the match ratio, else explore; no load escape:
  ``preble``) with its own local scheduler, the multi-level priority wait
  queue of Preble's source (``preble-local``: ten levels by cache-hit ratio,
  one level per step round-robin, a quota growing with the level;
  ``rust/sched/preble.rs``), RR + LPM with LPM as SGLang 0.5 runs it (the walk stops at the
  first request that does not fit; FCFS above 128 waiting: ``lpm-sglang``),
  VTC behind per-client round robin. The idealised LPM and the SGLang
  router's cache-aware rule (``affinity``) are reported beside them, labelled.
- **Workloads of the paper's shape**: full-length prompts (Table 2), more
  clients than workers, the misbehaving client of Table 3; Figure 9's
  Tree-of-Thoughts shares one few-shot prefix across clients.
- **Roofline step model** (:mod:`fairq.sim.model`): a step takes the larger of
  memory traffic and compute, prefill pays its quadratic attention term;
  presets for the paper's testbeds (``a100-8b-roofline`` for Figure 7,
  ``a10g-3b-roofline`` for Figures 1 and 9-11).
- **Output lengths unknown to the engine** (memory model ``estimate``, the
  default; :mod:`fairq.sim.engine`): SGLang's new-token-ratio reservation,
  retraction and recomputation when the KV pool runs out; ``--memory
  oracle`` runs the old model (whole outputs reserved at admission) to
  compare. ``paper.md`` states which one ran.
- **Quanta scaled with prompt length**: the paper does not state its quanta
  per workload; fairq sets ``Q_u = max(2000, 2 x mean prompt tokens)`` and
  ``Q_w = 10 x Q_u`` (the default 2000 / 20000 ratio), so a quantum covers a
  couple of requests on every workload.

Latency is the paper's (Section 6.1): P99 of the well-behaved clients'
program completion time (TTFT for long-context QA).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fairq.sim.config import SimConfig
from fairq.sim.model import StepModel
from fairq.sim.runner import Run, WorkloadSpec, execute

#: Figure 7's workloads (rates per client per worker; 10 clients, more than
#: the 8 workers of the largest cell).
FIG7_SPECS: tuple[WorkloadSpec, ...] = (
    WorkloadSpec("qa", "S1", {"scale": 1.0, "rate": 0.3, "duration": 40.0, "docs_per_client": 8}),
    WorkloadSpec("qa", "S2", {"scale": 1.0, "rate": 0.3, "duration": 40.0, "docs_per_client": 8}),
    WorkloadSpec("tot", "S1", {"scale": 1.0, "rate": 0.08, "duration": 40.0}),
    WorkloadSpec("tot", "S2", {"scale": 1.0, "rate": 0.3, "duration": 40.0}),
    WorkloadSpec("judge", "S1", {"scale": 1.0, "rate": 0.5, "duration": 40.0}),
    WorkloadSpec("judge", "S2", {"scale": 1.0, "rate": 0.6, "duration": 40.0}),
)
CLIENTS = 10

#: Figure 7's schedulers: (dispatcher, local policy) on several workers; on
#: one worker the local policy alone. The references: the idealised
#: baselines fairq used before, and Preble's dispatcher over SGLang's LPM (what
#: fairq ran as Preble before it had Preble's own local queue), which isolates
#: what that queue changes.
FAITHFUL = (
    ("d2lpm", "dlpm"),
    ("client-rr", "vtc"),
    ("preble", "preble-local"),
    ("rr", "lpm-sglang"),
)
REFERENCE = (("rr", "lpm"), ("affinity", "lpm"), ("preble", "lpm-sglang"))
ONE_WORKER = ("dlpm", "vtc", "lpm-sglang", "lpm")


def quanta(spec: WorkloadSpec) -> tuple[float, float]:
    """``(Q_u, Q_w)`` for a workload: ``Q_u = max(2000, 2 x mean prompt)``
    rounded to 1000, ``Q_w = 10 x Q_u`` (see the module docs)."""
    wl = spec.build(1, 0, {"duration": min(10.0, spec.kwargs.get("duration", 10.0))})
    mean = wl.summary()["avg_prompt"]
    q_u = max(2000.0, 1000.0 * round(2 * mean / 1000.0))
    return q_u, 10 * q_u


def latency_key(workload: str) -> str:
    """The paper's latency metric for a workload: TTFT for QA, else programs."""
    return "ttft_p99_s" if workload.startswith("qa") else "program_p99_s"


@dataclass
class Plan:
    """The simulations of the replication, grouped so that one workload at a
    time is held in memory."""

    groups: list[list[Run]] = field(default_factory=list)

    def add(self, runs: list[Run]) -> None:
        if runs:
            self.groups.append(runs)

    @property
    def size(self) -> int:
        return sum(len(g) for g in self.groups)


def _keyed(key: str, name: str, misbehave: str | None, kwargs: dict[str, Any]) -> WorkloadSpec:
    return WorkloadSpec(name, misbehave, kwargs, label=key)


def plan(
    workers: Sequence[int] = (1, 2, 4, 8),
    clients: int = CLIENTS,
    scale: float | None = None,
    memory: str = "estimate",
    quantum: str | None = None,
) -> Plan:
    """Every simulation the claims need. ``scale`` (tests) shrinks prompts;
    ``memory``: the KV memory model (:class:`~fairq.sim.engine.SimConfig`);
    ``quantum="auto"``: every DLPM's ``Q_u`` automatic (ALGORITHMS.md §6) in
    place of :func:`quanta`'s (the Q_u sweeps and ``Q_w`` keep theirs)."""
    p = Plan()

    def q_of(spec: WorkloadSpec) -> tuple[float | str, float]:
        q_u, q_w = quanta(spec)
        return ("auto" if quantum == "auto" else q_u), q_w

    a100 = StepModel.preset("a100-8b-roofline")
    a10g = StepModel.preset("a10g-3b-roofline")

    def kw(spec: WorkloadSpec, **extra: Any) -> dict[str, Any]:
        out = {**spec.kwargs, "num_clients": clients, **extra}
        if scale is not None:
            out["scale"] = scale * out.get("scale", 1.0)
        return out

    # Figure 7 (A100 / 8B), abstract, Theorems 4.1 and 5.1
    for base in FIG7_SPECS:
        spec = _keyed(base.key, base.name, base.misbehave, kw(base))
        q_u, q_w = q_of(spec)
        cfg = SimConfig(model=a100, user_quantum=q_u, worker_quantum=q_w, memory=memory)
        for w in workers:
            if w == 1:
                runs = [
                    Run(spec, replace(cfg, workers=1, policy=p_), tag="fig7") for p_ in ONE_WORKER
                ]
            else:
                pairs = FAITHFUL + (REFERENCE if w == 4 else ())
                runs = [
                    Run(spec, replace(cfg, workers=w, policy=lp, dispatcher=d), tag="fig7")
                    for d, lp in pairs
                ]
            p.add(runs)
    # Figures 9 and 10 (A10G / 3B, 4 workers): ToT with a misbehaving client
    # sending 10x longer questions, branch count 3, one few-shot prefix shared
    # by every client
    tot = _keyed(
        "tot-S2-shared",
        "tot",
        "S2",
        kw(FIG7_SPECS[3], branches=3, shared_prefix=True, rate=0.06, num_clients=4),
    )
    q_u, q_w = q_of(tot)
    cfg = SimConfig(model=a10g, workers=4, user_quantum=q_u, worker_quantum=q_w, memory=memory)
    runs = [
        Run(tot, replace(cfg, policy=lp, dispatcher=d), tag="fig9")
        for d, lp in FAITHFUL + REFERENCE
    ]
    runs += [
        Run(tot, replace(cfg, policy="dlpm", dispatcher="d2lpm", worker_quantum=q), tag="fig10")
        for q in (2000.0, 40000.0, math.inf)
    ]
    p.add(runs)
    # Figure 1 (A10G, 1 worker): the misbehaving QA client's extra requests
    # are real cost (4x the documents: cache misses)
    qa_a10g = {"scale": 0.25, "rate": 2.0, "duration": 40.0, "docs_per_client": 4}
    fig1 = _keyed(
        "qa-S1-cost", "qa", "S1", kw(FIG7_SPECS[0], **qa_a10g, bad_docs=16, num_clients=4)
    )
    q_u, _ = q_of(fig1)
    cfg = SimConfig(model=a10g, workers=1, user_quantum=q_u, memory=memory)
    p.add([Run(fig1, replace(cfg, policy=lp), tag="fig1") for lp in ONE_WORKER])
    # Figure 11 (A10G, 1 worker): 5 and 50 clients at the same total rate
    for n in (5, 50):
        spec = _keyed(
            f"qa-{n}-clients",
            "qa",
            None,
            kw(FIG7_SPECS[0], **{**qa_a10g, "rate": 10.0 / n, "docs_per_client": 6}, num_clients=n),
        )
        q_u, _ = q_of(spec)
        cfg = SimConfig(model=a10g, workers=1, user_quantum=q_u, memory=memory)
        p.add([Run(spec, replace(cfg, policy=lp), tag="fig11") for lp in ("dlpm", "vtc", "lpm")])
    return p


def run_plan(p: Plan, *, seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Run every group of ``p`` (one progress bar over all)."""
    from fairq.sim.runner import _progress

    advance, close = _progress(p.size, "paper") if progress else (lambda _s: None, lambda: None)
    out: list[dict[str, Any]] = []
    try:
        for group in p.groups:
            for r in execute(group, seed=seed, progress=False):
                r.pop("timeline", None)
                out.append(r)
                advance(f"{r['workload']} {r['workers']} {r['scheduler']}")
    finally:
        close()
    return out


# ---- claims ------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and how fairq checks it."""

    source: str
    text: str
    paper: str
    #: results -> (fairq's number as text, verdict, detail)
    check: Callable[[list[dict[str, Any]]], tuple[str, str, str]]
    #: why it does not hold in fairq's model, shown when it does not
    why_not: str = ""


def _find(results: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in results if all(r.get(k) == v for k, v in match.items())]


def _one(results: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    found = _find(results, **match)
    return found[0] if found else None


def _cells(results: list[dict[str, Any]]) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    for r in _find(results, tag="fig7"):
        cell = (r["workload"], r["workers"])
        if cell not in seen:
            seen.append(cell)
    return seen


def ratios(
    results: list[dict[str, Any]],
    num: tuple[str | None, str],
    den: tuple[str | None, str],
    metric: str,
    multi_only: bool = False,
) -> list[tuple[str, float]]:
    """Per Figure 7 cell: ``metric`` of scheduler ``num`` over ``den``, each a
    (dispatcher, policy) pair (dispatcher None on one worker); ``metric``
    ``latency`` is the workload's latency (:func:`latency_key`). Cells
    lacking either run, or with a NaN, are left out; ``multi_only``: one-worker
    cells too (the paper has no Preble on one GPU)."""
    out = []
    for wl, w in _cells(results):
        if multi_only and w == 1:
            continue
        pick = []
        for d, lp in (num, den):
            if w == 1:
                d = None
            r = _one(results, tag="fig7", workload=wl, workers=w, policy=lp, dispatcher=d)
            pick.append(r)
        a, b = pick
        if a is None or b is None:
            continue
        key = latency_key(wl) if metric == "latency" else metric
        x, y = a[key], b[key]
        if x is None or y is None or not y or math.isnan(x) or math.isnan(y):
            continue
        out.append((f"{wl}@{w}", x / y))
    return out


def _upto(
    paper_max: float, paper_mean: float | None, rs: list[tuple[str, float]]
) -> tuple[str, str, str]:
    """Verdict of an "up to X (mean Y) better" claim from per-cell ratios
    (ratio > 1: the paper's direction)."""
    if not rs:
        return "-", "not run", ""
    vals = [v for _, v in rs]
    top = max(rs, key=lambda t: t[1])
    mean = sum(vals) / len(vals)
    wins = sum(1 for v in vals if v > 1)
    text = f"up to {top[1]:.2f}x ({top[0]}), mean {mean:.2f}x"
    detail = f"better in {wins}/{len(vals)} cells; lowest {min(vals):.2f}x"
    if top[1] >= paper_max / 2 and (paper_mean is None or mean >= paper_mean / 2):
        verdict = "reproduced"
    elif top[1] > 1 and mean >= 1:
        verdict = "direction only"
    else:
        verdict = "not reproduced"
    return text, verdict, detail


def _inv(rs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    return [(k, 1 / v) for k, v in rs if v > 0]


D2 = ("d2lpm", "dlpm")
VTC = ("client-rr", "vtc")
PREBLE = ("preble", "preble-local")
#: Preble's dispatcher over SGLang's LPM (a reference pair).
PREBLE_SGLANG = ("preble", "lpm-sglang")
RR = ("rr", "lpm-sglang")


def _throughput_vs_preble(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    rs = ratios(results, D2, PREBLE, "service_tok_s", multi_only=True)
    if not rs:
        return "-", "not run", ""
    low = min(rs, key=lambda t: t[1])
    ok = sum(1 for _, v in rs if v >= 0.97)
    verdict = (
        "reproduced" if ok >= len(rs) - 1 else ("partly" if ok >= len(rs) / 2 else "not reproduced")
    )
    return (
        f">= 0.97x in {ok}/{len(rs)} cells",
        verdict,
        f"lowest {low[1]:.2f}x ({low[0]})",
    )


def _preble_vs_rr(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    """Sec. 7.1: Preble (with its priority wait queue) slightly better than RR +
    LPM: per cell on 2+ workers, RR + LPM's latency over Preble's (> 1: Preble
    better) and Preble's service rate over RR + LPM's."""
    lat = ratios(results, RR, PREBLE, "latency", multi_only=True)
    thr = ratios(results, PREBLE, RR, "service_tok_s", multi_only=True)
    if not lat:
        return "-", "not run", ""
    wins = sum(1 for _, v in lat if v > 1)
    mean = sum(v for _, v in lat) / len(lat)
    text = f"latency: Preble lower in {wins}/{len(lat)} cells, RR + LPM / Preble mean {mean:.2f}x"
    if thr:
        text += f"; service rate Preble / RR + LPM mean {sum(v for _, v in thr) / len(thr):.2f}x"
    best = max(lat, key=lambda t: t[1])
    worst = min(lat, key=lambda t: t[1])
    detail = f"best {best[1]:.2f}x ({best[0]}), worst {worst[1]:.2f}x ({worst[0]})"
    # the queue alone: the same dispatcher over SGLang's LPM (reference cells)
    alone = ratios(results, PREBLE_SGLANG, PREBLE, "latency", multi_only=True)
    if alone:
        q_mean = sum(v for _, v in alone) / len(alone)
        q_wins = sum(1 for _, v in alone if v > 1)
        detail += (
            f"; the queue alone (Preble+LPM-SGLang / Preble+Preble-local latency): "
            f"mean {q_mean:.2f}x, lower in {q_wins}/{len(alone)} cells"
        )
        if abs(q_mean - 1) < abs(mean - 1) / 2:
            detail += ", so most of the gap is Preble's placement, not its queue"
    if wins >= len(lat) / 2 and mean >= 1:
        # "slightly": a mean gap above 1.5x is the direction, not the size
        verdict = "reproduced" if mean <= 1.5 else "direction only"
    else:
        verdict = "partly" if wins >= len(lat) / 2 or mean >= 1 else "not reproduced"
    return text, verdict, detail


def _jain_order(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    names = (("VTC", VTC), ("D2LPM", D2), ("Preble", PREBLE), ("RR+LPM", RR))
    # the cells on 2+ workers where every scheduler had a common backlogged window
    per_cell: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for name, (d, lp) in names:
        for r in _find(results, tag="fig7", dispatcher=d, policy=lp):
            if (
                r["workers"] > 1
                and r["jain_client"] is not None
                and not math.isnan(r["jain_client"])
            ):
                per_cell.setdefault((r["workload"], r["workers"]), {})[name] = r
    cells = [c for c, rs in per_cell.items() if len(rs) == len(names)]
    if not cells:
        return "-", "no backlogged window", "no cell had every client backlogged at once"

    def mean(name: str, key: str) -> float:
        return sum(per_cell[c][name][key] for c in cells) / len(cells)

    j = {name: mean(name, "jain_client") for name, _ in names}
    cost = {name: mean(name, "jain_cost") for name, _ in names}
    text = "client view: " + ", ".join(f"{k} {v:.3f}" for k, v in j.items())
    text += "; cost: " + ", ".join(f"{k} {v:.3f}" for k, v in cost.items())
    if all(per_cell[c][name].get("jain_demand") is not None for c in cells for name, _ in names):
        demand = {name: mean(name, "jain_demand") for name, _ in names}
        text += "; on demand: " + ", ".join(f"{k} {v:.3f}" for k, v in demand.items())
    above = j["D2LPM"] > max(j["Preble"], j["RR+LPM"])
    near = j["D2LPM"] >= j["VTC"] - 0.1
    verdict = "reproduced" if above and near else ("partly" if above or near else "not reproduced")
    return text, verdict, f"mean Jain over the {len(cells)} cells on 2+ workers with a window"


def _fig1(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    r = {lp: _one(results, tag="fig1", policy=lp) for lp in ONE_WORKER}
    if any(v is None for v in r.values()):
        return "-", "not run", ""
    d, v, lp = r["dlpm"], r["vtc"], r["lpm"]
    assert d is not None and v is not None and lp is not None
    thr = d["service_tok_s"] / lp["service_tok_s"]
    x_vtc = d["service_tok_s"] / v["service_tok_s"]
    text = (
        f"DLPM {thr:.2f}x LPM's service rate ({x_vtc:.2f}x VTC's); Jain (client) DLPM "
        f"{d['jain_client']:.3f}, VTC {v['jain_client']:.3f}, LPM {lp['jain_client']:.3f}; "
        f"Jain (cost) DLPM {d['jain_cost']:.3f}, VTC {v['jain_cost']:.3f}, "
        f"LPM {lp['jain_cost']:.3f}; Jain (demand) DLPM {_n(d.get('jain_demand'))}, "
        f"VTC {_n(v.get('jain_demand'))}, LPM {_n(lp.get('jain_demand'))}"
    )
    ok = thr >= 0.85 and d["jain_client"] >= v["jain_client"] - 0.05
    part = thr >= 0.85 or d["jain_client"] > lp["jain_client"]
    return (
        text,
        "reproduced" if ok else ("partly" if part else "not reproduced"),
        "qa-S1-cost, 1 worker",
    )


def _fig9(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    runs = {(r["dispatcher"], r["policy"]): r for r in _find(results, tag="fig9")}
    d2 = runs.get(D2)
    if d2 is None:
        return "-", "not run", ""
    parts = []
    best = 0.0
    for name, pair in (("VTC", VTC), ("Preble", PREBLE)):
        o = runs.get(pair)
        if o is not None:
            x = o["makespan_s"] / d2["makespan_s"]
            best = max(best, x)
            parts.append(f"{x:.2f}x {name}")
    pre = runs.get(PREBLE)
    share = (
        f"; Preble's busiest worker got {pre['busiest_worker_share']:.0%} of requests"
        if pre
        else ""
    )
    verdict = "reproduced" if best >= 1.5 else ("direction only" if best > 1 else "not reproduced")
    return (
        "D2LPM finishes " + ", ".join(parts) + " sooner" + share,
        verdict,
        "tot-S2-shared, 4 workers",
    )


def _fig10(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    q = {r["worker_quantum"]: r for r in _find(results, tag="fig10")}
    lo, hi = q.get(2000.0), q.get(40000.0)
    if lo is None or hi is None:
        return "-", "not run", ""
    others = [
        r["service_tok_s"]
        for r in _find(results, tag="fig9")
        if (r["dispatcher"], r["policy"]) in FAITHFUL and r["dispatcher"] != "d2lpm"
    ]
    above = hi["service_tok_s"] >= max(others) if others else False
    text = (
        f"service {lo['service_tok_s']:,.0f} -> {hi['service_tok_s']:,.0f} tok/s, "
        f"Jain {lo['jain_client']:.3f} -> {hi['jain_client']:.3f}"
        + ("; above VTC, Preble and RR+LPM" if above else "; below the best baseline")
    )
    inf = q.get(math.inf)
    if inf is not None:
        text += (
            f"; Q_w = inf: {inf['service_tok_s']:,.0f} tok/s, busiest worker "
            f"{inf['busiest_worker_share']:.0%} of requests"
        )
    rises = hi["service_tok_s"] >= lo["service_tok_s"]
    verdict = "reproduced" if rises and above else ("partly" if rises else "not reproduced")
    return text, verdict, "Q_w 2000 -> 40000, tot-S2-shared, 4 workers"


def _fig11(results: list[dict[str, Any]]) -> tuple[str, str, str]:
    parts = []
    ok = True
    for n in (5, 50):
        r = {x["policy"]: x for x in _find(results, tag="fig11", workload=f"qa-{n}-clients")}
        if set(r) != {"dlpm", "vtc", "lpm"}:
            return "-", "not run", ""
        d = r["dlpm"]["service_tok_s"] / r["lpm"]["service_tok_s"]
        v = r["vtc"]["service_tok_s"] / r["lpm"]["service_tok_s"]
        parts.append(f"{n} clients: DLPM {d:.2f}x, VTC {v:.2f}x LPM")
        ok = ok and d >= 0.85 and v < d
    return (
        "; ".join(parts),
        "reproduced" if ok else "not reproduced",
        "qa, 1 worker, same total rate",
    )


def _bound(results: list[dict[str, Any]], distributed: bool) -> tuple[str, str, str]:
    worst = 0.0
    worst_strict = 0.0
    where = ""
    n = 0
    for r in _find(results, tag="fig7", policy="dlpm"):
        if (r["workers"] > 1) != distributed:
            continue
        w = r["workers"] if distributed else 1
        # Q*: the largest Q_u a refill used (the fixed one, or the automatic one's)
        q_u = max(q for q in (r["user_quantum"], r.get("largest_quantum", 0.0)) if q != "auto")
        bound = 2 * w * (r["max_input_len"] + 2 * r["kv_capacity"] + q_u)
        strict = 2 * w * (r["max_input_len"] + 2 * r["max_output_len"] + q_u)
        n += 1
        t = r["max_gap_cost"] / bound
        if t > worst:
            worst, where = t, f"{r['workload']}@{r['workers']}"
        worst_strict = max(worst_strict, r["max_gap_cost"] / strict)
    if not n:
        return "-", "not run", ""
    verdict = "holds" if worst <= 1 else "violated"
    return (
        f"largest gap {worst:.1%} of the bound ({where}); {worst_strict:.0%} of a stricter "
        "bound (not the theorem's) with M = one request's output",
        verdict,
        f"{n} runs; M = the worker's KV capacity (the most tokens a batch holds)",
    )


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "Abstract, Fig. 7",
        "D2LPM's throughput is higher than VTC's",
        "up to 2.87x",
        lambda rs: _upto(2.87, None, ratios(rs, D2, VTC, "service_tok_s")),
        "VTC's cache hit is high wherever a client's own requests share prefixes and "
        "per-client round robin keeps a client's requests spread thinly, so the gap is "
        "the recomputed prefix share only.",
    ),
    Claim(
        "Abstract, Sec. 6.2",
        "Preble's well-behaved-client latency is higher than D2LPM's",
        "up to 7.18x (mean 2.90x)",
        lambda rs: _upto(7.18, 2.90, _inv(ratios(rs, D2, PREBLE, "latency", multi_only=True))),
        "With each client's prefixes its own, Preble's exploitation keeps the misbehaving "
        "client on the workers that hold its prefixes, which isolates the other clients by "
        "placement; Preble loses where one worker gets far more than its share (the "
        "busiest worker column of the every-run table). Preble now runs its own local "
        "queue (preble-local, ten hit-ratio levels served round-robin) instead of "
        "SGLang's LPM; that moved the ratio little (mean 1.04x, 8/18 cells with "
        "LPM-SGLang): the gap is placement, not the local queue.",
    ),
    Claim(
        "Sec. 6.2",
        "RR + LPM's well-behaved-client latency is higher than D2LPM's",
        "up to 9.55x (mean 4.06x)",
        lambda rs: _upto(9.55, 4.06, _inv(ratios(rs, D2, RR, "latency"))),
        "The direction holds in most cells, the size does not: in the model the gap is "
        "the queueing behind the misbehaving client's cache hits alone; what else made "
        "the paper's gap (engine overheads, real output lengths) is not modelled.",
    ),
    Claim(
        "Sec. 7.1",
        "Preble performs slightly better than RR + LPM (its multi-level priority wait "
        "queue avoids starvation)",
        "slightly better",
        _preble_vs_rr,
        "in the model Preble beats RR + LPM by placement (each worker keeps its "
        "clients' prefixes), far more than 'slightly'. The queue itself does not help: "
        "on 4 workers Preble's latency with it is within 6% of LPM-SGLang's, except on "
        "judge-S2, where serving the low-hit levels in turn cuts Preble's cache hit by a "
        "third to a half and its latency rises 1.5x.",
    ),
    Claim(
        "Sec. 6.2",
        "VTC's well-behaved-client latency is higher than D2LPM's",
        "up to 7.96x (mean 2.98x)",
        lambda rs: _upto(7.96, 2.98, _inv(ratios(rs, D2, VTC, "latency"))),
        "VTC loses only what it recomputes; in the model a recomputed prefix costs its "
        "roofline time and nothing else.",
    ),
    Claim(
        "Sec. 6.2",
        "D2LPM's throughput matches or exceeds Preble's (except QA-S2 on 8 GPUs)",
        "every cell but one",
        _throughput_vs_preble,
        "D2LPM moves a client to another worker once its worker deficit is spent, and on "
        "QA every move recomputes a long document; Preble never leaves the worker that "
        "holds the document (compare the cache hit columns). With Preble's own queue "
        "(preble-local) the QA cells are unchanged; on judge-S2 the queue's round "
        "robin over hit-ratio levels keeps admitting low-hit requests, Preble's cache "
        "hit falls (0.28-0.30, from 0.44-0.59 with LPM-SGLang) and D2LPM now exceeds "
        "it there (10/18 cells with LPM-SGLang).",
    ),
    Claim(
        "Sec. 6.2",
        "D2LPM's throughput is higher than RR + LPM's",
        "up to 2.22x",
        lambda rs: _upto(2.22, None, ratios(rs, D2, RR, "service_tok_s")),
        "Round robin spreads each client over every worker, but with LPM on each worker "
        "the prefixes are soon cached everywhere when the KV pool holds them all.",
    ),
    Claim(
        "Fig. 7",
        "Jain's index: VTC >= D2LPM (slightly below VTC) > Preble, RR + LPM",
        "D2LPM slightly below VTC",
        _jain_order,
        "Jain on the client view counts input + 2 x output tokens; DLPM accounts extend "
        "tokens, so a client whose extra requests are cache hits gets more client-view "
        "service at no extra cost (docs/RESULTS.md). Preble's own queue (preble-local) "
        "avoids starvation across hit-ratio levels but keeps no per-client state: its "
        "Jain stays below D2LPM's, as the paper says (0.780 with LPM-SGLang).",
    ),
    Claim(
        "Fig. 1",
        "DLPM: throughput comparable to LPM, fairness close to VTC (1 GPU)",
        "Pareto frontier",
        _fig1,
        "the paper's Jain is the client view (input + 2 x output); DLPM equalises cost "
        "(extend tokens), in which VTC, charging whole prompts, is the unfair one.",
    ),
    Claim(
        "Fig. 9",
        "D2LPM finishes the ToT programs up to 2x sooner than VTC and Preble; Preble "
        "piles one client's requests on one GPU",
        "up to 2x",
        _fig9,
        "the misbehaving client's 10x question puts its match ratio below Preble's "
        "threshold, so its trees explore the least-loaded worker and soon every worker "
        "holds the shared prefix: Preble's load stays balanced. Only D2LPM with Q_w = inf "
        "(Fig. 10 row) keeps the prefix on one worker. Preble's own local queue "
        "(preble-local) does not change this (1.19x with LPM-SGLang).",
    ),
    Claim(
        "Fig. 10",
        "D2LPM's throughput rises with Q_w and ends above every other scheduler; "
        "Jain falls slightly (0.855 -> 0.83)",
        "rises; Jain -0.025",
        _fig10,
        "with output lengths unknown (memory model estimate) the KV pool holds only the "
        "tokens requests have produced, where the oracle model reserved whole outputs and "
        "evicted cached prefixes to make room for them; round robin, whose every worker "
        "needs every prefix, gains the most from the larger cache (RR + LPM-SGLang: cache "
        "hit 0.81 -> 0.84, +10% service rate), D2LPM, which already keeps a client's "
        "prefixes on few workers, +2%. D2LPM at Q_w 40000 ends 3% below RR + LPM-SGLang, "
        "at Q_w 30000 (Fig. 9's run) just above it: the claim rests on a gap of a few "
        "percent (under --memory oracle it holds).",
    ),
    Claim(
        "Fig. 11",
        "DLPM's service rate stays near LPM's from 5 to 50 clients; VTC's below",
        "DLPM ~ LPM > VTC",
        _fig11,
        "",
    ),
    Claim(
        "Thm. 4.1",
        "Two backlogged clients' costs differ by at most 2 (U + Q_u) on one worker",
        "bound holds",
        lambda rs: _bound(rs, False),
        "",
    ),
    Claim(
        "Thm. 5.1",
        "... and by at most 2 |W| (U + Q_u) across |W| workers under D2LPM",
        "bound holds",
        lambda rs: _bound(rs, True),
        "",
    ),
)


def claims_table(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    """One row per :data:`CLAIMS` entry: source, claim, paper, fairq, verdict,
    detail (with the reason wherever the claim does not hold)."""
    rows = []
    for c in CLAIMS:
        got, verdict, detail = c.check(results)
        if verdict not in ("reproduced", "holds") and c.why_not:
            detail = f"{detail}. Why: {c.why_not}" if detail else f"Why: {c.why_not}"
        rows.append(
            {
                "source": c.source,
                "claim": c.text,
                "paper": c.paper,
                "fairq": got,
                "verdict": verdict,
                "detail": detail,
            }
        )
    return rows


def markdown(rows: list[dict[str, str]], results: list[dict[str, Any]], header: str) -> str:
    """``docs/results/paper.md``: the claims table, then every run."""
    out = [
        header,
        "",
        "| source | claim | paper | fairq | verdict | detail |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [_cell(r[k]) for k in ("source", "claim", "paper", "fairq")]
        cells += [f"**{r['verdict']}**", _cell(r["detail"])]
        out.append("| " + " | ".join(cells) + " |")
    out += [
        "",
        "## Every run",
        "",
        "| figure | workload | workers | scheduler | Q_u | Q_w | service tok/s | cache hit | "
        "Jain (client) | Jain (cost) | Jain (demand) | latency p50 / p99 s | makespan s | "
        "busiest worker | retractions |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lk = latency_key(r["workload"])
        p50 = r[lk.replace("p99", "p50")]
        qw = r.get("worker_quantum")
        out.append(
            f"| {r.get('tag', '')} | {r['workload']} | {r['workers']} | {r['scheduler']} | "
            f"{_g(r.get('user_quantum'))} | {_g(qw)} | {r['service_tok_s']:,.0f} | "
            f"{r['cache_hit']:.2f} | {_n(r['jain_client'])} | {_n(r['jain_cost'])} | "
            f"{_n(r.get('jain_demand'))} | "
            f"{_n(p50, '.1f')} / {_n(r[lk], '.1f')} | {r['makespan_s']:,.0f} | "
            f"{r['busiest_worker_share']:.0%} | {r.get('retractions', 0):,} |"
        )
    return "\n".join(out) + "\n"


def memory_note(memory: str, results: list[dict[str, Any]]) -> str:
    """The sentence of ``paper.md`` saying which KV memory model ran."""
    n = sum(r.get("retractions", 0) for r in results)
    runs = sum(1 for r in results if r.get("retractions", 0))
    tokens = sum(r.get("recomputed_tokens", 0) for r in results)
    if memory == "oracle":
        return (
            "Memory model **oracle** (`--memory oracle`): each request's whole output is "
            "reserved at admission (output lengths known to the engine), no retraction."
        )
    return (
        "Memory model **estimate** (the default; `--memory oracle` gives the old one): "
        "output lengths are unknown to the engine, which reserves SGLang's new-token-ratio "
        "estimate of each output, allocates one KV token per decode step and retracts "
        f"running requests when the pool runs out: {n:,} retractions in {runs} of the "
        f"{len(results)} runs, {tokens:,} tokens recomputed."
    )


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell (``|`` escaped)."""
    return text.replace("|", "\\|")


def _g(v: Any) -> str:
    return "-" if v is None else v if isinstance(v, str) else f"{v:g}"


def _n(v: Any, fmt: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, fmt)


def replicate(
    *,
    workers: Sequence[int] = (1, 2, 4, 8),
    seed: int = 0,
    progress: bool = True,
    scale: float | None = None,
    memory: str = "estimate",
) -> tuple[list[dict[str, str]], list[dict[str, Any]], float]:
    """Run the plan and check the claims: (rows, results, wall seconds)."""
    t0 = time.perf_counter()
    results = run_plan(plan(workers, scale=scale, memory=memory), seed=seed, progress=progress)
    return claims_table(results), results, time.perf_counter() - t0
