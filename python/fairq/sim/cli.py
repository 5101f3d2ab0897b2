"""``fairq simulate``: the DLPM paper's comparison in the simulator.

Without arguments it runs the embedded default (:data:`DEFAULT_SUITE`: long
-context QA with an S1 client, Tree-of-Thoughts with an S2 client,
LLM-as-a-judge with an S1 client; 1 worker x FCFS/LPM/VTC/DLPM and 4 workers x
RR+LPM/ClientRR+VTC/PrefixAffinity+LPM/D2LPM+DLPM) and prints the table.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from fairq.cli import write_json
from fairq.sim.runner import (
    DEFAULT_PRESET,
    DEFAULT_SUITE,
    EXTRA,
    base_config,
    execute,
    find_spec,
    load_trace_runs,
    plan_runs,
    plan_sweep,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    keys = [s.key for s in DEFAULT_SUITE] + list(EXTRA)
    suite = ", ".join(s.key for s in DEFAULT_SUITE)
    p.add_argument(
        "--workload",
        action="append",
        metavar="NAME",
        help=f"workload to run (repeatable; default: the suite {suite};"
        f" known: {', '.join(keys)}, or qa/tot/judge/chat)",
    )
    p.add_argument(
        "--policy",
        action="append",
        choices=["fcfs", "lpm", "vtc", "dlpm"],
        help="local policy to include (repeatable; default: all)",
    )
    p.add_argument(
        "--dispatch",
        action="append",
        choices=["rr", "client-rr", "affinity", "d2lpm"],
        help="dispatcher to include with several workers (repeatable; default: all)",
    )
    p.add_argument(
        "--workers",
        action="append",
        type=int,
        help="number of workers (repeatable; default: 1 and 4)",
    )
    p.add_argument("--trace", metavar="FILE", help="replay a JSONL trace instead of the suite")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        choices=["a10g-3b", "a100-8b"],
        help=f"hardware model preset (default {DEFAULT_PRESET})",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="KEY=VALUE",
        help="override a step-model constant (c0, c_prefill, c_decode, c_kv, kv_capacity, "
        "prefill_budget, max_running)",
    )
    p.add_argument("--quantum", type=float, default=2000.0, help="DLPM's Q_u (default 2000)")
    p.add_argument(
        "--worker-quantum", type=float, default=20000.0, help="D2LPM's Q_w (default 20000)"
    )
    p.add_argument("--scale", type=float, help="override the workloads' length scale")
    p.add_argument("--duration", type=float, help="override the arrival window (seconds)")
    p.add_argument(
        "--sweep",
        choices=["quantum"],
        help="run the Q_u (1 worker) and Q_w (4 workers) sweeps instead (Figures 1 and 10)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        help="write all results as JSON ('-': the document alone on stdout, tables on stderr)",
    )
    p.add_argument("--plot", metavar="FILE.png", help="draw service and response time over time")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics of the running simulation's schedulers and "
        "dispatcher on 127.0.0.1:PORT (needs fairq[metrics])",
    )
    p.add_argument(
        "--metrics-hold",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep serving metrics this long after the last simulation (default 0)",
    )


def _f(v: float, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, fmt)


def table(results: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table."""
    head = (
        "| workload | W | policy | service tok/s | x VTC | cache hit | Jain (client) | Jain (cost) "
        "| max gap (cost) | well-behaved p50 / p99 e2e s | p99 TTFT s | p99 program s |"
    )
    out = [head, "|" + "---|" * 3 + "---:|" * 9]
    vtc: dict[tuple[str, int], float] = {}
    for r in results:
        if r["policy"] == "vtc":
            vtc[(r["workload"], r["workers"])] = r["throughput"]
    for r in results:
        ref = vtc.get((r["workload"], r["workers"]))
        ratio = r["throughput"] / ref if ref else float("nan")
        label = r["label"] + ("" if r.get("complete", True) else " (unfinished)")
        if "tag" in r:
            q = r.get("user_quantum") if r["tag"] == "Q_u" else r.get("worker_quantum")
            if q is not None and r["policy"] == "dlpm":
                label += f" Q={q:g}"
        out.append(
            f"| {r['workload']} | {r['workers']} | {label} | {r['throughput']:,.0f} | "
            f"{_f(ratio, '.2f')} | {r['cache_hit']:.2f} | {_f(r['jain'], '.3f')} | "
            f"{_f(r['jain_actual'], '.3f')} | {r['max_gap_actual']:,.0f} | "
            f"{_f(r['e2e_p50_s'], '.1f')} / {_f(r['e2e_p99_s'], '.1f')} | "
            f"{_f(r['ttft_p99_s'], '.1f')} | {_f(r['program_p99_s'], '.1f')} |"
        )
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    try:
        base = base_config(args.preset, args.model, args.quantum, args.worker_quantum)
        overrides: dict[str, Any] = {}
        if args.scale is not None:
            overrides["scale"] = args.scale
        if args.duration is not None:
            overrides["duration"] = args.duration
        workers = args.workers or [1, 4]
        if any(w < 1 for w in workers):
            raise ValueError(f"--workers must be >= 1, got {workers}")
        specs = [find_spec(n) for n in args.workload] if args.workload else list(DEFAULT_SUITE)
        if args.sweep:
            sweep_workers = max(workers) if max(workers) > 1 else 4
            runs = [r for s in specs[:1] for r in plan_sweep(s, base, sweep_workers)]
        elif args.trace:
            runs = load_trace_runs(args.trace, workers, base, args.seed)
        else:
            runs = plan_runs(specs, workers, base, policies=args.policy, dispatchers=args.dispatch)
    except (ValueError, OSError) as e:
        print(f"fairq simulate: {e}", file=sys.stderr)
        return 2
    if not runs:
        print("fairq simulate: nothing to run (check --policy / --dispatch)", file=sys.stderr)
        return 2
    observe = None
    if args.metrics_port is not None:
        try:
            observe = serve_metrics(args.metrics_port)
        except (ImportError, OSError, ValueError) as e:
            print(f"fairq simulate: --metrics-port: {e}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    results = execute(
        runs,
        seed=args.seed,
        overrides=overrides,
        timelines=bool(args.plot),
        progress=not args.no_progress,
        desc="sweep" if args.sweep else "simulate",
        observe=observe,
    )
    wall = time.perf_counter() - t0
    steps = sum(r["steps"] for r in results)
    sim_wall = sum(r["wall_s"] for r in results)
    print(table(results))
    print(
        f"\n{len(results)} simulations in {wall:.1f} s wall; {steps:,} simulated steps "
        f"({steps / sim_wall if sim_wall else 0:,.0f} steps/s); model preset {args.preset}, "
        f"Q_u={args.quantum:g}, Q_w={args.worker_quantum:g}, seed {args.seed}"
    )
    if args.plot:
        from fairq.sim.plot import plot_results

        plot_results(results, args.plot, sweep=bool(args.sweep))
        print(f"plot written to {args.plot}")
    if args.json:
        payload = {
            "command": "fairq simulate " + " ".join(sys.argv[2:]),
            "preset": args.preset,
            "model": base.model.as_dict(),
            "seed": args.seed,
            "wall_s": wall,
            # per-client service over time (binned); response points stay in the plot
            "results": [_without_response(r) for r in results],
        }
        write_json(args, _clean(payload))
    if observe is not None and args.metrics_hold > 0:
        time.sleep(args.metrics_hold)
    return 0


