"""``fairq engine-bench --engine ray-vllm``: vLLM replicas on Ray Serve behind a router.

Starts a local Ray cluster (loopback), deploys ``--replicas`` vLLM replicas
with ``ray.serve.llm`` (:func:`fairq.ray.vllm.fairq_vllm_app`:
its OpenAI ingress, :class:`~fairq.ray.vllm.FairqLLMServer`
replicas reporting finishes and KV evictions from vLLM itself), once per
configuration, and replays the engine benches' workload over HTTP with a
real client, in real wall-clock time. Configurations (``--configs``):

- ``pow2``: Ray Serve's default router (power of two choices), stock vLLM;
- ``prefix``: Ray's ``PrefixCacheAffinityRouter``, stock vLLM;
- ``d2lpm-fcfs``: fairq's D2LPM router, stock vLLM (FCFS) inside;
- ``d2lpm-dlpm``: fairq's D2LPM router, fairq's DLPM inside each replica.

``PrefixCacheAffinityRouter`` matches prompt *text*, so its requests carry
the prompt as text (the model's word-level tokenizer maps it back to the
same token ids: the engines do identical work); fairq's router gets token
ids, which is what lines its prefix tree up with vLLM's KV-cache events.

Per configuration: per-tenant service and Jain's index over the window in
which every tenant is backlogged (output tokens as they stream; and DLPM's
cost: computed prompt tokens plus ``w_q`` per output token), the prefix
cache hit rate per replica (vLLM's ``num_cached_tokens`` per request,
counted by each replica), load balance (requests per replica, max/mean),
TTFT and end-to-end p50/p99 of the well-behaved tenants.

The Ray cluster needs Ray Serve and vLLM in one interpreter: the bench runs
in ``$FAIRQ_VLLM_SERVER_PYTHON`` (re-executing itself there when that is
another interpreter).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["CONFIGS", "replica_env", "run", "run_config", "wait_ready"]

#: label -> (router, fairq policy inside each vLLM replica or None for stock vLLM)
CONFIGS: dict[str, tuple[str, str | None]] = {
    "pow2": ("pow2", None),
    "prefix": ("prefix", None),
    "d2lpm-fcfs": ("d2lpm", None),
    "d2lpm-dlpm": ("d2lpm", "dlpm"),
}


def replica_env() -> dict[str, str]:
    """The vLLM replicas' environment: :func:`fairq.enginebench.server.engine_env`
    and one OpenMP thread per engine (several engines share the cores)."""
    from fairq.enginebench.server import engine_env

    return {**engine_env(), "OMP_NUM_THREADS": "1"}


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """vLLM engine arguments from ``--server-args`` (``--max-num-seqs 8``
    style) and ``--max-model-len``."""
    out: dict[str, Any] = {"load_format": "dummy", "max_model_len": args.max_model_len}
    words = args.server_args.split()
    i = 0
    while i < len(words):
        key = words[i].lstrip("-").replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            value: Any = words[i + 1]
            try:
                value = int(value)
            except ValueError:
                pass
            out[key] = value
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def wait_ready(url: str, model_id: str, *, text: bool = False, timeout: float = 600.0) -> None:
    """Send a one-token probe (tenant ``"ready"``) until the application
    answers it; RuntimeError after ``timeout`` seconds. ``text``: the probe's
    prompt as text (for ``PrefixCacheAffinityRouter``)."""
    from fairq.enginebench.traffic import HttpRequest, send_all

    extra = {"prompt": "t3 t4 t5"} if text else {}
    probe = HttpRequest("ready", "ready", [3, 4, 5], 1, extra=extra)
    deadline = time.monotonic() + timeout
    while True:
        (r,) = send_all(url, model_id, [probe], timeout=30)
        if r.ok:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Serve application did not answer: {r.status} {r.error}")
        time.sleep(2.0)


#: ``--kill`` target -> the Serve deployment whose replica is killed
KILL_TARGETS = {"replica": "FairqLLMServer", "ingress": "OpenAiIngress"}


def _replica_actors(deployment: str = "FairqLLMServer") -> list[str]:
    """The live replica actors' names of one deployment of the application."""
    import ray

    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if f"#{deployment}" in a["name"] and a["namespace"] == "serve"
    )


