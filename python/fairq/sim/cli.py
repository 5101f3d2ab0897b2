"""``fairq simulate``: the DLPM paper's comparison in the simulator.

Without arguments it runs the embedded default (:data:`DEFAULT_SUITE`: long
-context QA with an S1 client, Tree-of-Thoughts with an S2 client,
LLM-as-a-judge with an S1 client; 1 worker x FCFS/LPM/VTC/DLPM and 4 workers x
RR+LPM/ClientRR+VTC/SGLangRouter+LPM/D2LPM+DLPM) and prints the table;
``--paper`` checks the paper's claims instead (:mod:`fairq.sim.paper`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from fairq.cli import write_json
from fairq.cliargs import (
    UsageError,
    count,
    need,
    non_negative,
    number,
    output_file,
    plot_file,
    positive,
    quantum,
    read_trace,
)
from fairq.sim.config import LOCAL_POLICIES, MEMORY_MODELS
from fairq.sim.model import PRESETS, StepModel
from fairq.sim.routers import ASSIGN, routers_table
from fairq.sim.runner import (
    DEFAULT_PRESET,
    DEFAULT_SUITE,
    EXTRA,
    Run,
    base_config,
    execute,
    find_spec,
    plan_runs,
    plan_sweep,
    with_routers,
)
from fairq.sim.story import story

#: The table's columns: (header, JSON key(s) of each result, meaning). A
#: header reads as its key: lower case, ``_`` for spaces and brackets,
#: ``tok_s`` for tok/s. ``--help`` and docs/RESULTS.md explain them from here.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    (
        "workload",
        "workload",
        "qa / tot / judge / chat (trace:FILE for --trace); -S1: the paper's misbehaving "
        "client sends more work (requests, branches, dimensions), -S2: longer prompts",
    ),
    ("workers", "workers", "simulated engine workers (GPUs)"),
    ("scheduler", "scheduler", "the local policy on 1 worker; dispatcher+local policy on several"),
    (
        "service tok/s",
        "service_tok_s",
        "the paper's service rate: input + 2 x output tokens of "
        "finished requests per second of makespan",
    ),
    (
        "x VTC",
        "x_vtc",
        "service tok/s over VTC's (ClientRR+VTC's) on the same workload and workers",
    ),
    ("cache hit", "cache_hit", "cached prompt tokens / prompt tokens at admission"),
    (
        "Jain (client)",
        "jain_client",
        "Jain's index (1 = equal shares) of the clients' service "
        "(input + 2 x output) over the time every client has a request waiting",
    ),
    (
        "Jain (cost)",
        "jain_cost",
        "the same in the system's cost w_e x extend + w_q x output "
        "(extend: uncached prompt tokens), what DLPM and its bound account",
    ),
    (
        "max gap (cost)",
        "max_gap_cost",
        "the largest cost difference between two backlogged "
        "clients over any window (max_gap_client: the same in client service)",
    ),
    (
        "e2e p50 / p99 s",
        "e2e_p50_s, e2e_p99_s",
        "end-to-end latency of the well-behaved clients' requests (all clients in chat)",
    ),
    ("TTFT p99 s", "ttft_p99_s", "time to first token, well-behaved clients"),
    (
        "program p99 s",
        "program_p99_s",
        "latency of whole programs (a ToT tree, a judge run, a "
        "conversation; a QA request is its own), well-behaved clients",
    ),
)


def columns_help(width: int = 79) -> str:
    """The ``--help`` epilog: what each column of the table means."""
    import textwrap

    lines = ["table columns [the JSON key of each result]:"]
    for head, key, meaning in COLUMNS:
        lines += textwrap.wrap(
            f"{head} [{key}]: {meaning}",
            width,
            initial_indent="  ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
    lines += textwrap.wrap(
        "--json also holds, per result: per_client service, misbehaving clients, "
        "makespan_s, tokens_per_s, ttft_p50_s, program_p50_s, max_gap_client, steps and a "
        "binned per-client service timeline.",
        width,
        break_on_hyphens=False,
    )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = columns_help()
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
        choices=list(LOCAL_POLICIES),
        help="local policy to include (repeatable; default: fcfs, lpm, vtc, dlpm; "
        "lpm-sglang: LPM as SGLang 0.5 runs it; preble-local: Preble's multi-level "
        "priority wait queue)",
    )
    p.add_argument(
        "--dispatch",
        action="append",
        choices=["rr", "client-rr", "affinity", "preble", "d2lpm"],
        help="dispatcher to include with several workers (repeatable; default: the "
        "suite's pairs; affinity: the SGLang router's cache-aware rule, preble: Preble "
        "as the paper describes it)",
    )
    p.add_argument(
        "--workers",
        action="append",
        type=count(1),
        help="number of workers (repeatable; default: 1 and 4)",
    )
    p.add_argument(
        "--routers",
        action="append",
        type=count(1),
        metavar="N",
        help="routers in front of the workers, each with its own dispatcher and a shared "
        "view of the others (fairq.sim.routers; repeatable; default 1)",
    )
    p.add_argument(
        "--view-staleness",
        action="append",
        type=number(0, inf=True),
        metavar="SECONDS",
        help="age of the shared view each router sees of the other routers' dispatches and "
        "finishes and the workers' evictions (repeatable; default 0; inf: no shared view, "
        "each router on its own dispatches as before)",
    )
    p.add_argument(
        "--router-assign",
        action="append",
        choices=list(ASSIGN),
        help="how requests are assigned to routers (repeatable; default rr): rr: in turn, "
        "random: uniformly, tenant: every request of a client through one router",
    )
    p.add_argument(
        "--placement-slack",
        type=count(0),
        default=0,
        metavar="N",
        help="D2LPM's agreed placement: a new prefix goes to the worker its rendezvous hash "
        "ranks first among those loaded at most N requests above the least, so routers with "
        "stale views agree (default 0: the least loaded, the paper's rule)",
    )
    p.add_argument(
        "--match-threshold",
        type=number(0, high=1),
        default=0.0,
        metavar="F",
        help="D2LPM's match threshold: a held prefix covering less than this fraction of the "
        "prompt (a shared system prompt) does not pull the request to its holders (default 0: "
        "every match counts, the paper's rule)",
    )
    p.add_argument(
        "--spread-by-credit",
        action="store_true",
        help="D2LPM places a request its held prefix does not place where its client has the "
        "most credit left (default: the least loaded, the paper's rule)",
    )
    p.add_argument(
        "--hub-placement",
        action="store_true",
        help="several D2LPM routers agree where each new document goes (one table, as the "
        "Ray routers' hub: where it went before, else the router's choice unless that worker "
        "holds more than --hub-placement-slack documents above the fewest)",
    )
    p.add_argument(
        "--hub-placement-slack",
        type=count(0),
        default=0,
        metavar="N",
        help="with --hub-placement: documents a worker may hold above the fewest and still "
        "take a new one its router chose (default 0: spread evenly)",
    )
    p.add_argument("--trace", metavar="FILE", help="replay a JSONL trace instead of the suite")
    p.add_argument("--seed", type=count(0), default=0, help="workload seed, >= 0 (default 0)")
    p.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        choices=list(PRESETS),
        help=f"hardware model preset (default {DEFAULT_PRESET})",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="KEY=VALUE",
        help="override a step-model constant (repeatable; "
        f"{', '.join(f.name for f in fields(StepModel))})",
    )
    p.add_argument(
        "--quantum",
        type=quantum,
        default=2000.0,
        help="DLPM's Q_u: > 0 (fixed; default 2000) or auto (derived from the request charges; "
        "with --paper: every DLPM run's, in place of the paper's per-workload Q_u)",
    )
    p.add_argument(
        "--worker-quantum",
        type=number(0, strict=True, inf=True),
        default=20000.0,
        help="D2LPM's Q_w, > 0 or inf (default 20000)",
    )
    p.add_argument(
        "--memory",
        choices=list(MEMORY_MODELS),
        default="estimate",
        help="KV memory model (default estimate): 'estimate': output lengths unknown to the "
        "engine, which reserves SGLang's new-token-ratio estimate of each output, allocates "
        "one KV token per decode step and retracts running requests (recomputed on "
        "readmission) when the pool runs out; 'oracle': each request's whole output is "
        "reserved at admission (output lengths known in advance; the pool may overcommit), "
        "the model of results before it; also with --paper",
    )
    p.add_argument("--scale", type=positive, help="override the workloads' length scale (> 0)")
    p.add_argument("--duration", type=positive, help="override the arrival window (seconds, > 0)")
    p.add_argument(
        "--paper",
        action="store_true",
        help="check the DLPM paper's claims instead (fairq.sim.paper: faithful baselines, "
        "full-length workloads, roofline presets; --workers picks Figure 7's worker counts, "
        "default 1 2 4 8): prints the claims table and every run (docs/results/paper.md), "
        "~2-3 min on 2 cores",
    )
    p.add_argument(
        "--sweep",
        choices=["quantum"],
        help="run the Q_u (1 worker) and Q_w (4 workers) sweeps instead (Figures 1 and 10)",
    )
    p.add_argument(
        "--json",
        metavar="FILE",
        type=output_file,
        help="write all results as JSON ('-': the document alone on stdout, tables on stderr)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        type=plot_file,
        help="draw per-client response time and service over time, one panel per scheduler, "
        "for one workload and worker count (--plot-workload); with --sweep, the sweeps "
        "(needs the sim extra: pip install '.[sim]')",
    )
    p.add_argument(
        "--plot-workload",
        metavar="NAME[:WORKERS]",
        help="what --plot draws: a workload of the run (as in the table's workload column; "
        "'trace' for --trace) and a --workers count (default: tot-S2 when it runs, else the "
        "first workload; the largest worker count)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--metrics-port",
        type=number(0, integer=True, high=65535),
        metavar="PORT",
        help="serve Prometheus metrics of the running simulation's schedulers and "
        "dispatcher on 127.0.0.1:PORT (needs the metrics extra: pip install '.[metrics]')",
    )
    p.add_argument(
        "--metrics-hold",
        type=non_negative,
        default=0.0,
        metavar="SECONDS",
        help="keep serving metrics this long after the last simulation (default 0)",
    )


def _f(v: float, fmt: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, fmt)


def add_x_vtc(results: list[dict[str, Any]]) -> None:
    """Set each result's ``x_vtc``: its service rate over VTC's (ClientRR+VTC's)
    on the same workload and workers (NaN without a VTC run)."""
    vtc: dict[tuple[str, int], float] = {}
    for r in results:
        if r["policy"] == "vtc":
            vtc[(r["workload"], r["workers"])] = r["service_tok_s"]
    for r in results:
        ref = vtc.get((r["workload"], r["workers"]))
        r["x_vtc"] = r["service_tok_s"] / ref if ref else float("nan")


def table(results: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table (:data:`COLUMNS`)."""
    add_x_vtc(results)
    head = "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"
    out = [head, "|" + "---|" * 3 + "---:|" * (len(COLUMNS) - 3)]
    for r in results:
        label = r["scheduler"] + ("" if r.get("complete", True) else " (unfinished)")
        if "tag" in r:
            q = r.get("user_quantum") if r["tag"] == "Q_u" else r.get("worker_quantum")
            if q is not None and r["policy"] == "dlpm":
                label += f" Q={q:g}"
        out.append(
            f"| {r['workload']} | {r['workers']} | {label} | {r['service_tok_s']:,.0f} | "
            f"{_f(r['x_vtc'], '.2f')} | {r['cache_hit']:.2f} | {_f(r['jain_client'], '.3f')} | "
            f"{_f(r['jain_cost'], '.3f')} | {r['max_gap_cost']:,.0f} | "
            f"{_f(r['e2e_p50_s'], '.1f')} / {_f(r['e2e_p99_s'], '.1f')} | "
            f"{_f(r['ttft_p99_s'], '.1f')} | {_f(r['program_p99_s'], '.1f')} |"
        )
    return "\n".join(out)


def _plan(args: argparse.Namespace) -> tuple[Any, list[Run], dict[str, Any]]:
    """Check every argument and plan the runs, before any simulation:
    (base config, runs, workload overrides); :class:`UsageError` if bad."""
    try:
        base = base_config(
            args.preset, args.model, args.quantum, args.worker_quantum, memory=args.memory
        )
    except ValueError as e:
        raise UsageError(str(e).removeprefix("--model "), arg="--model") from None
    if args.placement_slack:
        base = replace(base, placement_slack=args.placement_slack)
    if args.match_threshold or args.spread_by_credit:
        base = replace(
            base, match_threshold=args.match_threshold, spread_by_credit=args.spread_by_credit
        )
    if args.hub_placement_slack and not args.hub_placement:
        raise UsageError("--hub-placement-slack needs --hub-placement", arg="--hub-placement-slack")
    if args.hub_placement:
        base = replace(base, hub_placement=True, hub_placement_slack=args.hub_placement_slack)
    overrides: dict[str, Any] = {}
    if args.scale is not None:
        overrides["scale"] = args.scale
    if args.duration is not None:
        overrides["duration"] = args.duration
    workers = args.workers or [1, 4]
    try:
        specs = [find_spec(n) for n in args.workload] if args.workload else list(DEFAULT_SUITE)
    except ValueError as e:
        raise UsageError(str(e), arg="--workload") from None
    if args.dispatch and not args.sweep and max(workers) == 1:
        raise UsageError(
            "picks the dispatcher of several workers, and --workers 1 has none: "
            "add --workers N (N > 1)",
            arg="--dispatch",
        )
    if args.sweep and args.trace:
        raise UsageError("--sweep runs the suite's workloads, not a trace: drop one of them")
    if args.trace and (args.workload or args.scale is not None or args.duration is not None):
        raise UsageError("--workload, --scale and --duration shape the suite, not a trace")
    if args.plot_workload is not None and not args.plot:
        raise UsageError("--plot-workload chooses what --plot draws: give --plot FILE.png too")
    if args.sweep and args.plot_workload is not None:
        raise UsageError(
            "--plot-workload: the sweep plots its one workload (choose it with --workload)"
        )
    if args.metrics_port is not None:
        need("metrics", what="--metrics-port")
    if args.sweep:
        sweep_workers = max(workers) if max(workers) > 1 else 4
        runs = [r for s in specs[:1] for r in plan_sweep(s, base, sweep_workers)]
    elif args.trace:
        trace = read_trace(args.trace, args.seed)
        runs = plan_runs(
            None, workers, base, trace=trace, policies=args.policy, dispatchers=args.dispatch
        )
    else:
        runs = plan_runs(specs, workers, base, policies=args.policy, dispatchers=args.dispatch)
    if not runs:
        raise UsageError("nothing to run (check --policy / --dispatch)")
    runs = with_routers(
        runs, args.routers or [1], args.view_staleness or [0.0], args.router_assign or ["rr"]
    )
    if args.plot and not args.sweep and not routers_plot(runs):
        args.plot_workload = plot_choice(args.plot_workload, runs)
    return base, runs, overrides


def routers_plot(runs: list[Run]) -> bool:
    """Whether ``--plot`` draws the routers' degradation (several router
    settings in the plan) rather than per-client panels."""
    return len({(r.cfg.routers, r.cfg.view_staleness, r.cfg.router_assign) for r in runs}) > 1


def _run_key(run: Run) -> str:
    """The workload column of ``run``'s row (``trace:FILE`` for a trace)."""
    if run.spec is not None:
        return run.spec.key
    assert run.trace is not None
    return run.trace.name


def plot_choice(choice: str | None, runs: list[Run]) -> tuple[str, int]:
    """(workload key, workers) that ``--plot`` draws: ``choice``
    (``NAME[:WORKERS]``) checked against the planned runs, or the default:
    tot-S2 when it runs (the paper's Figure 9), else the first workload; the
    largest worker count it runs on."""
    have: dict[str, list[int]] = {}
    for r in runs:
        have.setdefault(_run_key(r), [])
        if r.cfg.workers not in have[_run_key(r)]:
            have[_run_key(r)].append(r.cfg.workers)
    if choice is None:
        name = "tot-S2" if "tot-S2" in have else next(iter(have))
        return name, max(have[name])
    name, sep, w = choice.rpartition(":")
    if not sep or not w.isdigit():
        name, w = choice, ""
    if name == "trace":  # the one trace of --trace, by its short name
        name = next((k for k in have if k.startswith("trace:")), name)
    if name not in have:
        # a suite key by its short name (tot -> tot-S2), as --workload takes it
        try:
            name = find_spec(name).key
        except ValueError:
            pass
    if name not in have:
        raise UsageError(
            f"{choice!r}: this run has no workload {name!r} (it runs: {', '.join(have)})",
            arg="--plot-workload",
        )
    if not w:
        return name, max(have[name])
    if int(w) not in have[name]:
        ws = ", ".join(str(x) for x in sorted(have[name]))
        raise UsageError(f"{choice!r}: {name} runs on {ws} workers, not {w}", arg="--plot-workload")
    return name, int(w)


def run_paper(args: argparse.Namespace) -> int:
    """``--paper``: the claims table (:mod:`fairq.sim.paper`)."""
    from fairq.sim.paper import claims_table, markdown, memory_note, plan, run_plan

    shaping = {
        "--sweep": args.sweep,
        "--trace": args.trace,
        "--workload": args.workload,
        "--policy": args.policy,
        "--dispatch": args.dispatch,
        "--scale": args.scale,
        "--duration": args.duration,
        "--plot": args.plot,
        "--model": args.model,
        "--routers": args.routers,
        "--view-staleness": args.view_staleness,
        "--router-assign": args.router_assign,
        "--placement-slack": args.placement_slack or None,
        "--match-threshold": args.match_threshold or None,
        "--spread-by-credit": args.spread_by_credit or None,
        "--hub-placement": args.hub_placement or None,
        "--hub-placement-slack": args.hub_placement_slack or None,
        "--metrics-port": args.metrics_port,
    }
    for flag, value in shaping.items():
        if value is not None:
            raise UsageError(f"--paper runs its own plan; drop {flag}", arg=flag)
    defaults: dict[str, tuple[Any, Any]] = {"--preset": (args.preset, DEFAULT_PRESET)}
    if args.quantum != "auto":
        defaults["--quantum"] = (args.quantum, 2000.0)
    defaults["--worker-quantum"] = (args.worker_quantum, 20000.0)
    for flag, (value, default) in defaults.items():
        if value != default:
            raise UsageError(
                f"--paper sets its own presets and quanta (module fairq.sim.paper); drop {flag}",
                arg=flag,
            )
    workers = sorted(set(args.workers or [1, 2, 4, 8]))
    t0 = time.perf_counter()
    results = run_plan(
        plan(workers, memory=args.memory, quantum=args.quantum if args.quantum == "auto" else None),
        seed=args.seed,
        progress=not args.no_progress,
    )
    wall = time.perf_counter() - t0
    rows = claims_table(results)
    command = "fairq simulate " + " ".join(sys.argv[2:])
    header = (
        "# The DLPM paper's claims in fairq's simulator\n\n"
        f"`{command}`: {len(results)} simulations, {wall:.0f} s wall, seed {args.seed}; "
        f"Figure 7 on {', '.join(map(str, workers))} workers. How the model is made "
        'faithful and what each verdict means: docs/RESULTS.md, "The paper, replicated".\n\n'
        + memory_note(args.memory, results)
    )
    print(markdown(rows, results, header), end="")
    if args.json:
        payload = {
            "command": command,
            "seed": args.seed,
            "wall_s": wall,
            "memory": args.memory,
            "claims": rows,
        }
        payload["results"] = results
        write_json(args, _clean(payload))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.paper:
        return run_paper(args)
    base, runs, overrides = _plan(args)
    observe = None
    if args.metrics_port is not None:
        try:
            observe = serve_metrics(args.metrics_port)
        except OSError as e:
            raise UsageError(str(e), arg="--metrics-port") from None
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
    if routers_plot(runs):
        print(routers_table(results))
    print()
    print(story(results, sweep=bool(args.sweep)))
    print(
        f"\n{len(results)} simulation{'s' if len(results) != 1 else ''} in {wall:.1f} s wall; "
        f"{steps:,} simulated steps "
        f"({steps / sim_wall if sim_wall else 0:,.0f} steps/s); model preset {args.preset}, "
        f"memory {args.memory} ({sum(r['retractions'] for r in results):,} retractions), "
        f"Q_u={args.quantum if args.quantum == 'auto' else format(args.quantum, 'g')}, "
        f"Q_w={args.worker_quantum:g}, seed {args.seed}"
    )
    if args.plot:
        from fairq.sim.plot import plot_results, workers_text

        if routers_plot(runs):
            from fairq.sim.plot import plot_routers

            plot_routers(results, args.plot)
            print(f"plot written to {args.plot}: fairness and hit rate by routers and staleness")
        elif args.sweep:
            plot_results(results, args.plot, sweep=True)
            print(
                f"plot written to {args.plot}: the Q_u and Q_w sweeps of {results[0]['workload']}"
            )
        else:
            key, workers = args.plot_workload
            plot_results(results, args.plot, workload=key, workers=workers)
            print(
                f"plot written to {args.plot}: {key} on {workers_text(workers)} "
                "(choose with --plot-workload NAME[:WORKERS])"
            )
    if args.json:
        payload = {
            "command": "fairq simulate " + " ".join(sys.argv[2:]),
            "preset": args.preset,
            "model": base.model.as_dict(),
            "memory": args.memory,
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
        fleet = getattr(sim.dispatcher, "routers", None)
        if fleet is not None:
            objs += [(f"router{i}", d) for i, d in enumerate(fleet)]
        elif sim.dispatcher is not None:
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