def serve_metrics(port: int, addr: str = "127.0.0.1") -> Callable[[Any], None]:
    """Serve Prometheus metrics on ``addr:port`` (a daemon thread) and return
    the ``observe`` hook for :func:`fairq.sim.runner.execute`: each simulator
    gets its workers' schedulers (``name="w<i>"``) and its dispatcher
    (``name="dispatcher"``) exported while it runs, replacing the previous
    simulation's."""
    import prometheus_client

    from fairq.metrics import FairqCollector

    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.start_http_server(port, addr=addr, registry=registry)
    current: list[FairqCollector] = []

    def observe(sim: Any) -> None:
        for c in current:
            registry.unregister(c)
        current.clear()
        objs = [(f"w{w.idx}", w.sched) for w in sim.workers]
        if sim.dispatcher is not None:
            objs.append(("dispatcher", sim.dispatcher))
        for name, obj in objs:
            c = FairqCollector(obj, name)
            registry.register(c)
            current.append(c)

    return observe


def _without_response(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    if "timeline" in out:
        out["timeline"] = {k: v for k, v in out["timeline"].items() if k != "response"}
    return out


def _clean(o: Any) -> Any:
    """Strict JSON: NaN becomes null, infinities become strings."""
    if isinstance(o, float):
        if math.isnan(o):
            return None
        if math.isinf(o):
            return "inf" if o > 0 else "-inf"
        return o
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o
