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
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from fairq.cli import write_json
from fairq.integrations.transformers.fit import (
    StepSample,
    fit_step_time,
)
from fairq.integrations.transformers.policies import POLICIES, check_policy
from fairq.integrations.transformers.workload import (
    EngineRequest,
    from_sim_workload,
    multi_client_workload,
)
from fairq.sim.metrics import jain_index, percentile

_TF_RANGE = ">=5.17,<5.24"

MODEL_SIZES: dict[str, dict[str, int]] = {
    # ~0.1M parameters: CPU tests and smoke runs
    "tiny": dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    # ~16M parameters: a CPU benchmark where compute is not negligible
    "small": dict(
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
    ),
    # ~1.1B parameters, Llama-3.2-1B-like shapes: GPU runs
    "1b": dict(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
}


def build_model(size: str = "tiny", seed: int = 0, device: str = "cpu", dtype: str = "auto") -> Any:
    """A ``LlamaForCausalLM`` with random weights from a built-in config (no download)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if size not in MODEL_SIZES:
        raise ValueError(f"model size must be one of {sorted(MODEL_SIZES)}, got {size!r}")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    torch_dtype = {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
    }.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be auto, float32, bfloat16 or float16, got {dtype!r}")
    torch.manual_seed(seed)
    shape: dict[str, Any] = dict(MODEL_SIZES[size])
    config = LlamaConfig(max_position_embeddings=4096, **shape)
    model: Any = LlamaForCausalLM(config)
    model = model.to(device=device, dtype=torch_dtype).eval()
    return model


def page_size_field() -> str:
    """Page-size field of ``ContinuousBatchingConfig`` (5.17: block_size, then page_size)."""
    from transformers import ContinuousBatchingConfig

    names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    return "page_size" if "page_size" in names else "block_size"


def check_scheduler_type(name: str) -> str:
    """Refuse names transformers would silently replace by FIFO."""
    from fairq.integrations.transformers.scheduler import SCHEDULER_MAPPING

    if name not in SCHEDULER_MAPPING:
        raise ValueError(
            f"scheduler_type {name!r} is not registered in transformers' SCHEDULER_MAPPING "
            f"(known: {', '.join(sorted(SCHEDULER_MAPPING))}); transformers would fall back to FIFO"
        )
    return name


@dataclass
class EngineRun:
    """Outputs of one replay: ``outputs`` by request id, the scheduler instance
    that ran (checked to be the requested class), and wall-clock seconds."""

    scheduler_type: str
    scheduler: Any
    outputs: dict[str, Any]
    wall_s: float
    meta: dict[str, Any] = field(default_factory=dict)


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
        ValueError: unregistered ``scheduler_type``.
        RuntimeError: the running scheduler is not the requested class, or the
            engine stopped before every request finished.
    """
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from fairq.integrations.transformers import scheduler as fs

    check_scheduler_type(scheduler_type)
    expected = fs.SCHEDULER_MAPPING[scheduler_type]
    page_kw: dict[str, Any] = {page_size_field(): page_size}
    cb_config = ContinuousBatchingConfig(
        **page_kw,
        num_blocks=num_blocks,
        max_batch_tokens=max_batch_tokens,
        max_requests_per_batch=max_requests_per_batch,
        allow_block_sharing=True,
        use_async_batching=False,
        scheduler_type=scheduler_type,
    )
    gen_config = GenerationConfig(
        do_sample=False,
        eos_token_id=-1,
        pad_token_id=0,
        max_new_tokens=max(r.max_new_tokens for r in workload),
    )
    fs.LAST_SCHEDULER.clear()
    manager = model.init_continuous_batching(
        generation_config=gen_config, continuous_batching_config=cb_config
    )
    outputs: dict[str, Any] = {}
    known = {r.request_id for r in workload}
    for r in workload:
        missing = [d for d in r.after if d not in known]
        if missing:
            raise ValueError(f"request {r.request_id!r} depends on unknown requests {missing}")
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
        sched = fs.running_scheduler(manager) or (
            fs.LAST_SCHEDULER[-1] if fs.LAST_SCHEDULER else None
        )
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
    for client, reqs in sorted(by_client.items()):
        lat = [outs[r.request_id].lifespan[1] - outs[r.request_id].created_time for r in reqs]
        ttft = [
            (outs[r.request_id].timestamps or [float("nan")])[0] - outs[r.request_id].created_time
            for r in reqs
        ]
        inp = sum(len(r.prompt) for r in reqs)
        out = sum(len(outs[r.request_id].generated_tokens) for r in reqs)
        in_window = 0.0
        for r in reqs:
            o = outs[r.request_id]
            if o.lifespan[0] <= t_end:
                in_window += len(r.prompt)
            in_window += 2 * sum(1 for t in (o.timestamps or []) if t <= t_end)
        window_service.append(in_window)
        row: dict[str, Any] = {
            "requests": len(reqs),
            "input_tokens": inp,
            "output_tokens": out,
            "service": inp + 2 * out,
            "service_in_window": in_window,
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


def markdown(results: list[dict[str, Any]]) -> str:
    """Summary table plus a per-client table for each policy."""
    lines = [
        "| scheduler | throughput (out tok/s) | Jain (backlogged window) | prefix hit rate "
        "| steps | schedule (ms/step) | wall (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['scheduler_type']} | {_fmt(r['throughput_output_tok_s'])} "
            f"| {_fmt(r['jain_index_window'])} | {_fmt(r['prefix_hit_rate'])} | {r['steps']} "
            f"| {_fmt(r['schedule_ms_per_step'])} | {_fmt(r['wall_s'])} |"
        )
    for r in results:
        lines += [
            "",
            f"**{r['scheduler_type']}** per client",
            "",
            "| client | requests | service (in + 2*out) | service in window | fairq service "
            "| p50 latency (s) | p99 latency (s) | p50 TTFT (s) | p99 TTFT (s) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for client, c in r["clients"].items():
            lines.append(
                f"| {client} | {c['requests']} | {c['service']} | {_fmt(c['service_in_window'])} "
                f"| {_fmt(c.get('fairq_service', '-'))} | {_fmt(c['latency_p50_s'])} "
                f"| {_fmt(c['latency_p99_s'])} | {_fmt(c['ttft_p50_s'])} "
                f"| {_fmt(c['ttft_p99_s'])} |"
            )
    return "\n".join(lines)


#: ``--policies`` of each ``--engine`` when not given
DEFAULT_POLICIES = {
    "transformers": "fifo,fcfs,lpm,vtc,dlpm",
    "vllm": "fifo,fcfs,vtc,lpm,dlpm",
    "vllm-server": "vllm,fcfs,vtc,lpm,dlpm",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fairq engine-bench``."""
    from fairq.cliargs import count, non_negative, output_file, positive

    parser.add_argument(
        "--engine",
        choices=("transformers", "vllm", "vllm-server"),
        default="transformers",
        help="transformers: its continuous-batching engine with a random-weight model "
        "(needs the engine extra: pip install '.[engine]'); "
        "vllm: vLLM's real scheduler, step times simulated (fairq.vllm.bench); "
        "vllm-server: real vLLM OpenAI servers under HTTP traffic (fairq.vllm.serverbench; "
        "policies: vllm for stock vLLM, fairq's fcfs, vtc, lpm, dlpm...)",
    )
    parser.add_argument(
        "--waiting",
        type=count(0),
        default=10_000,
        help="vllm: also measure fairq's time per schedule() with this many requests "
        "waiting (0: skip)",
    )
    parser.add_argument(
        "--policies",
        default=None,
        help="comma-separated: fifo (the engine's own scheduler) and fairq policies "
        f"({', '.join(POLICIES)}); vllm-server: vllm (stock vLLM) and fairq's "
        "(default: " + "; ".join(f"{e}: {p}" for e, p in DEFAULT_POLICIES.items()) + ")",
    )
    parser.add_argument(
        "--model",
        choices=sorted(MODEL_SIZES),
        default="tiny",
        help="random-weight Llama-style model size (1b: use on a GPU)",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="model dtype (auto: bfloat16 on cuda, else float32)",
    )
    parser.add_argument(
        "--threads",
        type=count(1),
        default=None,
        help="torch CPU threads (default 1 on CPU: steadier timings on a shared "
        "machine; torch's default elsewhere)",
    )
    parser.add_argument(
        "--workload",
        default="flood",
        help="flood (built-in: one client floods, per-client shared prefixes) or "
        "sim:NAME for the simulator's qa/tot/judge/chat workloads",
    )
    parser.add_argument(
        "--scale",
        type=positive,
        default=0.02,
        help="length scale of a sim: workload (default 0.02: CPU-sized)",
    )
    parser.add_argument(
        "--duration",
        type=positive,
        default=20.0,
        help="arrival window of a sim: workload in seconds",
    )
    parser.add_argument(
        "--clients", type=count(2), default=4, help="clients incl. the flooding one (>= 2)"
    )
    parser.add_argument("--requests-per-client", type=count(1), default=6)
    parser.add_argument(
        "--flood-factor",
        type=count(1),
        default=4,
        help="the misbehaving client sends this many times more requests",
    )
    parser.add_argument("--prefix-len", type=count(0), default=64, help="shared prefix per client")
    parser.add_argument(
        "--docs-per-client",
        type=count(1),
        default=1,
        help="prefixes (documents) per client of the flood workload; a client's "
        "requests cycle through them (default 1: one system prompt each)",
    )
    parser.add_argument("--suffix-len", type=count(1), default=16)
    parser.add_argument("--max-new-tokens", type=count(1), default=16)
    parser.add_argument(
        "--gap",
        type=non_negative,
        default=0.0,
        help="seconds between a well-behaved client's requests",
    )
    parser.add_argument("--page-size", type=count(1), default=16)
    parser.add_argument("--num-blocks", type=count(1), default=256)
    parser.add_argument("--max-batch-tokens", type=count(1), default=256)
    parser.add_argument("--max-requests-per-batch", type=count(1), default=4)
    parser.add_argument("--quantum", type=positive, default=128.0, help="DLPM quantum (> 0)")
    parser.add_argument("--seed", type=count(0), default=0)
    parser.add_argument(
        "--json",
        default=None,
        type=output_file,
        help="write the results as JSON to this path ('-': the document alone on stdout)",
    )
    parser.add_argument("--quick", action="store_true", help="small workload (smoke test)")
    from fairq.vllm.serverbench import add_arguments as server_arguments

    server_arguments(parser)


def _vocab(args: argparse.Namespace) -> int:
    """The model's vocabulary (the vLLM server's models have their own sizes)."""
    if args.engine == "vllm-server":
        from fairq.vllm.server import MODEL_SIZES as SERVER_SIZES

        return SERVER_SIZES[args.model]["vocab_size"]
    return int(MODEL_SIZES[args.model]["vocab_size"])


def _workload(args: argparse.Namespace) -> list[EngineRequest]:
    """The workload every engine replays, built (and a trace parsed) before
    any work: a bad ``--workload`` or ``--trace`` is a
    :class:`~fairq.cliargs.UsageError` naming it."""
    from fairq.cliargs import UsageError, read_trace

    vocab = _vocab(args)
    if getattr(args, "trace", None):
        wl = read_trace(args.trace, args.seed)
        return from_sim_workload(wl, vocab, args.max_new_tokens)
    if args.workload == "flood":
        return multi_client_workload(
            n_clients=args.clients,
            requests_per_client=2 if args.quick else args.requests_per_client,
            flood_factor=args.flood_factor,
            prefix_len=args.prefix_len,
            suffix_len=args.suffix_len,
            max_new_tokens=4 if args.quick else args.max_new_tokens,
            vocab_size=vocab,
            well_behaved_gap=args.gap,
            seed=args.seed,
            docs_per_client=args.docs_per_client,
        )
    if args.workload.startswith("sim:"):
        from fairq.sim.workloads import make_workload

        try:
            sim = make_workload(
                args.workload[4:], scale=args.scale, duration=args.duration, seed=args.seed
            )
        except ValueError as e:
            raise UsageError(str(e), arg="--workload") from None
        wl_requests = from_sim_workload(sim, vocab, max_new_tokens=args.max_new_tokens)
        if not wl_requests:
            raise UsageError(
                f"{args.workload} has no requests at --scale {args.scale:g} "
                f"--duration {args.duration:g} (raise them)",
                arg="--workload",
            )
        return wl_requests
    raise UsageError(f"must be flood or sim:NAME, got {args.workload!r}", arg="--workload")


def _policy_list(args: argparse.Namespace, known: tuple[str, ...], note: str) -> list[str]:
    """``--policies`` as a list (case-insensitive), each one of ``known``."""
    from fairq.cliargs import UsageError

    names = [p.strip().lower() for p in args.policies.split(",") if p.strip()]
    if not names:
        raise UsageError("names no policy", arg="--policies")
    for p in names:
        if p not in known:
            raise UsageError(
                f"{p!r} is not one of {', '.join(known)} for --engine {args.engine} ({note})",
                arg="--policies",
            )
    return names


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fairq engine-bench``: every argument, the workload
    and the engine's dependencies are checked before any work."""
    from fairq.cliargs import need

    if args.policies is None:
        args.policies = DEFAULT_POLICIES[args.engine]
    if args.engine == "vllm":
        from fairq.vllm.bench import run as run_vllm

        return run_vllm(args)
    if args.engine == "vllm-server":
        from fairq.vllm.serverbench import check_args
        from fairq.vllm.serverbench import run as run_server

        check_args(args)
        return run_server(args, _workload(args))
    names = _policy_list(
        args, ("fifo", *POLICIES), "fifo: transformers' own scheduler; the others fairq's"
    )
    workload = _workload(args)
    need("engine", what="--engine transformers", modules=("torch", "transformers"))
    try:
        import torch

        from fairq.integrations.transformers import scheduler as fs
    except ImportError as e:
        from fairq.cliargs import UsageError
        from fairq.extras import install_hint

        raise UsageError(
            f"--engine transformers needs torch and transformers{_TF_RANGE} "
            f"({install_hint('engine')}): {e}"
        ) from None
    types = ["fifo-observed" if p == "fifo" else f"fairq-{check_policy(p)}" for p in names]
    fs.register(options={"dlpm": {"quantum": args.quantum}})
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
    if args.json:
        payload = {
            "command": "fairq engine-bench " + " ".join(sys.argv[2:]),
            "model": args.model,
            "params": n_params,
            "device": device,
            "machine": machine,
            "results": results,
            "step_time_fit": fit.as_dict() if fit else None,
        }
        write_json(args, payload, indent=2)
        if args.json != "-":
            print(f"wrote {args.json}")
    return 0
