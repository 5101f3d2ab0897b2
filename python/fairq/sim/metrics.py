"""Metrics that judge a policy (ALGORITHMS.md section 8).

The keys of :func:`summarize` read as the columns of ``fairq simulate``'s
table (:data:`fairq.sim.cli.COLUMNS`):

- ``service_tok_s``: the paper's service rate, client view:
  ``(input_tokens + 2 * output_tokens) / makespan`` over finished requests;
  also ``tokens_per_s`` (input + output) and ``requests_per_s``.
- ``cache_hit``: cached prompt tokens / prompt tokens at admission (a
  request's first; a retracted request's readmission counts in
  ``recomputed_tokens``).
- ``jain_client`` (:func:`jain_index`): Jain's index ``(sum x)^2 / (n * sum
  x^2)`` over per-client service rates during the time when every client is
  backlogged (has a request waiting for admission); NaN if that never
  happens. ``jain_cost``: the same in the system's cost
  ``w_e * extend + w_q * output``. ``per_client[c]["service_in_window"]``:
  client ``c``'s service (client view) in that time, what ``jain_client``
  divides by ``jain_window_s``.
- ``jain_demand`` (:func:`jain_on_demand`): Jain's index on demand, over
  the time some client is backlogged: each client's client-view service over
  its max-min fair share (water-filling, step by step, a client with nothing
  waiting asking for what it got, a backlogged one for unlimited service), so
  a client that asks for less than an equal split is not penalised; with
  every client backlogged it is ``jain_client``'s index. NaN if no client was
  ever backlogged.
- ``p50/p99`` of end-to-end latency and time to first token, per request,
  over well-behaved clients; the same for whole programs (ToT tree, judge
  run, conversation; a QA request is its own program).
- ``max_gap_client``: the largest service difference between two clients
  that are both backlogged (a request waiting for admission) over any common
  window (client view); ``max_gap_cost`` the same in the system's cost, the
  quantity the fairness bounds speak of.
- ``busiest_worker_share``: the share of requests dispatched to the busiest
  worker (1 / workers: even; 1: one worker got them all).
- ``max_input_len``, ``max_output_len``, ``kv_capacity``: what the fairness
  bounds' ``U = w_e * L_input + w_q * M`` is made of.
- ``memory``, ``max_new_tokens``: the KV memory model that ran
  (:class:`~fairq.sim.engine.SimConfig`); ``retractions``: running requests
  retracted when the KV pool ran out (model "estimate"; 0 under "oracle"),
  ``recomputed_tokens``: the tokens prefilled again when they were readmitted.
- ``service_over_time``: per-client service per time bin (for plots).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from fairq.sim.engine import Simulator


def jain_index(values: Iterable[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` in ``[1/n, 1]`` (1 = equal).

    An empty input or all zeros gives 1.0 (nothing to be unfair about).
    Raises ValueError on a negative or non-finite value (naming its index).
    The one definition (``fairq.transformers.jain_index`` is this
    function; ``fairq.sim.jain`` its deprecated old name).
    """
    xs = [float(v) for v in values]
    for i, x in enumerate(xs):
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"values[{i}] must be finite and >= 0, got {x!r}")
    top = max(xs, default=0.0)
    if top == 0:
        return 1.0
    # the index is scale-free: dividing by the largest value keeps the
    # squares out of subnormal and overflow range (1.5e-158 twice gave
    # 1.0000000057 unscaled; 1e200 overflowed)
    ys = [x / top for x in xs]
    return sum(ys) ** 2 / (len(ys) * sum(y * y for y in ys))


def max_min_shares(demand: Sequence[float], capacity: float) -> list[float]:
    """Max-min fair (water-filling) split of ``capacity`` over ``demand``
    (``inf``: unlimited): ``min(d_i, level)`` each, ``level`` set so the shares
    sum to ``capacity``; every demand in full when they sum to at most it."""
    n = len(demand)
    shares = [0.0] * n
    left = float(capacity)
    order = sorted(range(n), key=lambda i: demand[i])
    for k, i in enumerate(order):
        level = left / (n - k)
        if demand[i] <= level:
            shares[i] = float(demand[i])
            left -= demand[i]
        else:
            for j in order[k:]:
                shares[j] = level
            break
    return shares


