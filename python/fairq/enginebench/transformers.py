"""``fairq engine-bench``: fairq policies on transformers' continuous batching.

Builds a Llama-style model from a config with random weights (nothing is
downloaded), replays a multi-client workload with ``add_request`` one request
at a time under each policy, and reports per-client service, Jain's index,
throughput, prefix-cache hit rate and per-client latency percentiles taken from
the engine's own timestamps, as a table and as JSON. It also fits the
simulator's step-time constants to the measured steps.

The scheduler named ``fifo`` in the output is transformers' own FIFO scheduler
(run as ``"fifo-observed"``: the same class plus measurements).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fairq.enginebench.workload import (
    EngineRequest,
)
from fairq.engineopts import check_policy
from fairq.sim.fit import fit_step_time
from fairq.sim.metrics import jain_index, percentile
from fairq.transformers.fit import StepSample
from fairq.transformers.model import (
    SUPPORTED_TRANSFORMERS,
    build_model,
    check_scheduler_type,
    greedy_manager,
)
from fairq.transformers.tenants import FAIR_POLICIES


@dataclass
class EngineRun:
    """Outputs of one replay: ``outputs`` by request id, the scheduler instance
    that ran (checked to be the requested class), and wall-clock seconds."""

    scheduler_type: str
    scheduler: Any
    outputs: dict[str, Any]
    wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)


def _check_dependencies(workload: list[EngineRequest]) -> None:
    """ValueError naming the first request that depends on one not in
    ``workload``."""
    known = {r.request_id for r in workload}
    for r in workload:
        missing = [d for d in r.after if d not in known]
        if missing:
            raise ValueError(f"request {r.request_id!r} depends on unknown requests {missing}")


def run_engine(
    model: Any,
    scheduler_type: str,
    workload: list[EngineRequest],
    *,
    page_size: int = 16,
    num_blocks: int = 256,
    max_batch_tokens: int = 256,
    max_requests_per_batch: int = 8,
    realtime: bool = True,
    timeout_s: float = 600.0,
) -> EngineRun:
    """Replay ``workload`` on a fresh continuous-batching manager.

    Requests are added one at a time with ``add_request``: at their arrival
    times when ``realtime`` (after ``start()``), else all before ``start()``
    (deterministic order, for tests). Greedy decoding, EOS disabled, so every
    request generates exactly ``max_new_tokens``.

    Raises:
        ValueError: unregistered ``scheduler_type``, or a request depends on
            one not in ``workload``.
        RuntimeError: the running scheduler is not the requested class, or the
            engine stopped before every request finished.
    """
    from fairq.transformers import scheduler as fs

    check_scheduler_type(scheduler_type)
    _check_dependencies(workload)
    expected = fs.SCHEDULER_MAPPING[scheduler_type]
    fs.LAST_SCHEDULER.clear()
    manager = greedy_manager(
        model,
        scheduler_type,
        max(r.max_new_tokens for r in workload),
        page_size=page_size,
        num_blocks=num_blocks,
        max_batch_tokens=max_batch_tokens,
        max_requests_per_batch=max_requests_per_batch,
    )
    outputs: dict[str, Any] = {}
    independent = [r for r in workload if not r.after]
    dependent = [r for r in workload if r.after]
    ready_at: list[tuple[float, EngineRequest]] = []  # dependents whose parents finished

    def add(req: EngineRequest) -> None:
        manager.add_request(
            list(req.prompt),
            request_id=req.request_id,
            max_new_tokens=req.max_new_tokens,
            record_timestamps=True,
        )

    try:
        t0 = time.perf_counter()
        if realtime:
            manager.start()
        for req in independent:
            if realtime:
                delay = t0 + req.arrival - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            add(req)
        if not realtime:
            manager.start()
        deadline = time.perf_counter() + timeout_s
        while len(outputs) < len(workload):
            now = time.perf_counter()
            for item in [x for x in ready_at if x[0] <= now]:
                ready_at.remove(item)
                add(item[1])
            wait = min([t for t, _ in ready_at], default=now + 1.0) - now
            if now > deadline:
                raise RuntimeError(f"timed out with {len(workload) - len(outputs)} unfinished")
            result = manager.get_result(timeout=max(0.01, min(wait, deadline - now)))
            if result is None:
                if manager.is_running() or ready_at:
                    continue
                raise RuntimeError(
                    f"engine stopped with {len(workload) - len(outputs)} requests unfinished"
                )
            if result.error:
                raise RuntimeError(f"request {result.request_id} failed: {result.error}")
            outputs[result.request_id] = result
            for dep in [d for d in dependent if all(p in outputs for p in d.after)]:
                dependent.remove(dep)
                ready_at.append((time.perf_counter() + (dep.arrival if realtime else 0.0), dep))
        wall = time.perf_counter() - t0
        last = fs.LAST_SCHEDULER[-1] if fs.LAST_SCHEDULER else None
        sched = fs.running_scheduler(manager) or last
    finally:
        manager.stop(block=True)
    if type(sched) is not expected:
        raise RuntimeError(
            f"engine ran {type(sched).__name__}, not {expected.__name__} for {scheduler_type!r}"
        )
    if sched is not None and hasattr(sched, "flush"):
        sched.flush()
    return EngineRun(scheduler_type, sched, outputs, wall)


def summarize(run: EngineRun, workload: list[EngineRequest]) -> dict[str, Any]:
    """Per-client and overall metrics of one run (JSON-ready)."""
    by_client: dict[str, list[EngineRequest]] = {}
    for req in workload:
        by_client.setdefault(req.client, []).append(req)
    outs = run.outputs
    t_start = min(o.created_time for o in outs.values())
    # The backlogged window ends when the first client has nothing left.
    t_end = min(max(outs[r.request_id].lifespan[1] for r in reqs) for reqs in by_client.values())
    stats = run.scheduler.stats
    clients: dict[str, Any] = {}
    window_service: list[float] = []
    # DLPM's cost (w_e = 1 per prompt token the engine computed, w_q = 2 per
    # output token) over the same window: what DLPM's fairness is measured in
    window_cost: list[float] = []
    for client, reqs in sorted(by_client.items()):
        lat = [outs[r.request_id].lifespan[1] - outs[r.request_id].created_time for r in reqs]
        ttft = [
            (outs[r.request_id].timestamps or [float("nan")])[0] - outs[r.request_id].created_time
            for r in reqs
        ]
        inp = sum(len(r.prompt) for r in reqs)
        out = sum(len(outs[r.request_id].generated_tokens) for r in reqs)
        in_window = cost_in_window = 0.0
        for r in reqs:
            o = outs[r.request_id]
            out_in_window = 2 * sum(1 for t in (o.timestamps or []) if t <= t_end)
            if o.lifespan[0] <= t_end:
                in_window += len(r.prompt)
                rec = stats.requests.get(r.request_id)
                cached = rec.engine_cached if rec is not None else None
                cost_in_window += len(r.prompt) - (cached or 0)
            in_window += out_in_window
            cost_in_window += out_in_window
        window_service.append(in_window)
        window_cost.append(cost_in_window)
        row: dict[str, Any] = {
            "requests": len(reqs),
            "input_tokens": inp,
            "output_tokens": out,
            "service": inp + 2 * out,
            "service_in_window": in_window,
            "cost_in_window": cost_in_window,
            "latency_p50_s": percentile(lat, 50),
            "latency_p99_s": percentile(lat, 99),
            "ttft_p50_s": percentile(ttft, 50),
            "ttft_p99_s": percentile(ttft, 99),
        }
        if hasattr(run.scheduler, "service"):
            row["fairq_service"] = run.scheduler.service(client)
        clients[client] = row
    generated = sum(len(o.generated_tokens) for o in outs.values())
    summary: dict[str, Any] = {
        "scheduler_type": run.scheduler_type,
        "scheduler_class": type(run.scheduler).__name__,
        "requests": len(outs),
        "wall_s": run.wall_s,
        "throughput_output_tok_s": generated / run.wall_s if run.wall_s > 0 else 0.0,
        "throughput_total_tok_s": (generated + sum(len(r.prompt) for r in workload)) / run.wall_s
        if run.wall_s > 0
        else 0.0,
        "backlogged_window_s": t_end - t_start,
        "jain_index_window": jain_index(window_service),
        "jain_cost_window": jain_index(window_cost),
        "prefix_hit_rate": stats.prefix_hit_rate(),
        "steps": stats.n_steps,
        "schedule_ms_per_step": 1e3 * stats.schedule_s / max(1, stats.n_steps),
        "mirror_resyncs": stats.mirror_resyncs,
        "mirror_error_tokens": stats.mirror_error_tokens(),
        "requeued_by_engine": stats.requeued,
        "clients": clients,
    }
    if len(stats.steps) >= 4:
        summary["step_time_fit"] = fit_step_time(stats.steps).as_dict()
    return summary


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


#: The summary table's columns after the scheduler's name.
_SUMMARY_COLUMNS = (
    "throughput_output_tok_s",
    "jain_index_window",
    "jain_cost_window",
    "prefix_hit_rate",
    "steps",
    "schedule_ms_per_step",
    "wall_s",
)
#: A policy's per-client table's columns after the client's name (a missing one: ``-``).
_CLIENT_COLUMNS = (
    "requests",
    "service",
    "service_in_window",
    "cost_in_window",
    "fairq_service",
    "latency_p50_s",
    "latency_p99_s",
    "ttft_p50_s",
    "ttft_p99_s",
)


def _row(cells: Iterable[Any]) -> str:
    """A markdown table row: ``cells`` through :func:`_fmt`."""
    return "| " + " | ".join(_fmt(x) for x in cells) + " |"


def markdown(results: list[dict[str, Any]]) -> str:
    """Summary table plus a per-client table for each policy."""
    lines = [
        "| scheduler | throughput (out tok/s) | Jain (backlogged window) | Jain (cost) "
        "| prefix hit rate | steps | schedule (ms/step) | wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row([r["scheduler_type"], *(r[k] for k in _SUMMARY_COLUMNS)]) for r in results]
    for r in results:
        lines += [
            "",
            f"**{r['scheduler_type']}** per client",
            "",
            "| client | requests | service (in + 2*out) | service in window | cost in window "
            "| fairq service | p50 latency (s) | p99 latency (s) | p50 TTFT (s) | p99 TTFT (s) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            _row([client, *(c.get(k, "-") for k in _CLIENT_COLUMNS)])
            for client, c in r["clients"].items()
        ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``fairq engine-bench --engine transformers``: replay the workload
    (:func:`fairq.enginebench.args.workload`) under each of ``--policies``
    (``fifo``: transformers' own scheduler; the others fairq's) and print the
    table (and JSON with ``--json``). Policies and workload are checked
    before torch is needed."""
    from fairq.cliargs import need
    from fairq.enginebench.args import policy_list, write_results
    from fairq.enginebench.args import workload as args_workload

    names = policy_list(
        args, ("fifo", *FAIR_POLICIES), "fifo: transformers' own scheduler; the others fairq's"
    )
    workload = args_workload(args)
    need("engine", what="--engine transformers", modules=("torch", "transformers"))
    try:
        import torch

        from fairq.transformers import scheduler as fs
    except ImportError as e:
        from fairq.cliargs import UsageError
        from fairq.extras import install_hint

        raise UsageError(
            f"--engine transformers needs torch and transformers{SUPPORTED_TRANSFORMERS} "
            f"({install_hint('engine')}): {e}"
        ) from None
    types = ["fifo-observed" if p == "fifo" else f"fairq-{check_policy(p)}" for p in names]
    from fairq.enginebench.args import dlpm_options

    fs.register(options={"dlpm": dlpm_options(args)})
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads if args.threads is not None else (1 if device == "cpu" else None)
    if threads is not None:
        torch.set_num_threads(max(1, threads))
    model = build_model(args.model, seed=args.seed, device=device, dtype=args.dtype)
    n_params = sum(p.numel() for p in model.parameters())
    machine = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"
    print(
        f"# fairq engine-bench: model={args.model} ({n_params / 1e6:.1f}M params) "
        f"device={device} ({machine}) torch={torch.__version__} "
        f"transformers={__import__('transformers').__version__} "
        f"threads={torch.get_num_threads()} requests={len(workload)}"
    )
    # One warm-up run so the first policy does not pay one-time costs.
    run_engine(
        model,
        "fifo-observed",
        [r for r in workload if not r.after][:4],
        page_size=args.page_size,
        num_blocks=args.num_blocks,
        max_batch_tokens=args.max_batch_tokens,
        max_requests_per_batch=args.max_requests_per_batch,
    )
    results = []
    all_steps: list[StepSample] = []
    for stype in types:
        er = run_engine(
            model,
            stype,
            workload,
            page_size=args.page_size,
            num_blocks=args.num_blocks,
            max_batch_tokens=args.max_batch_tokens,
            max_requests_per_batch=args.max_requests_per_batch,
        )
        summary = summarize(er, workload)
        summary["scheduler_type"] = "fifo" if stype == "fifo-observed" else stype
        results.append(summary)
        all_steps.extend(er.scheduler.stats.steps)
    print(markdown(results))
    fit = fit_step_time(all_steps) if len(all_steps) >= 4 else None
    if fit is not None:
        print(
            f"\nstep-time fit over {fit.n_steps} steps (R^2={fit.r2:.3f}): "
            f"t = {fit.c0:.4g} + {fit.c_prefill:.4g}*prefill_tokens "
            f"+ {fit.c_decode:.4g}*batch_size + {fit.c_kv:.4g}*kv_tokens_read  (seconds)\n"
            f"simulator calibrated to this engine: fairq simulate {fit.simulate_args()}"
        )
    payload = {
        "model": args.model,
        "params": n_params,
        "device": device,
        "machine": machine,
        "results": results,
        "step_time_fit": fit.as_dict() if fit else None,
    }
    write_results(args, payload, indent=2)
    if args.json and args.json != "-":
        print(f"wrote {args.json}")
    return 0
