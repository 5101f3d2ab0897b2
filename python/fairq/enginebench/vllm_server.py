"""``fairq engine-bench --engine vllm-server``: policies in a real vLLM server.

Per policy (stock vLLM, and fairq's scheduler class with ``fcfs``, ``vtc``,
``lpm``, ``dlpm``...), start a real vLLM OpenAI server
(:class:`fairq.enginebench.server.VllmServer`, a random-weight Llama of
``--model`` size), drive the workload over HTTP with a real client
(:mod:`fairq.enginebench.traffic`: streaming ``/v1/completions``, token-id
prompts, the tenant in ``vllm_xargs``) at the workload's arrival times, and
report real wall-clock numbers:

* per-tenant service: output tokens as they stream back (a chunk of ``k``
  tokens counts ``k``); a client cannot see which prompt tokens hit the
  prefix cache, so prompts are not counted (fairq's own per-tenant service,
  which charges only uncached prompt tokens, is on ``/metrics``);
* Jain's index of the tenants' service over the *backlogged window*: from
  the time every tenant has sent its first request to the time the first
  tenant has its last answer;
* the same in DLPM's cost (``jain_cost_window``), what DLPM's fairness is
  measured in: ``w_e`` per prompt token vLLM computed (the prompt minus
  the ``cached_tokens`` the server reports with
  ``--enable-prompt-tokens-details``, which the bench turns on), counted
  at the request's first token, plus ``w_q`` per output token as it
  streams (DLPM's weights, the engine defaults);
* output tokens/s over the run, vLLM's prefix-cache hit rate (its own
  ``/metrics``), TTFT, inter-token latency and end-to-end latency p50/p99
  of the well-behaved tenants (all but ``flood``) and of the flood;
* fairq's time per engine step from its own counters on ``/metrics``
  (:mod:`fairq.vllm.stats`): fairq's code over the engine step and over
  vLLM's ``schedule()``.

The workload is the engine benches' one (``--workload flood`` or
``sim:NAME``, or ``--trace FILE``: the simulator's JSONL trace format), so
the same workload runs in the simulator, vLLM's scheduler in-process, this
server and transformers. ``--backlog 1000,10000`` also measures fairq's
time per step with that many requests waiting.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

from fairq.enginebench.server import VllmServer, write_model
from fairq.enginebench.traffic import (
    HttpRequest,
    HttpResult,
    Metrics,
    metric_delta,
    scrape,
    send_all,
    settle_metrics,
)
from fairq.sim.metrics import jain_index, percentile

__all__ = ["add_arguments", "run", "run_rows", "server_run", "summarize"]

FLOOD = "flood"


def http_requests(
    workload: list[Any], rate_scale: float, *, text: bool = False
) -> list[HttpRequest]:
    """The workload as streaming HTTP requests, arrivals scaled by
    ``rate_scale``; ``text``: the prompt as the words of
    :func:`fairq.enginebench.server.write_model`'s tokenizer (the same token ids
    once tokenized) instead of token ids."""
    return [
        HttpRequest(
            e.request_id,
            e.client,
            e.prompt,
            e.max_new_tokens,
            arrival=e.arrival * rate_scale,
            stream=True,
            extra={"prompt": " ".join(f"t{t}" for t in e.prompt)} if text else {},
        )
        for e in workload
    ]


def _service_events(r: HttpResult) -> list[tuple[float, float]]:
    """(time, output tokens) of one request's streamed chunks."""
    if not r.ok or not r.chunk_times:
        return []
    per = r.completion_tokens / len(r.chunk_times)
    return [(t, per) for t in r.chunk_times]


def _cost_events(r: HttpResult) -> list[tuple[float, float]] | None:
    """(time, DLPM cost) of one request: its computed prompt tokens at the
    first token, its output tokens as they stream; None when the server did
    not say what was cached."""
    from fairq.engineopts import policy_options

    if not r.ok or not r.chunk_times or r.first_token is None:
        return []
    if r.cached_tokens is None:
        return None
    w = policy_options("dlpm")
    extend = max(r.prompt_tokens - r.cached_tokens, 0)
    return [(r.first_token, w["w_e"] * extend)] + [(t, w["w_q"] * n) for t, n in _service_events(r)]