def jain_on_demand(samples: np.ndarray, backlog: np.ndarray, chunk: int = 65536) -> float:
    """Jain's index on demand: :func:`jain_index` of ``S_i / F_i``.

    ``samples``: (T, n) cumulative service; ``backlog``: (T, n) booleans, client
    i backlogged (a request waiting) at sample t. Over the intervals
    ``(t-1, t]`` that start with some client backlogged, ``S_i`` is client i's
    service and ``F_i`` its max-min fair share: each interval's service is
    split by water-filling (:func:`max_min_shares`) where a backlogged client
    asks for unlimited service and one that is not asks for what it received
    (it had nothing more waiting); ``F_i`` sums the shares. A client that asks
    for less than an equal split is measured against what it asked for, not
    penalised; with every client backlogged throughout it is the plain Jain
    index of the service. Clients with ``F_i = 0`` are left out; NaN when no
    interval starts with a client backlogged.
    """
    serv = np.asarray(samples, dtype=np.float64)
    back = np.asarray(backlog, dtype=bool)
    if serv.ndim != 2 or serv.shape != back.shape:
        raise ValueError(f"samples and backlog must be (T, n) alike: {serv.shape} vs {back.shape}")
    rows = np.flatnonzero(back[:-1].any(axis=1)) if len(serv) > 1 else np.array([], int)
    if rows.size == 0:
        return float("nan")
    n = serv.shape[1]
    got = np.zeros(n)
    fair = np.zeros(n)
    big = 1e300  # stands for an unlimited demand (sums of n of them stay finite)
    k = np.arange(n)
    for lo in range(0, rows.size, chunk):
        r = rows[lo : lo + chunk]
        s = serv[r + 1] - serv[r]
        demand = np.where(back[r], big, s)
        cap = s.sum(axis=1)
        d = np.sort(demand, axis=1)
        before = np.zeros_like(d)  # sum of the smaller demands (exclusive)
        np.cumsum(d[:, :-1], axis=1, out=before[:, 1:])
        # the level sits at the first sorted demand that, raised to, covers cap
        first = np.argmax(d * (n - k) + before >= cap[:, None], axis=1)
        idx = np.arange(len(r))
        level = (cap - before[idx, first]) / (n - first)
        got += s.sum(axis=0)
        fair += np.minimum(demand, level[:, None]).sum(axis=0)
    keep = fair > 0
    return jain_index(got[keep] / fair[keep])


def max_backlogged_gap(samples: np.ndarray, backlog: np.ndarray) -> float:
    """Largest ``|(S_f(t2) - S_f(t1)) - (S_g(t2) - S_g(t1))|`` over pairs of
    clients both backlogged on every sample of ``[t1, t2]``.

    ``samples``: (T, n) cumulative service; ``backlog``: (T, n) booleans.
    Within a maximal common-backlog run the largest gap is
    ``max(D) - min(D)`` of ``D = S_f - S_g``.
    """
    t, n = samples.shape
    best = 0.0
    for f in range(n):
        for g in range(f + 1, n):
            both = backlog[:, f] & backlog[:, g]
            if not both.any():
                continue
            d = samples[:, f] - samples[:, g]
            # split into runs of consecutive True
            idx = np.flatnonzero(both)
            breaks = np.flatnonzero(np.diff(idx) > 1)
            starts = np.concatenate([[0], breaks + 1])
            ends = np.concatenate([breaks + 1, [idx.size]])
            for s, e in zip(starts, ends, strict=False):
                seg = d[idx[s] : idx[e - 1] + 1]
                best = max(best, float(seg.max() - seg.min()))
    return best


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]); NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _program_latencies(sim: Simulator, good: set[str]) -> list[float]:
    """End-to-end latency of every finished program (a request alone is its
    own program) of a client in ``good``: first arrival to last finish."""
    reqs = sim.workload.requests
    prog_start: dict[int, float] = {}
    prog_end: dict[int, float] = {}
    prog_client: dict[int, str] = {}
    prog_done: dict[int, bool] = {}
    for r in reqs:
        p = r.program if r.program >= 0 else -1 - r.rid
        prog_client[p] = r.client
        if r.rid in sim.arrival:
            prog_start[p] = min(prog_start.get(p, np.inf), sim.arrival[r.rid])
        if r.rid in sim.finish:
            prog_end[p] = max(prog_end.get(p, 0.0), sim.finish[r.rid])
            prog_done.setdefault(p, True)
        else:
            prog_done[p] = False
    prog_lat = [
        prog_end[p] - prog_start[p]
        for p in prog_end
        if prog_done.get(p) and prog_client[p] in good and p in prog_start
    ]
    return prog_lat


