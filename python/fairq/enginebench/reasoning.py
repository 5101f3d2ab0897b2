"""``fairq engine-bench --engine vllm --workload reasoning``: the dual-phase
(think / output) policy on vLLM's real scheduler.

A reasoning workload replayed through vLLM's ``Scheduler`` in-process
(:mod:`fairq.enginebench.harness.vllm`; no model: each request samples a plain token
until, at an output position the workload chose, the end-of-think id, then
plain tokens again). Step times are **simulated** (``fairq.sim.model.StepModel``
defaults: Llama-3.1-8B on an A100), not wall clock.

Workload (:func:`reasoning_workload`, one seed): a ``flood`` tenant sends
``flood`` requests in the first second, each thinking long (1500-2500
tokens) and answering short (32-64); three tenants ``a``, ``b``, ``c`` send
``per_tenant`` requests each over ``duration`` seconds (Poisson), thinking
100-400 tokens and answering 128-256. Prompts 128-384 tokens, unique. The
engine (:data:`ENGINE`) is sized so that KV memory runs short and vLLM
preempts.

Policies: ``vllm-fcfs`` (vLLM's own scheduler), ``dual`` (fairq's FCFS
with ``dual_phase``), ``dual+dlpm`` / ``dual+vtc`` (the fair policy
ordering admission and each phase), and the fair policies without phases
(``dlpm``, ``vtc``) to tell the two effects apart.

Per run: output-phase inter-token latency (the gaps between a request's
consecutive tokens from its end-of-think token on: the time to each visible
token) p50/p99, over all requests and over the three well-behaved tenants;
think and output throughput; each tenant's output-phase tokens while every
tenant has work; preemptions per phase; the dual-phase guard's forced
reservations (the core queue's ``budget_force_triggered_total``) and think
slots placed ahead of output.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from typing import Any

from fairq.sim.metrics import percentile

__all__ = [
    "ENGINE",
    "END_THINK",
    "POLICIES",
    "DEFAULT_POLICIES",
    "POLICY_NOTE",
    "reasoning_workload",
    "reasoning_run",
    "run",
]

#: the end-of-think token id of the replay (any id the workload's plain
#: tokens never use)
END_THINK = 5
#: every other sampled token
PLAIN = 7

#: vLLM's engine limits for this workload (tokens per block: 16)
ENGINE: dict[str, int] = {
    "num_blocks": 4096,
    "max_num_seqs": 64,
    "max_num_batched_tokens": 2048,
    "max_model_len": 8192,
}
#: ``dual_phase`` options of the fairq runs
DUAL: dict[str, Any] = {"output_budget": 16, "think_batch_multiplier": 2.5}

POLICIES = ("vllm-fcfs", "dual", "dual+dlpm", "dual+vtc", "dlpm", "vtc")
DEFAULT_POLICIES = "vllm-fcfs,dual,dual+dlpm,dual+vtc,dlpm"
POLICY_NOTE = (
    "fifo = vllm-fcfs: vLLM's own scheduler; dual: fairq's FCFS with dual_phase; "
    "dual+dlpm, dual+vtc: the fair policy with dual_phase; dlpm, vtc: without"
)
BLOCK = 16


def reasoning_workload(
    seed: int,
    *,
    flood: int = 48,
    per_tenant: int = 16,
    duration: float = 30.0,
    quick: bool = False,
) -> tuple[list[Any], dict[str, int]]:
    """``(requests, think_len)``: :class:`EngineRequest` s (``max_new_tokens``
    = think + end-of-think + output tokens) and each request's think length
    (output tokens before its end-of-think token)."""
    from fairq.enginebench.workload import EngineRequest

    rng = random.Random(seed)
    if quick:
        flood, per_tenant, duration = 6, 3, 3.0
    scale = 0.1 if quick else 1.0
    reqs: list[EngineRequest] = []
    think: dict[str, int] = {}

    def add(rid: str, tenant: str, at: float, think_len: int, out_len: int) -> None:
        prompt = [rng.randrange(10, 30000) for _ in range(rng.randint(128, 384))]
        reqs.append(EngineRequest(rid, tenant, at, prompt, think_len + 1 + out_len))
        think[rid] = think_len

    for i in range(flood):
        add(
            f"flood/{i}",
            "flood",
            rng.uniform(0.0, 1.0),
            int(rng.randint(1500, 2500) * scale),
            int(rng.randint(32, 64) * scale) or 1,
        )
    for t in ("a", "b", "c"):
        at = rng.uniform(0.0, 1.0)
        for i in range(per_tenant):
            add(
                f"{t}/{i}",
                t,
                at,
                int(rng.randint(100, 400) * scale),
                int(rng.randint(128, 256) * scale) or 1,
            )
            at += rng.expovariate(per_tenant / duration)
    reqs.sort(key=lambda r: r.arrival)
    return reqs, think


def _scheduler(policy: str, quantum: float, engine: dict[str, int]) -> Any:
    from vllm.v1.core.sched.scheduler import Scheduler

    from fairq.enginebench.harness import vllm as harness
    from fairq.vllm import scheduler as fs

    if policy == "vllm-fcfs":
        cls: type = Scheduler
    else:
        fair = policy.removeprefix("dual+") if policy.startswith("dual+") else policy
        if fair == "dual":
            fair = "fcfs"
        options: dict[str, Any] = {"quantum": quantum} if fair == "dlpm" else {}
        if policy.startswith("dual"):
            options["dual_phase"] = {**DUAL, "end_think_token_id": END_THINK}
        os.environ["FAIRQ_VLLM_POLICY"] = fair
        os.environ["FAIRQ_VLLM_OPTIONS"] = json.dumps(options)
        os.environ.pop("FAIRQ_VLLM_CONFIG", None)
        cls = fs.FairqScheduler
    return harness.build_scheduler(
        cls,
        num_blocks=engine["num_blocks"],
        block_size=BLOCK,
        max_num_batched_tokens=engine["max_num_batched_tokens"],
        max_num_seqs=engine["max_num_seqs"],
        max_model_len=engine["max_model_len"],
    )


def reasoning_run(
    policy: str,
    workload: list[Any],
    think: dict[str, int],
    quantum: float = 128.0,
    engine: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One policy over the workload on an engine of ``engine``'s limits
    (default :data:`ENGINE`): the summary row (simulated seconds)."""
    import gc

    from fairq.enginebench.harness import vllm as harness
    from fairq.sim.model import StepModel

    gc.collect()
    s = _scheduler(policy, quantum, {**ENGINE, **(engine or {})})

    def token(r: Any) -> int:
        return END_THINK if r.num_output_tokens == think[r.request_id] else PLAIN

    # preemptions per phase: a request's count grows while vLLM holds it;
    # its phase is output once its tokens hold the end-of-think id
    seen_pre: dict[str, int] = {}
    pre = {"think": 0, "output": 0}

    def on_step(sched: Any, _out: Any) -> None:
        for rid, r in sched.requests.items():
            n = r.num_preemptions
            if n != seen_pre.get(rid, 0):
                phase = "output" if r.num_output_tokens > think[rid] else "think"
                pre[phase] += n - seen_pre.get(rid, 0)
                seen_pre[rid] = n

    rep = harness.replay(
        s, workload, StepModel(), block_size=BLOCK, tokens=token, token_times=True, on_step=on_step
    )
    tenants = sorted({r.client for r in workload})
    well = [t for t in tenants if t != "flood"]
    gaps: dict[str, list[float]] = {t: [] for t in tenants}
    first_visible: dict[str, list[float]] = {t: [] for t in tenants}
    think_tok = out_tok = 0
    think_end = 0.0
    for r in workload:
        rid, k = r.request_id, think[r.request_id]
        times = rep.token_times[rid]
        assert len(times) == r.max_new_tokens, (rid, len(times))
        think_tok += k
        out_tok += len(times) - k - 1
        think_end = max(think_end, times[k])
        # from the end-of-think token on: the wait for each visible token
        gaps[r.client] += [b - a for a, b in zip(times[k:-1], times[k + 1 :], strict=True)]
        if k + 1 < len(times):
            first_visible[r.client].append(times[k + 1] - rep.arrival[rid])
    # the window while every tenant has work: from the last tenant's first
    # arrival to the first tenant's last finish
    start = max(min(rep.arrival[r.request_id] for r in workload if r.client == t) for t in tenants)
    stop = min(max(rep.finish[r.request_id] for r in workload if r.client == t) for t in tenants)
    window = dict.fromkeys(tenants, 0)
    for r in workload:
        k = think[r.request_id]
        visible = rep.token_times[r.request_id][k + 1 :]
        window[r.client] += sum(1 for x in visible if start < x <= stop)
    all_gaps = [g for t in tenants for g in gaps[t]]
    well_gaps = [g for t in well for g in gaps[t]]
    dual = getattr(s, "fairq_dualphase", None)
    qm = dual.queue.metrics() if dual is not None else {}
    total_window = sum(window.values())
    return {
        "policy": policy,
        "steps": rep.steps,
        "simulated_s": rep.clock,
        "output_itl_p50_ms": 1e3 * percentile(all_gaps, 50),
        "output_itl_p99_ms": 1e3 * percentile(all_gaps, 99),
        "well_output_itl_p50_ms": 1e3 * percentile(well_gaps, 50),
        "well_output_itl_p99_ms": 1e3 * percentile(well_gaps, 99),
        "output_itl_max_ms": 1e3 * max(all_gaps, default=0.0),
        "well_first_visible_p50_s": percentile([x for t in well for x in first_visible[t]], 50),
        "well_first_visible_p99_s": percentile([x for t in well for x in first_visible[t]], 99),
        "think_tokens": think_tok,
        "output_tokens": out_tok,
        "think_tok_s": think_tok / think_end if think_end else 0.0,
        "output_tok_s": rep.output_tokens / rep.clock if rep.clock else 0.0,
        "window_s": [start, stop],
        "window_output_tokens": window,
        "flood_output_share_window": window["flood"] / total_window if total_window else 0.0,
        "preemptions": pre,
        "forced_reservations": int(qm.get("budget_force_triggered_total", 0)),
        "reserved_ahead": int(dual.reserved_ahead_total) if dual is not None else 0,
        "clients": {
            t: {
                "output_itl_p50_ms": 1e3 * percentile(gaps[t], 50),
                "output_itl_p99_ms": 1e3 * percentile(gaps[t], 99),
                "first_visible_p50_s": percentile(first_visible[t], 50),
                "latency_p50_s": percentile(
                    [
                        rep.finish[r.request_id] - rep.arrival[r.request_id]
                        for r in workload
                        if r.client == t
                    ],
                    50,
                ),
            }
            for t in tenants
        },
    }