def summarize(results: list[HttpResult], before: Metrics, after: Metrics) -> dict[str, Any]:
    """The row of one run (see the module doc)."""
    tenants = sorted({r.request.tenant for r in results})
    first_sent = {t: min(r.sent for r in results if r.request.tenant == t) for t in tenants}
    last_end = {t: max(r.end for r in results if r.request.tenant == t) for t in tenants}
    a = max(first_sent.values())
    b = min(last_end.values())
    window: dict[str, float] = dict.fromkeys(tenants, 0.0)
    total: dict[str, float] = dict.fromkeys(tenants, 0.0)
    cost_window: dict[str, float] | None = dict.fromkeys(tenants, 0.0)
    for r in results:
        for t, n in _service_events(r):
            total[r.request.tenant] += n
            if a <= t <= b:
                window[r.request.tenant] += n
        cost = _cost_events(r)
        if cost is None:
            cost_window = None
        elif cost_window is not None:
            for t, c in cost:
                if a <= t <= b:
                    cost_window[r.request.tenant] += c
    makespan = max(r.end for r in results) - min(r.sent for r in results)
    out_tokens = sum(r.completion_tokens for r in results if r.ok)

    def delta(name: str) -> float:
        return metric_delta(before, after, name)

    queries = delta("vllm:prefix_cache_queries_total")

    def lat(group: list[HttpResult]) -> dict[str, float]:
        e2e = [r.latency for r in group if r.ok]
        ttft = [r.ttft for r in group if r.ok and r.ttft is not None]
        itl = [
            y - x
            for r in group
            if r.ok
            for x, y in zip(r.chunk_times[:-1], r.chunk_times[1:], strict=True)
        ]
        # per request: streaming time over the tokens after the first (the
        # client reads several chunks at once when it or the API server lags,
        # so single gaps of ~0.01 ms; an average per request is not fooled)
        tpot = [
            (r.chunk_times[-1] - r.chunk_times[0]) / (r.completion_tokens - 1)
            for r in group
            if r.ok and r.chunk_times and r.completion_tokens > 1
        ]
        return {
            "latency_p50_s": percentile(e2e, 50),
            "latency_p99_s": percentile(e2e, 99),
            "ttft_p50_s": percentile(ttft, 50),
            "ttft_p99_s": percentile(ttft, 99),
            "itl_p50_s": percentile(itl, 50),
            "itl_p99_s": percentile(itl, 99),
            "tpot_p50_s": percentile(tpot, 50),
            "tpot_p99_s": percentile(tpot, 99),
        }

    well = [r for r in results if r.request.tenant != FLOOD]
    flood = [r for r in results if r.request.tenant == FLOOD]
    well_end = max((r.end for r in well), default=0.0)
    steps = delta("fairq_vllm_steps_total")
    step_s = delta("fairq_vllm_step_seconds_total")
    sched_s = delta("fairq_vllm_schedule_seconds_total")
    fairq_s = delta("fairq_vllm_fairq_seconds_total")
    return {
        "requests": len(results),
        "failed": sum(not r.ok for r in results),
        "makespan_s": makespan,
        "output_tok_s": out_tokens / makespan if makespan > 0 else 0.0,
        "prefix_hit_rate": delta("vllm:prefix_cache_hits_total") / queries if queries else 0.0,
        "window_s": max(b - a, 0.0),
        "jain_window": jain_index(list(window.values())) if b > a else float("nan"),
        "service_window": window,
        "jain_cost_window": (
            jain_index(list(cost_window.values()))
            if cost_window is not None and b > a
            else float("nan")
        ),
        "cost_window": cost_window,
        "service_total": total,
        "well_behaved": lat(well),
        "flood": lat(flood) if flood else None,
        # share of the flood's requests answered before the well-behaved
        # tenants' last answer (1.0: the flood went first)
        "flood_done_before_well": sum(r.end <= well_end for r in flood) / len(flood)
        if flood
        else None,
        "fairq_steps": steps,
        "fairq_ms_per_step": 1e3 * fairq_s / steps if steps else None,
        "fairq_share_of_step": fairq_s / step_s if step_s else None,
        "fairq_share_of_schedule": fairq_s / sched_s if sched_s else None,
        "service_timeline": _timeline(results, tenants),
    }


