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
from typing import Any

from fairq.enginebench import ray_faults

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


def run_config(
    label: str,
    model: str,
    workload: list[Any],
    args: argparse.Namespace,
    port: int,
) -> dict[str, Any]:
    """Deploy configuration ``label``, replay ``workload``, summarize."""
    from ray import serve

    from fairq.enginebench.args import dlpm_options
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
            "match_threshold": args.match_threshold,
            "spread_by_credit": args.spread_by_credit,
            "view_hub": args.view_hub or args.hub_placement,
            "hub_placement": args.hub_placement,
        }
    app = fairq_vllm_app(
        model,
        model_id="m",
        num_replicas=args.replicas,
        policy=policy,
        fairq_options=(
            {**dlpm_options(args), "state_interval_s": 1.0} if policy == "dlpm" else None
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
    killer = (
        ray_faults.Killer(args.kill_after_s, stats_dir, args.kill) if args.kill_after_s else None
    )
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
        row["fault"] = ray_faults.fault_row(
            killer, results, replicas, row["failed"], args.fault_bin_s
        )
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
    from fairq.cliargs import count, number, positive

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
        "--match-threshold",
        type=number(0, high=1),
        default=0.0,
        metavar="F",
        help="D2LPM routers' match threshold (fairq.ray.RouterOptions.match_threshold): a "
        "held prefix covering less than this fraction of the prompt does not pull the "
        "request to its holders (default 0: every match counts, the paper's rule)",
    )
    g.add_argument(
        "--spread-by-credit",
        action="store_true",
        help="D2LPM routers place a request its held prefix does not place on the replica "
        "where its tenant has the most credit (fairq.ray.RouterOptions.spread_by_credit)",
    )
    g.add_argument(
        "--view-hub",
        action="store_true",
        help="D2LPM routers also share their dispatches through one named actor "
        "(fairq.ray.RouterOptions.view_hub): posted when made, pulled as they come",
    )
    g.add_argument(
        "--hub-placement",
        action="store_true",
        help="D2LPM routers place each new document where the hub agrees "
        "(fairq.ray.RouterOptions.hub_placement; implies --view-hub): the replica it went "
        "to before, else the one holding the fewest documents",
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
        help="each tenant through one ingress router, the tenants spread evenly "
        "(fairq.ray.ingress.BalancedSessionRouter on the ingress deployment), the client "
        "sending its tenant as the x-session-id header",
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
        choices=sorted(ray_faults.KILL_TARGETS),
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