#: the summary's columns: (key in a row, heading, format)
_COLUMNS = (
    ("output_itl_p50_ms", "output ITL p50 ms", ".1f"),
    ("output_itl_p99_ms", "output ITL p99 ms", ".1f"),
    ("output_itl_max_ms", "output ITL max ms", ".0f"),
    ("well_output_itl_p99_ms", "a/b/c output ITL p99 ms", ".1f"),
    ("well_first_visible_p50_s", "a/b/c first visible token p50 s", ".2f"),
    ("think_tok_s", "think tok/s", ".0f"),
    ("flood_output_share_window", "flood's share of output tokens (window)", ".2f"),
    ("preempt_output", "output preemptions", ".1f"),
    ("preempt_think", "think preemptions", ".1f"),
    ("forced_reservations", "forced reservations", ".1f"),
    ("reserved_ahead", "think slots ahead of output", ".0f"),
)


def _cell(vals: list[float], fmt: str) -> str:
    """Mean over seeds, with min-max when they differ."""
    mean = statistics.fmean(vals)
    if len(vals) > 1 and max(vals) != min(vals):
        return f"{mean:{fmt}} ({min(vals):{fmt}}-{max(vals):{fmt}})"
    return f"{mean:{fmt}}"


def _value(row: dict[str, Any], key: str) -> float:
    if key.startswith("preempt_"):
        return float(row["preemptions"][key.removeprefix("preempt_")])
    return float(row[key])