def _running(deployment: str) -> int:
    """How many replicas of ``deployment`` Serve reports RUNNING."""
    from ray import serve

    app = serve.status().applications.get("default")
    dep = app.deployments.get(deployment) if app is not None else None
    if dep is None:
        return 0
    return sum(n for st, n in dep.replica_states.items() if getattr(st, "value", st) == "RUNNING")


class _Killer:
    """Kills one replica of ``target`` (``replica``: a vLLM replica;
    ``ingress``: an OpenAI ingress replica, with its router) ``after_s``
    seconds into the traffic, and notes when Serve's replacement is up: a
    vLLM replacement's counters file appears; an ingress replacement is up
    when a new ingress actor exists and Serve counts as many RUNNING as
    before the kill."""

    def __init__(self, after_s: float, stats_dir: str, target: str = "replica") -> None:
        import threading

        self.after_s = after_s
        self.stats_dir = stats_dir
        self.target = target
        self.killed: str | None = None
        self.kill_at: float | None = None
        self.ready_at: float | None = None
        self.replacement: str | None = None
        self.t0 = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread.start()

    def _replacement(self, before: set[str], n: int) -> str | None:
        """The replacement's name once it is up, else None."""
        if self.target == "replica":
            from fairq.ray.vllm import read_replica_stats

            new = set(read_replica_stats(self.stats_dir)) - before
        else:
            dep = KILL_TARGETS[self.target]
            new = set(_replica_actors(dep)) - before
            if new and _running(dep) < n:
                return None
        return sorted(new)[0] if new else None

    def _run(self) -> None:
        import ray

        from fairq.ray.vllm import read_replica_stats

        time.sleep(self.after_s)
        dep = KILL_TARGETS[self.target]
        names = _replica_actors(dep)
        if not names:
            return
        before = set(read_replica_stats(self.stats_dir)) if self.target == "replica" else set(names)
        self.killed = names[0]
        ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
        self.kill_at = time.monotonic() - self.t0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            self.replacement = self._replacement(before, len(names))
            if self.replacement is not None:
                self.ready_at = time.monotonic() - self.t0
                return
            time.sleep(0.5)

    def join(self) -> None:
        self._thread.join(timeout=700)


def _jain_between(results: list[Any], a: float, b: float) -> float:
    """Jain's index of output tokens streamed in ``[a, b]`` per tenant."""
    from fairq.enginebench.vllm_server import _service_events
    from fairq.sim.metrics import jain_index

    got: dict[str, float] = {r.request.tenant: 0.0 for r in results}
    for r in results:
        for t, n in _service_events(r):
            if a <= t <= b:
                got[r.request.tenant] += n
    return jain_index(list(got.values())) if b > a else float("nan")


