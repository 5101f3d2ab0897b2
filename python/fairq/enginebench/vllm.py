"""``fairq engine-bench --engine vllm``: fair policies inside vLLM's scheduler.

Two measurements, both on vLLM's real scheduler (no model: the forward pass
is replaced by the simulator's step-time model, :mod:`fairq.enginebench.harness.vllm`):

1. **Policies**: the multi-tenant workload of the transformers harness (one
   tenant floods with a long shared prefix) under vLLM's own FCFS scheduler
   and fairq's VTC / LPM / DLPM: per-tenant service while all are backlogged,
   Jain's index over it, throughput, vLLM's prefix-cache hit rate, p50/p99
   latency and time to first token. Times are *simulated* seconds
   (``fairq.sim.model.StepModel`` defaults: Llama-3.1-8B on an A100).
2. **Overhead**: ``--waiting`` requests queued (10,000 by default); the wall
   time fairq's code takes per ``schedule()`` call (the queue's operations,
   the accounting, the prefix-cache mirror) against the wall time of vLLM's
   own ``schedule()`` on the same queue, as a ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
from typing import Any

from fairq.sim.metrics import jain_index, percentile

__all__ = ["run", "policy_run", "overhead_run"]

#: The policy runs' vLLM ``max_model_len`` (the harness's default): a longer
#: request is refused up front.
MAX_MODEL_LEN = 8192


def _classes() -> tuple[type, Any]:
    from vllm.v1.core.sched.scheduler import Scheduler

    # the harness names vLLM's platform on a CPU machine
    from fairq.enginebench.harness import vllm as _harness  # noqa: F401
    from fairq.vllm import scheduler as fs

    return Scheduler, fs


def _set_policy(policy: str, options: dict[str, Any]) -> None:
    os.environ["FAIRQ_VLLM_POLICY"] = policy
    os.environ["FAIRQ_VLLM_OPTIONS"] = json.dumps(options)


def _time_fairq(scheduler: Any) -> Any:
    """fairq's own clock in ``scheduler`` (:class:`fairq.vllm.stats.StepClock`:
    its ``fairq_s`` is the time in every fairq entry point vLLM's step
    reaches; the scheduler class keeps it, the server exports it)."""
    return scheduler.fairq_clock


def _scheduler_class(policy: str, args: argparse.Namespace) -> type:
    """vLLM's own class for ``vllm-fcfs``, else fairq's with ``policy`` set."""
    scheduler_cls, fs = _classes()
    gc.collect()  # the previous run's garbage is not this run's time
    if policy == "vllm-fcfs":
        return scheduler_cls
    from fairq.enginebench.args import dlpm_options

    _set_policy(policy, dlpm_options(args) if policy == "dlpm" else {})
    cls: type = fs.FairqScheduler
    return cls


def require_vllm() -> str:
    """vLLM's version, once fairq's harness has named vLLM's platform on this
    machine; a :class:`~fairq.cliargs.UsageError` saying how to install it
    when it is missing (every ``--engine vllm`` workload checks this first)."""
    from fairq.cliargs import UsageError

    try:
        import vllm

        # before vLLM: the harness names its platform on CPU
        from fairq.enginebench.harness import vllm as _harness  # noqa: F401
    except ImportError as e:
        raise UsageError(
            f"--engine vllm needs vLLM 0.33 ({e}): pip install -r .ci/vllm-requirements.txt, "
            "then pip install --no-deps vllm==0.33.0"
        ) from None
    return str(vllm.__version__)


def policy_run(policy: str, workload: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    """One policy over ``workload``: the summary row."""
    from fairq.enginebench.harness import vllm as harness
    from fairq.sim.model import StepModel

    s = harness.build_scheduler(
        _scheduler_class(policy, args),
        num_blocks=args.num_blocks,
        block_size=args.page_size,
        max_num_batched_tokens=args.max_batch_tokens,
        max_num_seqs=args.max_requests_per_batch,
        max_model_len=MAX_MODEL_LEN,
    )
    timer = _time_fairq(s) if getattr(s, "fairq", None) is not None else None
    rep = harness.replay(s, workload, StepModel(), block_size=args.page_size)
    tl = rep.timeline
    tenants = sorted(tl[0][1])
    a = next((i for i, row in enumerate(tl) if min(row[2].values()) > 0), 0)
    b = next((i for i in range(a, len(tl)) if min(tl[i][2].values()) == 0), len(tl))
    start = tl[a - 1][1] if a > 0 else dict.fromkeys(tenants, 0.0)
    window = {t: tl[max(b - 1, 0)][1][t] - start[t] for t in tenants}
    clients = {}
    for t in tenants:
        ids = [r for r, c in rep.tenant.items() if c == t]
        lat = [rep.finish[r] - rep.arrival[r] for r in ids]
        ttft = [rep.first_token[r] - rep.arrival[r] for r in ids if r in rep.first_token]
        clients[t] = {
            "requests": len(ids),
            "service_in_window": window[t],
            "service_total": tl[-1][1][t],
            "latency_p50_s": percentile(lat, 50),
            "latency_p99_s": percentile(lat, 99),
            "ttft_p50_s": percentile(ttft, 50),
            "ttft_p99_s": percentile(ttft, 99),
        }
    return {
        "policy": policy,
        "steps": rep.steps,
        "simulated_s": rep.clock,
        "throughput_output_tok_s": rep.output_tokens / rep.clock if rep.clock else 0.0,
        "throughput_total_tok_s": (rep.output_tokens + rep.prompt_tokens) / rep.clock
        if rep.clock
        else 0.0,
        "prefix_hit_rate": rep.hit_rate,
        "jain_index_window": jain_index(list(window.values())),
        "window_steps": b - a,
        "schedule_ms_per_step": 1e3 * rep.schedule_s / rep.steps,
        "fairq_ms_per_step": 1e3 * timer.fairq_s / rep.steps if timer else 0.0,
        "clients": clients,
    }


def overhead_run(policy: str, args: argparse.Namespace, steps: int = 30) -> dict[str, Any]:
    """``args.waiting`` requests queued: wall ms per ``schedule()`` of vLLM
    itself and of fairq's code in it (median over ``steps`` steps)."""
    from fairq.enginebench.harness import vllm as harness

    rng = random.Random(args.seed)
    n_tenants = 50
    prefixes = [[rng.randrange(3, 30000) for _ in range(128)] for _ in range(n_tenants)]
    s = harness.build_scheduler(
        _scheduler_class(policy, args),
        num_blocks=40_000,
        block_size=16,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        max_model_len=4096,
    )
    for i in range(args.waiting):
        t = i % n_tenants
        prompt = prefixes[t] + [rng.randrange(3, 30000) for _ in range(128)]
        s.add_request(harness.make_request(f"t{t}:{i}", prompt, 64, tenant=f"t{t}"))
    timer = _time_fairq(s) if getattr(s, "fairq", None) is not None else None
    gc.collect()
    # Warm-up until every tenant has run once: when a tenant's prefix first
    # enters vLLM's cache, each of its waiting requests gets a longer match
    # (LPM/DLPM re-key all of them once, O(its waiting requests)); measured
    # apart as ``first_steps_fairq_ms_max``.
    seen: set[str] = set()
    warm_max = 0.0
    for _ in range(200):
        before = timer.fairq_s if timer else 0.0
        out, _ = harness.step(s)
        warm_max = max(warm_max, (timer.fairq_s - before) if timer else 0.0)
        seen.update(rid.split(":", 1)[0] for rid in out.num_scheduled_tokens)
        if len(seen) >= n_tenants:
            break
    total, ours = [], []
    for _ in range(steps):
        before = timer.fairq_s if timer else 0.0
        t0 = time.perf_counter()
        out = s.schedule()
        total.append(time.perf_counter() - t0)
        ours.append((timer.fairq_s - before) if timer else 0.0)
        # complete the step as the engine would (not timed)
        s.update_from_output(out, harness.model_output(s, out))
    return {
        "policy": policy,
        "waiting": len(s.waiting),
        "schedule_ms_median": 1e3 * statistics.median(total),
        "fairq_ms_median": 1e3 * statistics.median(ours),
        "fairq_ms_max": 1e3 * max(ours),
        "first_steps_fairq_ms_max": 1e3 * warm_max,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| policy | Jain (backlogged) | service in window, flood / others | hit rate "
        "| output tok/s (sim) | p50 / p99 latency s (sim) flood ; others "
        "| p50 TTFT s (sim) others | vLLM schedule() ms/step | fairq ms/step |\n"
        "|---|---:|---|---:|---:|---|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        c = r["clients"]
        others = [v for k, v in c.items() if k != "flood"]
        flood = c.get("flood", {})
        o_lat50 = statistics.median(v["latency_p50_s"] for v in others) if others else float("nan")
        o_lat99 = max((v["latency_p99_s"] for v in others), default=float("nan"))
        o_ttft = statistics.median(v["ttft_p50_s"] for v in others) if others else float("nan")
        svc = " / ".join(
            [f"{flood.get('service_in_window', 0):.0f}"]
            + [f"{v['service_in_window']:.0f}" for v in others]
        )
        lines.append(
            f"| {r['policy']} | {r['jain_index_window']:.3f} | {svc} | {r['prefix_hit_rate']:.3f} "
            f"| {r['throughput_output_tok_s']:.0f} "
            f"| {flood.get('latency_p50_s', float('nan')):.2f} / "
            f"{flood.get('latency_p99_s', float('nan')):.2f} ; {o_lat50:.2f} / {o_lat99:.2f} "
            f"| {o_ttft:.2f} | {r['schedule_ms_per_step']:.3f} | {r['fairq_ms_per_step']:.3f} |"
        )
    return "\n".join(lines)


def _overhead_table(rows: list[dict[str, Any]]) -> str:
    base = next((r for r in rows if r["policy"] == "vllm-fcfs"), None)
    lines = [
        "| policy | waiting | schedule() ms (median) | fairq ms in it (median / max) "
        "| fairq / vLLM-FCFS schedule() | fairq ms, max while tenants first run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = (
            f"{r['fairq_ms_median'] / base['schedule_ms_median']:.2f}"
            if base and r["policy"] != "vllm-fcfs"
            else "-"
        )
        lines.append(
            f"| {r['policy']} | {r['waiting']} | {r['schedule_ms_median']:.3f} "
            f"| {r['fairq_ms_median']:.3f} / {r['fairq_ms_max']:.3f} | {ratio} "
            f"| {r['first_steps_fairq_ms_max']:.3f} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``fairq engine-bench --engine vllm``: policies, workload and vLLM are
    checked before any work (:class:`~fairq.cliargs.UsageError`)."""
    from fairq.cliargs import UsageError
    from fairq.enginebench.args import policy_list, workload, write_results

    names = policy_list(
        args,
        ("fifo", "vllm-fcfs", "fcfs", "vtc", "lpm", "dlpm"),
        "fifo = vllm-fcfs: vLLM's own FCFS; fcfs: fairq's FCFS queue",
    )
    names = ["vllm-fcfs" if p in ("fifo", "vllm-fcfs") else p for p in names]
    requests = workload(args)  # the same workload as the transformers harness
    if any(r.after for r in requests):
        raise UsageError(
            f"{args.workload} has dependent requests; --engine vllm replays arrivals "
            "(use flood, sim:qa or sim:judge)",
            arg="--workload",
        )
    longest = max(len(r.prompt) + r.max_new_tokens for r in requests)
    if longest > MAX_MODEL_LEN:
        raise UsageError(
            f"a request needs {longest} tokens (prompt + output), over the in-process "
            f"scheduler's max_model_len {MAX_MODEL_LEN} (fold the trace: fairq trace import "
            "... --max-prompt-len N)",
            arg="--trace" if getattr(args, "trace", None) else "--workload",
        )
    version = require_vllm()
    print(
        f"# fairq engine-bench --engine vllm: vLLM {version} scheduler on CPU, "
        f"step times simulated (fairq.sim StepModel defaults), requests={len(requests)}"
    )
    rows = [policy_run(p, requests, args) for p in names]
    print(_table(rows))
    over: list[dict[str, Any]] = []
    if args.waiting:
        over = [overhead_run(p, args, steps=5 if args.quick else 30) for p in names]
        print()
        print(_overhead_table(over))
    write_results(
        args,
        {
            "engine": "vllm",
            "vllm": version,
            "step_times": "simulated: fairq.sim.model.StepModel defaults",
            "results": rows,
            "overhead": over,
        },
        indent=2,
    )
    return 0