def summary_table(by_policy: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: one line per policy, each cell the mean over seeds (min-max)."""
    lines = [
        "| policy | " + " | ".join(h for _, h, _ in _COLUMNS) + " |",
        "|---|" + "---:|" * len(_COLUMNS),
    ]
    for p, rows in by_policy.items():
        cells = [_cell([_value(r, k) for r in rows], f) for k, _, f in _COLUMNS]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace, names: list[str]) -> int:
    """``fairq engine-bench --engine vllm --workload reasoning`` over the
    policies ``names`` (checked by :mod:`fairq.enginebench.cli`)."""
    from fairq.enginebench.vllm import require_vllm

    version = require_vllm()
    seeds = list(range(args.seed, args.seed + args.seeds))
    print(
        f"# fairq engine-bench --engine vllm --workload reasoning: vLLM {version} "
        f"scheduler on CPU, step times simulated (fairq.sim StepModel defaults), "
        f"seeds {seeds[0]}..{seeds[-1]}, engine {ENGINE}, dual_phase {DUAL}"
    )
    by_policy: dict[str, list[dict[str, Any]]] = {p: [] for p in names}
    runs = []
    for seed in seeds:
        workload, think = reasoning_workload(seed, quick=args.quick)
        for p in names:
            row = reasoning_run(p, workload, think, args.quantum)
            row["seed"] = seed
            by_policy[p].append(row)
            runs.append(row)
            print(
                f"  seed {seed} {p}: ITL p50/p99 {row['output_itl_p50_ms']:.1f}/"
                f"{row['output_itl_p99_ms']:.1f} ms, think {row['think_tok_s']:.0f} tok/s, "
                f"preemptions {row['preemptions']}",
                file=sys.stderr,
            )
    print(summary_table(by_policy))
    if args.json:
        from fairq.cli import write_json

        write_json(
            args,
            {
                "command": "fairq engine-bench " + " ".join(sys.argv[2:]),
                "engine": "vllm",
                "workload": "reasoning",
                "vllm": version,
                "step_times": "simulated: fairq.sim.model.StepModel defaults",
                "engine_limits": ENGINE,
                "dual_phase": DUAL,
                "seeds": seeds,
                "results": runs,
            },
            indent=2,
        )
    return 0