def _window_fairness(sim: Simulator) -> dict[str, Any]:
    """Jain's index of the service (and of the actual cost) over the
    intervals that start with every client backlogged, its length, each
    client's service in it (``window_service``, in client order), Jain's
    index on demand and the largest backlogged gap (service, cost)."""
    ts = np.asarray(sim.samples_t)
    serv = np.asarray(sim.samples_service)
    act = np.asarray(sim.samples_actual)
    back = np.asarray(sim.samples_backlog, dtype=bool)
    jain_v = float("nan")
    jain_a = float("nan")
    window = 0.0
    d = np.zeros(len(sim.clients))
    if len(ts) > 1:
        # intervals (t[i-1], t[i]] that start with every client backlogged
        allb = back[:-1].all(axis=1)
        if allb.any():
            d = np.diff(serv, axis=0)[allb].sum(axis=0)
            window = float(np.diff(ts)[allb].sum())
            if window > 0:
                jain_v = jain_index(d / window)
                da = np.diff(act, axis=0)[allb].sum(axis=0)
                jain_a = jain_index(da / window)
    jain_d = jain_on_demand(serv, back) if len(ts) > 1 else float("nan")
    gap = max_backlogged_gap(serv, back) if len(ts) else 0.0
    gap_actual = max_backlogged_gap(act, back) if len(ts) else 0.0
    return {
        "jain_client": jain_v,
        "jain_cost": jain_a,
        "jain_demand": jain_d,
        "jain_window_s": window,
        "window_service": [float(x) for x in d],
        "max_gap_client": gap,
        "max_gap_cost": gap_actual,
    }