def fault_timeline(
    results: list[Any],
    kill_at: float,
    ready_at: float | None,
    bin_s: float = 10.0,
    window_bins: int = 3,
    tolerance: float = 0.05,
) -> dict[str, Any]:
    """Fairness over time around a replica's death.

    ``bins`` of ``bin_s`` seconds: the output tokens and DLPM cost each
    tenant streamed in the bin; ``all_backlogged``: every tenant had a
    request outstanding (sent, not yet answered) from the bin's start to its
    end; ``served``: some output came (no replica serving: none did).

    ``windows``: ``window_bins`` consecutive bins, sliding one bin at a time,
    counted only where every bin is all-backlogged and served; Jain's index
    of the tenants' summed output tokens (``jain_output``) and cost
    (``jain_cost``), and the flood's share of the output.

    ``baseline_jain_output``: Jain's index of the output summed over the
    counted bins wholly before the kill. ``settled_s``: the start of the
    first counted window at or after the replacement came up from which every
    later counted window's output Jain is at least ``baseline - tolerance``
    (None: never, or nothing to compare); ``settle_after_ready_s`` counts
    from the replacement's start.
    """
    from fairq.enginebench.vllm_server import FLOOD, _cost_events, _service_events
    from fairq.sim.metrics import jain_index

    tenants = sorted({r.request.tenant for r in results})
    end = max(r.end for r in results)
    nbins = max(1, int(end // bin_s) + 1)
    out = [dict.fromkeys(tenants, 0.0) for _ in range(nbins)]
    cost = [dict.fromkeys(tenants, 0.0) for _ in range(nbins)]
    for r in results:
        for t, n in _service_events(r):
            out[min(int(t // bin_s), nbins - 1)][r.request.tenant] += n
        for t, c in _cost_events(r) or []:
            cost[min(int(t // bin_s), nbins - 1)][r.request.tenant] += c
    spans: dict[str, list[tuple[float, float]]] = {t: [] for t in tenants}
    for r in results:
        spans[r.request.tenant].append((r.sent, r.end))
    bins: list[dict[str, Any]] = []
    for i in range(nbins):
        a, b = i * bin_s, (i + 1) * bin_s
        bins.append(
            {
                "start_s": a,
                "all_backlogged": all(any(s <= a and e >= b for s, e in spans[t]) for t in tenants),
                "served": sum(out[i].values()) > 0,
                "output": out[i],
                "cost": cost[i],
            }
        )
    counted = [x["all_backlogged"] and x["served"] for x in bins]

    def summed(key: str, idx: Iterable[int]) -> dict[str, float]:
        return {t: sum(bins[i][key][t] for i in idx) for t in tenants}

    def share(got: dict[str, float]) -> float | None:
        total = sum(got.values())
        return got.get(FLOOD, 0.0) / total if total else None

    windows: list[dict[str, Any]] = []
    for i in range(nbins - window_bins + 1):
        idx = range(i, i + window_bins)
        if not all(counted[j] for j in idx):
            continue
        o = summed("output", idx)
        windows.append(
            {
                "start_s": i * bin_s,
                "jain_output": jain_index(list(o.values())),
                "jain_cost": jain_index(list(summed("cost", idx).values())),
                "flood_share": share(o),
            }
        )
    pre = [i for i in range(nbins) if counted[i] and (i + 1) * bin_s <= kill_at]
    baseline = jain_index(list(summed("output", pre).values())) if pre else None
    settled = None
    if baseline is not None and ready_at is not None:
        after = [w for w in windows if w["start_s"] >= ready_at]
        for j, w in enumerate(after):
            if all(v["jain_output"] >= baseline - tolerance for v in after[j:]):
                settled = w["start_s"]
                break
    return {
        "bin_s": bin_s,
        "window_bins": window_bins,
        "tolerance": tolerance,
        "baseline_jain_output": baseline,
        "pre_kill_bins": len(pre),
        "settled_s": settled,
        "settle_after_ready_s": settled - ready_at if settled is not None and ready_at else None,
        "bins": bins,
        "windows": windows,
    }


def _clear_router_stats() -> str | None:
    """The folder the D2LPM routers write their stats to (inherited from this
    process's environment, see :func:`run`), emptied; None when unset."""
    from fairq.ray.router import ROUTER_STATS_DIR_ENV

    folder = os.environ.get(ROUTER_STATS_DIR_ENV)
    if not folder or not os.path.isdir(folder):
        return None
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    return folder


def read_router_stats(folder: str) -> list[dict[str, Any]]:
    """Every router's last stats file in ``folder`` (``FairqD2LPMRouter.stats``)."""
    out = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("router-") and name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                continue
    return out


def _replica_deltas(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Each replica's counters over the run (``after`` less ``before``) and
    its prefix-cache hit rate."""
    replicas = {}
    for tag, doc in after.items():
        b = before.get(tag, {})
        d = {
            k: doc[k] - b.get(k, 0)
            for k in ("requests", "prompt_tokens", "cached_tokens", "output_tokens", "evictions")
        }
        d["hit_rate"] = d["cached_tokens"] / d["prompt_tokens"] if d["prompt_tokens"] else 0.0
        replicas[tag] = d
    return replicas


def _error_counts(results: list[Any]) -> dict[str, int]:
    """``"<status>: <error, first 100 characters>"`` -> how many failed so."""
    out: dict[str, int] = {}
    for r in results:
        if not r.ok:
            key = f"{r.status}: {(r.error or 'cancelled')[:100]}"
            out[key] = out.get(key, 0) + 1
    return out


def _failed_by_tenant(results: list[Any]) -> dict[str, list[int]]:
    """``tenant -> [failed, sent]``."""
    out: dict[str, list[int]] = {}
    for r in results:
        c = out.setdefault(r.request.tenant, [0, 0])
        c[0] += not r.ok
        c[1] += 1
    return out


def _fault_row(
    killer: _Killer,
    results: list[Any],
    replicas: dict[str, dict[str, Any]],
    failed: int,
    bin_s: float,
) -> dict[str, Any]:
    """The ``fault`` part of a row run with ``--kill-after-s``."""
    end = max(r.end for r in results)
    return {
        "target": killer.target,
        "killed": killer.killed,
        "kill_at_s": killer.kill_at,
        "replacement_ready_s": killer.ready_at,
        "failed": failed,
        # answered 200 with no error, but fewer tokens than asked
        "short": sum(r.ok and not r.complete for r in results),
        "answered": sum(r.ok for r in results),
        "requests": len(results),
        # the failed requests' errors: status and the error's first words
        "errors": _error_counts(results),
        "failed_by_tenant": _failed_by_tenant(results),
        # requests the replacement served (it took traffic again)
        "replacement_requests": (
            replicas.get(killer.replacement, {}).get("requests") if killer.replacement else None
        ),
        "jain_before_kill": _jain_between(results, 0.0, killer.kill_at or 0.0),
        "jain_after_replacement": (
            _jain_between(results, killer.ready_at, end) if killer.ready_at else None
        ),
        "timeline": (
            fault_timeline(results, killer.kill_at, killer.ready_at, bin_s)
            if killer.kill_at is not None
            else None
        ),
    }


def run_config(
    label: str,
    model: str,
    workload: list[Any],
    args: argparse.Namespace,
    port: int,
) -> dict[str, Any]:
    """Deploy configuration ``label``, replay ``workload``, summarize."""
    from ray import serve

    from fairq.enginebench.ray import router_config
    from fairq.enginebench.traffic import Metrics, send_all
    from fairq.enginebench.vllm_server import http_requests, summarize
    from fairq.ray.vllm import STATS_DIR_ENV, fairq_vllm_app, read_replica_stats

    router, policy = CONFIGS[label]
    routers_dir = _clear_router_stats()
    stats_dir = tempfile.mkdtemp(prefix="fairq-ray-stats-")
    state_dir = tempfile.mkdtemp(prefix="fairq-ray-state-") if args.kill_after_s else None
    options: dict[str, Any] = {}
    if router == "d2lpm":
        options = {
            "worker_quantum": args.worker_quantum,
            "shared_view": not args.no_shared_view,
            "placement_slack": args.placement_slack,
            "view_hub": args.view_hub,
        }
    app = fairq_vllm_app(
        model,
        model_id="m",
        num_replicas=args.replicas,
        policy=policy,
        fairq_options=(
            {"quantum": args.quantum, "state_interval_s": 1.0} if policy == "dlpm" else None
        ),
        state_dir=state_dir,
        ingress_replicas=args.ingress,
        ingress_affinity=args.ingress_affinity,
        deployment_options=(
            {"health_check_timeout_s": args.health_check_timeout_s}
            if args.health_check_timeout_s
            else None
        ),
        router_config=router_config(router, stats_period_s=args.routing_stats_period_s, **options),
        engine_kwargs=engine_kwargs(args),
        env={**replica_env(), STATS_DIR_ENV: stats_dir},
    )
    t0 = time.monotonic()
    serve.run(app, blocking=False)
    url = f"http://127.0.0.1:{port}"
    # PrefixCacheAffinityRouter divides by the prompt text's length: a
    # token-id prompt (no text) raises ZeroDivisionError in Ray 2.60 and the
    # request hangs; it gets text.
    text = router == "prefix"
    wait_ready(url, "m", text=text)
    started = time.monotonic() - t0
    before = read_replica_stats(stats_dir)
    reqs = http_requests(workload, args.rate_scale, text=text)
    if args.ingress_affinity:
        reqs = [dataclasses.replace(r, session_id=r.tenant) for r in reqs]
    killer = _Killer(args.kill_after_s, stats_dir, args.kill) if args.kill_after_s else None
    if killer is not None:
        killer.start(time.monotonic())
    results = send_all(url, "m", reqs)
    if killer is not None:
        killer.join()
    time.sleep(2.0)  # the replicas write their counters every routing-stats period
    after = read_replica_stats(stats_dir)
    routers = read_router_stats(routers_dir) if routers_dir else []
    serve.delete("default")
    shutil.rmtree(stats_dir, ignore_errors=True)
    if state_dir:
        shutil.rmtree(state_dir, ignore_errors=True)
    replicas = _replica_deltas(before, after)
    queries = sum(r["prompt_tokens"] for r in replicas.values())
    hits = sum(r["cached_tokens"] for r in replicas.values())
    metrics_before: Metrics = {}
    metrics_after: Metrics = {
        "vllm:prefix_cache_queries_total": {(): float(queries)},
        "vllm:prefix_cache_hits_total": {(): float(hits)},
    }
    row = summarize(results, metrics_before, metrics_after)
    loads = [r["requests"] for r in replicas.values()]
    row.update(
        {
            "policy": label,
            "router": router,
            "inside": policy or "vllm",
            "replicas": replicas,
            "load_max_over_mean": max(loads) / (sum(loads) / len(loads)) if sum(loads) else None,
            "startup_s": started,
            "routers": routers,
        }
    )
    if killer is not None:
        row["fault"] = _fault_row(killer, results, replicas, row["failed"], args.fault_bin_s)
    for r in ("fairq_steps", "fairq_ms_per_step", "fairq_share_of_step", "fairq_share_of_schedule"):
        row.pop(r, None)
    return row


def plot_fault(row: dict[str, Any], path: str) -> None:
    """The fault run's timeline: Jain's index (output, cost) and the flood's
    share of the output over sliding windows, the kill and the replacement's
    start marked, and the bins in which no replica served shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fault = row["fault"]
    tl = fault["timeline"]
    width = tl["bin_s"] * tl["window_bins"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for key, name, style in (
        ("jain_output", "Jain, output tokens", "o-"),
        ("jain_cost", "Jain, DLPM cost", "s--"),
        ("flood_share", "flood's share of the output", "^:"),
    ):
        pts = [(w["start_s"] + width / 2, w[key]) for w in tl["windows"] if w[key] is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name, markersize=3)
    for b in tl["bins"]:
        if not b["served"]:
            ax.axvspan(b["start_s"], b["start_s"] + tl["bin_s"], color="grey", alpha=0.25, lw=0)
    ax.axvline(fault["kill_at_s"], color="red", lw=1)
    what = "an ingress router" if fault.get("target") == "ingress" else "a replica"
    ax.text(fault["kill_at_s"], 1.03, f" {what.split()[-1]} killed", color="red", fontsize=8)
    if fault["replacement_ready_s"] is not None:
        ax.axvline(fault["replacement_ready_s"], color="green", lw=1)
        ax.text(fault["replacement_ready_s"], 1.03, " replacement up", color="green", fontsize=8)
    if tl["baseline_jain_output"] is not None:
        ax.axhline(tl["baseline_jain_output"], color="grey", lw=0.8, ls="--")
    n = len(tl["bins"][0]["output"]) if tl["bins"] else 0
    if n:
        ax.axhline(1 / n, color="green", lw=0.6, ls=":")
        ax.text(
            ax.get_xlim()[1],
            1 / n,
            f" equal share 1/{n}",
            color="green",
            fontsize=7,
            va="center",
            ha="right",
        )
    ax.set_ylim(0, 1.12)
    ax.set_xlabel(
        f"seconds into the traffic (points: {width:g} s windows in which every tenant was "
        "backlogged; grey: no replica serving)"
    )
    ax.set_title(
        f"{panel_label(row)}: {what} killed mid-run (dashed grey: output Jain before the kill)",
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: how a configuration reads in plots
LABELS = {
    "pow2": "Ray default router, stock vLLM",
    "prefix": "PrefixCacheAffinityRouter, stock vLLM",
    "d2lpm-fcfs": "D2LPM, stock vLLM",
    "d2lpm-dlpm": "D2LPM, DLPM inside",
}


def panel_label(row: dict[str, Any]) -> str:
    """A configuration's name in plots."""
    return LABELS.get(row["policy"], row["policy"])


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table."""

    def f(x: Any, nd: int = 2) -> str:
        return "-" if x is None or x != x else f"{x:.{nd}f}"

    lines = [
        "| config | router | inside | output tok/s | hit rate (per replica) | requests per replica "
        "| Jain (output) | Jain (cost) | well-behaved TTFT p50/p99 s | e2e p50/p99 s | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reps = list(r["replicas"].values())
        w = r["well_behaved"]
        lines.append(
            f"| {r['policy']} | {r['router']} | {r['inside']} | {f(r['output_tok_s'], 1)} "
            f"| {f(r['prefix_hit_rate'])} ({', '.join(f(x['hit_rate']) for x in reps)}) "
            f"| {', '.join(str(x['requests']) for x in reps)} "
            f"(max/mean {f(r['load_max_over_mean'])}) "
            f"| {f(r['jain_window'], 3)} | {f(r['jain_cost_window'], 3)} "
            f"| {f(w['ttft_p50_s'])}/{f(w['ttft_p99_s'])} "
            f"| {f(w['latency_p50_s'])}/{f(w['latency_p99_s'])} "
            f"| {r['failed']} |"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine ray-vllm``'s own arguments."""
    from fairq.cliargs import count, positive

    g = parser.add_argument_group("--engine ray-vllm")
    g.add_argument("--replicas", type=count(1), default=2, help="vLLM replicas behind the router")
    g.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated, from {', '.join(CONFIGS)}",
    )
    g.add_argument(
        "--worker-quantum", type=positive, default=4096.0, help="D2LPM's Q_w (router credit)"
    )
    g.add_argument(
        "--placement-slack",
        type=count(0),
        default=0,
        metavar="N",
        help="D2LPM routers' agreed placement (fairq.ray.RouterOptions.placement_slack): a "
        "new document goes to the replica its hash ranks first among those loaded at most N "
        "requests above the least (default 0: the least loaded)",
    )
    g.add_argument(
        "--view-hub",
        action="store_true",
        help="D2LPM routers also share their dispatches through one named actor "
        "(fairq.ray.RouterOptions.view_hub): posted when made, pulled as they come",
    )
    g.add_argument(
        "--no-shared-view",
        action="store_true",
        help="D2LPM routers without the shared view (fairq.ray.view): each counts its own "
        "dispatches only, as before the view",
    )
    g.add_argument(
        "--ingress",
        type=count(1),
        default=1,
        help="OpenAI ingress replicas, each with its own router (and D2LPM state)",
    )
    g.add_argument(
        "--routing-stats-period-s",
        type=positive,
        default=0.5,
        help="Serve's request_routing_stats_period_s for the vLLM replicas: how often their "
        "finishes, evictions and the D2LPM routers' shared view are collected (the view is "
        "about this old when a router uses it)",
    )
    g.add_argument(
        "--ingress-affinity",
        action="store_true",
        help="each tenant through one ingress router: Ray's ConsistentHashRouter on the "
        "ingress deployment, the client sending its tenant as the x-session-id header",
    )
    g.add_argument(
        "--kill-after-s",
        type=positive,
        default=None,
        help="kill one replica (--kill: a vLLM replica or an ingress router) this many "
        "seconds into the traffic (Serve replaces it; with DLPM inside, a vLLM replica's "
        "replacement loads the dead replica's fairness state)",
    )
    g.add_argument(
        "--kill",
        choices=sorted(KILL_TARGETS),
        default="replica",
        help="with --kill-after-s: what is killed: 'replica', a vLLM replica (its in-flight "
        "requests fail), or 'ingress', an OpenAI ingress replica with its D2LPM router (use "
        "--ingress 2 or more; the requests it was proxying fail, the other routers take "
        "the traffic until Serve replaces it)",
    )
    g.add_argument(
        "--health-check-timeout-s",
        type=positive,
        default=None,
        help="Serve's health-check timeout for the vLLM replicas (default: Serve's, 10 s)",
    )
    g.add_argument(
        "--fault-bin-s",
        type=positive,
        default=10.0,
        help="with --kill-after-s: the bins of the fairness timeline around the kill (seconds)",
    )


def check_args(args: argparse.Namespace) -> list[str]:
    """The configurations ``--configs`` names (UsageError naming the flag)."""
    from fairq.cliargs import UsageError

    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for n in names:
        if n not in CONFIGS:
            raise UsageError(f"{n!r} is not one of {', '.join(CONFIGS)}", arg="--configs")
    if not names:
        raise UsageError("names no configuration", arg="--configs")
    if args.kill_after_s and args.kill == "ingress" and args.ingress < 2:
        raise UsageError(
            "'ingress' kills a router: run at least two (--ingress 2) so one is left", arg="--kill"
        )
    return names


def _runs_here() -> bool:
    try:
        import ray.serve.llm  # noqa: F401
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    """Entry point (from ``fairq engine-bench --engine ray-vllm``): ``--configs``,
    then the workload (:func:`fairq.enginebench.args.workload`), are checked
    before any work."""
    from fairq.cliargs import UsageError
    from fairq.enginebench.args import workload as args_workload
    from fairq.enginebench.server import SERVER_PYTHON_ENV, server_python, write_model

    names = check_args(args)
    workload = args_workload(args)
    if not _runs_here():
        py = server_python()
        if os.path.abspath(py) == os.path.abspath(sys.executable):
            raise UsageError(
                "needs Ray Serve and vLLM in one interpreter: set "
                f"{SERVER_PYTHON_ENV}=/path/to/python of a virtualenv with vLLM's CPU build, "
                "fairq and ray[serve] (see .ci/run)",
                arg="--engine",
            )
        env = {**os.environ, SERVER_PYTHON_ENV: py}
        return subprocess.call([py, "-m", "fairq", *sys.argv[1:]], env=env)
    from fairq.enginebench.ray import local_cluster
    from fairq.ray.router import ROUTER_STATS_DIR_ENV

    model_dir = tempfile.mkdtemp(prefix="fairq-ray-vllm-model-")
    # the routers (in the ingress replicas) inherit it from this process
    os.environ[ROUTER_STATS_DIR_ENV] = tempfile.mkdtemp(prefix="fairq-ray-routers-")
    model = write_model(model_dir, args.model)
    rows = []
    print(
        f"# fairq engine-bench --engine ray-vllm: {args.replicas} replicas, model {args.model}, "
        f"{len(workload)} requests",
        file=sys.stderr,
    )
    try:
        with local_cluster(num_cpus=max(8, 2 * args.replicas + 2)) as port:
            for name in names:
                row = run_config(name, model, workload, args, port)
                rows.append(row)
                print(
                    f"{name}: {row['output_tok_s']:.1f} tok/s, hit {row['prefix_hit_rate']:.3f}, "
                    f"Jain {row['jain_window']:.3f}, failed {row['failed']}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.rmtree(os.environ.pop(ROUTER_STATS_DIR_ENV), ignore_errors=True)
    print(table(rows))
    if args.json:
        import vllm

        doc = {
            "engine": "ray-vllm",
            "vllm": vllm.__version__,
            "ray": __import__("ray").__version__,
            "command": "fairq " + " ".join(sys.argv[1:]),
            "replicas": args.replicas,
            "model": args.model,
            "results": rows,
        }
        text = json.dumps(doc, indent=1, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.plot and args.kill_after_s:
        plot_fault(rows[0], args.plot)
    elif args.plot:
        from fairq.enginebench.vllm_server import plot

        plot(
            rows,
            args.plot,
            tuple(names),
            label=panel_label,
            title=f"per-tenant service: {args.replicas} vLLM replicas on Ray Serve "
            "(CPU, random-weight model)",
        )
    return 0