def _timeline(results: list[HttpResult], tenants: list[str]) -> dict[str, list[list[float]]]:
    """Cumulative service per tenant: ``[[t, tokens], ...]`` (at most ~200 points)."""
    out = {}
    for tenant in tenants:
        ev = sorted(e for r in results if r.request.tenant == tenant for e in _service_events(r))
        acc, pts = 0.0, [[0.0, 0.0]]
        step = max(1, len(ev) // 200)
        for i, (t, n) in enumerate(ev):
            acc += n
            if i % step == 0 or i == len(ev) - 1:
                pts.append([round(t, 4), round(acc, 1)])
        out[tenant] = pts
    return out


def _server(args: argparse.Namespace, model: str, policy: str, log: str) -> VllmServer:
    fairq = None if policy == "vllm" else policy
    options: dict[str, Any] | None = None
    if fairq == "dlpm":
        from fairq.enginebench.args import dlpm_options

        options = dlpm_options(args)
    extra = args.server_args.split() if args.server_args else []
    if "--enable-prompt-tokens-details" not in extra:
        extra.append("--enable-prompt-tokens-details")  # each request's cached tokens
    return VllmServer(
        model,
        fairq,
        options=options,
        args=extra,
        log=log,
        max_model_len=args.max_model_len,
    )


def server_run(
    args: argparse.Namespace, model: str, policy: str, requests: list[HttpRequest], log: str
) -> dict[str, Any]:
    """One policy: start its server, send ``requests``, summarize, stop."""
    with _server(args, model, policy, log) as s:
        name = s.model
        send_all(s.url, name, [HttpRequest("warmup", "warmup", [3, 4, 5, 6], 4)])
        before = scrape(s.url)
        t = time.perf_counter()
        results = send_all(s.url, name, requests)
        wall = time.perf_counter() - t
        settle_metrics(s.url, name)
        after = scrape(s.url)
    row = summarize(results, before, after)
    row["policy"] = policy
    row["wall_s"] = wall
    return row


def backlog_run(
    args: argparse.Namespace, model: str, policy: str, waiting: int, log: str
) -> dict[str, Any]:
    """fairq's time per step with ``waiting`` requests queued (clients give
    up after ``--backlog-seconds``; vLLM aborts the rest)."""
    import random

    rng = random.Random(args.seed)
    with _server(args, model, policy, log) as s:
        reqs = [
            HttpRequest(
                f"b{i}",
                f"t{i % 64}",
                [rng.randrange(3, 4000) for _ in range(32)],
                8,
                client_timeout=args.backlog_seconds,
            )
            for i in range(waiting)
        ]
        before = scrape(s.url)
        send_all(s.url, s.model, reqs, max_connections=waiting + 16)
        settle_metrics(s.url, s.model)
        after = scrape(s.url)

    steps = metric_delta(before, after, "fairq_vllm_steps_total")
    fairq_s = metric_delta(before, after, "fairq_vllm_fairq_seconds_total")
    sched_s = metric_delta(before, after, "fairq_vllm_schedule_seconds_total")
    step_s = metric_delta(before, after, "fairq_vllm_step_seconds_total")
    return {
        "policy": policy,
        "waiting": waiting,
        "steps": steps,
        "fairq_ms_per_step": 1e3 * fairq_s / steps if steps else None,
        "schedule_ms_per_step": 1e3 * sched_s / steps if steps else None,
        "step_ms": 1e3 * step_s / steps if steps else None,
        "fairq_share_of_step": fairq_s / step_s if step_s else None,
    }


def _f(x: Any, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return f"{x:.{nd}f}"


#: What the table's TPOT column is, and why it replaced the gaps between
#: chunks (printed under the table by ``fairq demo``; docs/results/vllm_server.md).
TPOT_NOTE = (
    "TPOT: a request's time per output token after the first (its streaming time over its "
    "tokens less one), median over the well-behaved requests. Not the gaps between chunks: "
    "the client reads several chunks in one go when it or the API server lags (most gaps "
    "~0.01 ms on a busy 2-core machine), so their median read 0.0 ms (JSON: itl_p50_s)."
)


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the policy rows: output tok/s is the median over
    runs with the range in brackets; the other columns are the median run's
    (TPOT: :data:`TPOT_NOTE`)."""
    head = (
        "| policy | runs | output tok/s | prefix hit | Jain (window) | Jain (cost) "
        "| well p50 / p99 e2e s | well TTFT p50 s | well TPOT p50 ms | flood p50 e2e s "
        "| fairq % of step |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        w, fl = r["well_behaved"], r["flood"] or {}
        lines.append(
            f"| {r['policy']} | {r['runs']} | {_f(r['output_tok_s_median'], 0)} "
            f"[{_f(r['output_tok_s_min'], 0)}-{_f(r['output_tok_s_max'], 0)}] "
            f"| {_f(r['prefix_hit_rate'], 3)} | {_f(r['jain_window'], 3)} "
            f"| {_f(r['jain_cost_window'], 3)} "
            f"| {_f(w['latency_p50_s'])} / {_f(w['latency_p99_s'])} | {_f(w['ttft_p50_s'])} "
            f"| {_f(1e3 * w['tpot_p50_s'] if w['tpot_p50_s'] == w['tpot_p50_s'] else None, 1)} "
            f"| {_f(fl.get('latency_p50_s'))} "
            f"| {_f(100 * r['fairq_share_of_step'] if r['fairq_share_of_step'] else None, 2)} |"
        )
    return "\n".join(lines)


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the (lower) median output tok/s, with every run's
    figures alongside (``*_all``) and the median over runs."""
    ordered = sorted(runs, key=lambda r: r["output_tok_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["runs"] = len(runs)
    row["output_tok_s_min"] = ordered[0]["output_tok_s"]
    row["output_tok_s_max"] = ordered[-1]["output_tok_s"]
    row["output_tok_s_all"] = [r["output_tok_s"] for r in runs]
    row["jain_window_all"] = [r["jain_window"] for r in runs]
    row["jain_cost_window_all"] = [r["jain_cost_window"] for r in runs]
    row["prefix_hit_rate_all"] = [r["prefix_hit_rate"] for r in runs]
    row["output_tok_s_median"] = statistics.median(r["output_tok_s"] for r in runs)
    return row


def plot(
    rows: list[dict[str, Any]],
    path: str,
    policies: tuple[str, ...],
    *,
    label: Any = None,
    title: str = "per-tenant service in a real vLLM server (CPU, random-weight model)",
) -> None:
    """Per-tenant cumulative service over time, one panel per policy, same
    scales. ``label(row)``: a panel's name (default: stock vLLM / fairq's
    policy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [r for r in rows if r["policy"] in policies]
    fig, axes = plt.subplots(1, len(chosen), figsize=(5.5 * len(chosen), 4), sharey=True)
    axes = [axes] if len(chosen) == 1 else list(axes)
    xmax = max(p[0] for r in chosen for pts in r["service_timeline"].values() for p in pts)
    for ax, r in zip(axes, chosen, strict=True):
        for tenant, pts in sorted(r["service_timeline"].items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=tenant)
        if label is not None:
            name = label(r)
        else:
            name = "stock vLLM" if r["policy"] == "vllm" else f"fairq {r['policy']}"
        ax.set_title(f"{name}\nJain {r['jain_window']:.3f} (backlogged window)", fontsize=10)
        ax.set_xlabel("wall-clock seconds since the first request")
        ax.set_xlim(0, xmax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("output tokens served")
    axes[-1].legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments only the vllm-server engine reads (the rest are engine-bench's)."""
    from fairq.cliargs import count, count_list, non_negative, plot_file, positive

    g = parser.add_argument_group("--engine vllm-server")
    g.add_argument(
        "--server-args",
        default="--max-num-seqs 8 --max-num-batched-tokens 1024 --num-gpu-blocks-override 20",
        help="extra vLLM server arguments (default: a small server under contention)",
    )
    g.add_argument("--max-model-len", type=count(1), default=2048)
    g.add_argument("--runs", type=count(1), default=1, help="runs per policy (median reported)")
    g.add_argument(
        "--rate-scale",
        type=non_negative,
        default=1.0,
        help="multiply the workload's arrival times (0: everything at once)",
    )
    g.add_argument(
        "--trace", default=None, help="JSONL trace (the simulator's format), checked up front"
    )
    g.add_argument(
        "--backlog",
        type=count_list(1),
        default=[],
        help="comma-separated waiting counts (e.g. 1000,10000): fairq's time per step "
        "with that many requests waiting",
    )
    g.add_argument("--backlog-seconds", type=positive, default=15.0)
    g.add_argument(
        "--backlog-policies", default="vtc,dlpm", help="the fairq policies --backlog measures"
    )
    g.add_argument(
        "--plot",
        default=None,
        type=plot_file,
        help="PNG of per-tenant service over time (needs the sim extra: pip install '.[sim]')",
    )


#: what ``--policies`` may name: stock vLLM, and fairq's scheduler class with each policy
POLICIES = ("vllm", "fcfs", "priority", "wfq", "vtc", "lpm", "dlpm")


def _names(text: str) -> list[str]:
    return [p.strip().lower() for p in text.split(",") if p.strip()]


def check_args(args: argparse.Namespace) -> None:
    """What the vllm-server engine checks before any work: ``--policies``
    and ``--backlog-policies`` (:class:`~fairq.cliargs.UsageError`)."""
    from fairq.cliargs import UsageError

    for arg, text, known in (
        ("--policies", args.policies, POLICIES),
        ("--backlog-policies", args.backlog_policies if args.backlog else "", POLICIES[1:]),
    ):
        for p in _names(text):
            if p not in known:
                raise UsageError(
                    f"{p!r} is not one of {', '.join(known)} (vllm: stock vLLM; the others: "
                    "fairq's scheduler class with that policy)",
                    arg=arg,
                )
    if not _names(args.policies):
        raise UsageError("names no policy", arg="--policies")


def run(args: argparse.Namespace) -> int:
    """Entry point (from ``fairq engine-bench --engine vllm-server``): the
    arguments, then the workload (:func:`fairq.enginebench.args.workload`),
    are checked before any server starts."""
    from fairq.enginebench.args import workload

    check_args(args)
    return run_rows(args, workload(args))[0]


def check_needs(what: str = "--engine vllm-server") -> str:
    """Everything a server run needs, checked before any server starts:
    here the ``demo`` extra (the model's tokenizer file, the HTTP client),
    in the server's interpreter vLLM that can serve and fairq
    (:func:`fairq.enginebench.server.check_server_python`). Returns vLLM's
    version; else :class:`fairq.cliargs.UsageError`, one line naming the fix."""
    from fairq.cliargs import UsageError, need
    from fairq.enginebench.server import check_server_python

    need("demo", what=what)
    try:
        return check_server_python()
    except ValueError as e:
        raise UsageError(str(e)) from None


def run_rows(
    args: argparse.Namespace, workload: list[Any], *, version: str | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """:func:`run`, also returning the policy rows (exit status, rows).
    ``version``: vLLM's, when the caller ran :func:`check_needs` already."""
    from fairq.cliargs import UsageError

    check_args(args)
    if any(e.after for e in workload):
        raise UsageError(
            f"{getattr(args, 'workload', 'the workload')} has dependent requests; "
            "--engine vllm-server replays arrivals "
            "(use flood, sim:qa or sim:judge, or a trace)",
            arg="--workload",
        )
    if version is None:
        version = check_needs()
    policies = _names(args.policies)
    # a SIGTERM stops the servers too (their `with` blocks run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    tmp = tempfile.mkdtemp(prefix="fairq-server-bench-")
    model = write_model(f"{tmp}/model", args.model)
    requests = http_requests(workload, args.rate_scale)
    print(
        f"# fairq engine-bench --engine vllm-server: vLLM {version}, model {args.model}, "
        f"{len(requests)} requests, server args: {args.server_args}; logs in {tmp}"
    )
    # Rounds: run i of every policy before run i + 1 of any, so a change in
    # the machine's load during the bench falls on every policy alike.
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    for i in range(args.runs):
        for policy in policies:
            row = server_run(args, model, policy, requests, f"{tmp}/{policy}-{i}.log")
            print(
                f"  {policy} run {i + 1}: {row['output_tok_s']:.0f} output tok/s, "
                f"hit {row['prefix_hit_rate']:.3f}, Jain {row['jain_window']:.3f} "
                f"(cost {row['jain_cost_window']:.3f}), "
                f"failed {row['failed']}",
                flush=True,
            )
            runs[policy].append(row)
    rows = [_median_row(runs[p]) for p in policies]
    print(table(rows))
    backlog = []
    for n in args.backlog:
        for policy in _names(args.backlog_policies):
            b = backlog_run(args, model, policy, n, f"{tmp}/backlog-{policy}-{n}.log")
            print(
                f"  backlog {n} {policy}: fairq {_f(b['fairq_ms_per_step'], 3)} ms/step, "
                f"schedule {_f(b['schedule_ms_per_step'], 3)} ms, step {_f(b['step_ms'], 1)} ms",
                flush=True,
            )
            backlog.append(b)
    if args.plot:
        shown = tuple(p for p in ("fcfs", "vllm", "dlpm") if p in policies)[-2:]
        plot(rows, args.plot, shown or tuple(policies[:2]))
    from fairq.enginebench.args import write_results

    write_results(
        args,
        {
            "vllm": version,
            "model": args.model,
            "note": "real wall-clock on this machine's CPU (vLLM's CPU build); random-weight model",
            "rows": rows,
            "backlog": backlog,
        },
    )
    return 0, rows