def summarize(sim: Simulator) -> dict[str, Any]:
    """All metrics of a finished simulation as a JSON-ready dict."""
    wl = sim.workload
    reqs = wl.requests
    done = [r for r in reqs if r.rid in sim.finish]
    makespan = max(sim.finish.values()) if sim.finish else 0.0
    in_tok = sum(r.input_len for r in done)
    out_tok = sum(r.output_len for r in done)
    svc = in_tok + 2 * out_tok
    good = set(wl.well_behaved) or set(wl.clients)
    e2e = [sim.finish[r.rid] - sim.arrival[r.rid] for r in done if r.client in good]
    ttft = [
        sim.first_token[r.rid] - sim.arrival[r.rid]
        for r in reqs
        if r.client in good and r.rid in sim.first_token
    ]
    prog_lat = _program_latencies(sim, good)
    fair = _window_fairness(sim)
    per_client = {
        c: {
            "service": float(sim.service[i]),
            "actual_service": float(sim.actual[i]),
            "service_in_window": fair["window_service"][i],
            "requests": sum(1 for r in done if r.client == c),
        }
        for i, c in enumerate(sim.clients)
    }
    steps = sim.steps
    per_worker = np.bincount(
        np.fromiter(sim.worker_of.values(), dtype=np.int64, count=len(sim.worker_of)),
        minlength=sim.cfg.workers,
    )
    return {
        "scheduler": sim.cfg.label(),
        "workload": wl.name,
        "workers": sim.cfg.workers,
        "policy": sim.cfg.policy,
        "dispatcher": sim.cfg.dispatcher if sim.cfg.workers > 1 else None,
        "routers": sim.cfg.routers,
        "view_staleness": sim.cfg.view_staleness,
        "router_assign": sim.cfg.router_assign,
        "requests": len(reqs),
        "finished": len(done),
        "complete": len(done) == len(reqs),
        "makespan_s": makespan,
        "service_tok_s": svc / makespan if makespan else 0.0,
        "tokens_per_s": (in_tok + out_tok) / makespan if makespan else 0.0,
        "requests_per_s": len(done) / makespan if makespan else 0.0,
        "cache_hit": sim.cached_tokens / sim.input_tokens if sim.input_tokens else 0.0,
        "jain_client": fair["jain_client"],
        "jain_cost": fair["jain_cost"],
        "jain_demand": fair["jain_demand"],
        "jain_window_s": fair["jain_window_s"],
        "max_gap_client": fair["max_gap_client"],
        "max_gap_cost": fair["max_gap_cost"],
        "e2e_p50_s": percentile(e2e, 50),
        "e2e_p99_s": percentile(e2e, 99),
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "program_p50_s": percentile(prog_lat, 50),
        "program_p99_s": percentile(prog_lat, 99),
        "busiest_worker_share": float(per_worker.max() / per_worker.sum())
        if per_worker.sum()
        else 0.0,
        "max_input_len": max((r.input_len for r in reqs), default=0),
        "max_output_len": max((r.output_len for r in reqs), default=0),
        "kv_capacity": int(sim.cfg.model.kv_capacity),
        "memory": sim.cfg.memory,
        "max_new_tokens": sim.max_new,
        "retractions": sim.retractions,
        "recomputed_tokens": sim.recomputed_tokens,
        "per_client": per_client,
        "misbehaving": list(wl.misbehaving),
        "steps": steps,
        "wall_s": sim.wall_s,
        "steps_per_s": steps / sim.wall_s if sim.wall_s > 0 else 0.0,
    }


def service_over_time(sim: Simulator, bins: int = 60) -> dict[str, Any]:
    """Per-client service rate per time bin, and response times by finish
    time (the data behind the paper's Figures 8 and 9)."""
    ts = np.asarray(sim.samples_t)
    serv = np.asarray(sim.samples_service)
    end = float(ts[-1]) if len(ts) else 0.0
    edges = np.linspace(0.0, max(end, 1e-9), bins + 1)
    idx = np.clip(np.searchsorted(ts, edges, side="right") - 1, 0, len(ts) - 1)
    cum = serv[idx]
    rate = np.diff(cum, axis=0) / np.diff(edges)[:, None]
    resp: dict[str, list[tuple[float, float]]] = {c: [] for c in sim.clients}
    for r in sim.workload.requests:
        if r.rid in sim.finish:
            resp[r.client].append((sim.finish[r.rid], sim.finish[r.rid] - sim.arrival[r.rid]))
    for v in resp.values():
        v.sort()
    return {
        "t": ((edges[:-1] + edges[1:]) / 2).tolist(),
        "service_rate": {c: rate[:, i].tolist() for i, c in enumerate(sim.clients)},
        "response": resp,
    }


#: deprecated name -> the name that replaced it (same object)
_RENAMED = {"jain": "jain_index"}


def deprecated_name(module: str, name: str) -> Any:
    """The object a deprecated name of ``module`` stands for, with a
    ``DeprecationWarning`` at the caller's line; else ``AttributeError``."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is deprecated; use {module}.{new} (the same function)",
        DeprecationWarning,
        stacklevel=3,
    )
    return globals()[new]


def __getattr__(name: str) -> Any:
    return deprecated_name(__name__, name)
