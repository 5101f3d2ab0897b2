"""Measure a real vLLM engine's step times and fit the simulator's step model.

``python -m fairq.enginebench.stepfit`` (with a Python that has vLLM, e.g.
``$FAIRQ_VLLM_SERVER_PYTHON``: vLLM's CPU build) runs vLLM's V1 engine in
this process (``LLMEngine``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the
engine core and, with ``--executor uni`` (the default), the model run here;
``--executor mp`` puts the model in a worker process as vLLM's server does
on CPU: about 1.2 ms more per step here, and noisier) on the random-weight
Llama of the vLLM server bench
(:func:`fairq.enginebench.server.write_model`, ``--load-format dummy``,
:func:`fairq.enginebench.server.engine_env`), drives it through a design of
controlled batch shapes, and records for every engine step (the engine
core's ``step()``: schedule, forward, sample, update; not the detokenizer,
which the server runs in another process):

* the prefill tokens computed and the attention pairs of the prefill chunks
  (:func:`fairq.sim.model.attn_pairs` of each chunk's start and length),
* the requests decoding one token and the KV tokens they read (each one's
  context: its computed tokens plus the new one),
* the step's wall time.

The shapes are read from vLLM's own scheduler output, not assumed. The
design (:func:`design`):

* **prefill**: one request of ``N`` = 32..2048 new tokens, with no cached
  prefix and with a cached 1024-token prefix (a prefix request runs first,
  so the chunk starts at position 1024);
* **decode**: ``B`` = 1, 4, 16, 64 requests with distinct prompts of ``C`` =
  64, 256, 1024, 2048 tokens, decoding together (their prefills, up to
  ``64 x 2048`` tokens, are most of the run time);
* **mixed**: the same decoders plus one new prompt of ``N`` tokens joining
  each step.

Every shape is warmed up, then run ``--reps`` times in each of ``--rounds``
passes over the design (so that a busy spell of the machine's other jobs
does not fall on every repeat of a shape); one fitted point
(:class:`fairq.sim.fit.Step`) per shape: the median of its repeats within
:data:`FAST` x its fastest. :func:`fairq.sim.fit.fit_report` fits the linear
and the roofline model and states their two-fold held-out error.
``--json``/``--md``/``--plot`` write the results (``docs/results/step_fit.*``:
``docs/results/regenerate.sh step-fit``); ``--from-json FILE`` refits and
rewrites them from a previous ``--json`` without vLLM.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fairq.sim.fit import Step, fit_report
from fairq.sim.model import attn_pairs

__all__ = ["Point", "design", "measure", "points_to_steps", "report", "main"]

#: The cached prefix of the "prefill with a cached prefix" points.
PREFIX = 1024
#: Decode groups: batch sizes x contexts with B x C at most this many tokens
#: (default: all of 1..64 x 64..2048).
MAX_DECODE_KV = 131072


@dataclass(frozen=True)
class Point:
    """One design point: ``kind`` prefill (``n`` new tokens after a cached
    ``prefix``), decode (``batch`` requests at context ``context``) or mixed
    (the decoders plus one ``n``-token prompt)."""

    kind: str
    n: int = 0
    prefix: int = 0
    batch: int = 0
    context: int = 0

    @property
    def label(self) -> str:
        if self.kind == "prefill":
            return f"prefill {self.n}" + (f" after {self.prefix} cached" if self.prefix else "")
        if self.kind == "decode":
            return f"decode {self.batch} x {self.context}"
        return f"mixed {self.batch} x {self.context} + prefill {self.n}"

    def shape(self) -> tuple[int, int, int, int]:
        """The nominal (prefill tokens, decodes, KV tokens read, attention
        pairs) of the point's steps (a decode's context grows a token a step:
        the measured shape is recorded, this one is for planning and tests)."""
        pre = self.n if self.kind != "decode" else 0
        pairs = attn_pairs(self.prefix, pre) if pre else 0
        return pre, self.batch, self.batch * self.context, pairs


def design(quick: bool = False, max_decode_kv: int = MAX_DECODE_KV) -> list[Point]:
    """The measured shapes, in measurement order (see the module doc);
    ``quick``: a handful of small ones (for a smoke test)."""
    if quick:
        return [
            Point("prefill", n=32),
            Point("prefill", n=128),
            Point("prefill", n=64, prefix=128),
            Point("decode", batch=1, context=64),
            Point("decode", batch=4, context=64),
            Point("mixed", batch=4, context=64, n=32),
        ]
    pts = [Point("prefill", n=n) for n in (32, 64, 128, 256, 512, 1024, 2048)]
    pts += [Point("prefill", n=n, prefix=PREFIX) for n in (32, 128, 512, 1024)]
    mixed = {(4, 256), (16, 1024), (64, 2048)}
    for b in (1, 4, 16, 64):
        for c in (64, 256, 1024, 2048):
            if b * c > max_decode_kv:
                continue
            pts.append(Point("decode", batch=b, context=c))
            if (b, c) in mixed:
                pts += [Point("mixed", batch=b, context=c, n=n) for n in (64, 512)]
    return pts


@dataclass
class StepRecord:
    """One engine step as vLLM's scheduler planned it, and its wall time."""

    label: str | None
    prefill_tokens: int
    batch_size: int
    kv_tokens_read: int
    attn_pairs: int
    seconds: float
    #: CPU time of this process (all its threads) over the step
    cpu_seconds: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "prefill_tokens": self.prefill_tokens,
            "batch_size": self.batch_size,
            "kv_tokens_read": self.kv_tokens_read,
            "attn_pairs": self.attn_pairs,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
        }


class _Recorder:
    """Wraps the engine core's ``step_fn`` (timed) and its scheduler's
    ``schedule`` (the step's shape from its output)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.records: list[StepRecord] = []
        self.label: str | None = None
        self._shape: tuple[int, int, int, int] = (0, 0, 0, 0)
        sched = core.scheduler
        schedule = sched.schedule
        step_fn = core.step_fn

        def timed_schedule(*a: Any, **kw: Any) -> Any:
            out = schedule(*a, **kw)
            pre = dec = kv = pairs = 0
            for rid, n in out.num_scheduled_tokens.items():
                req = sched.requests[rid]
                start = req.num_computed_tokens - n  # vLLM advanced it already
                if start < req.num_prompt_tokens:
                    pre += n
                    pairs += attn_pairs(start, n)
                else:
                    dec += 1
                    kv += start + n
            self._shape = (pre, dec, kv, pairs)
            return out

        def timed_step(*a: Any, **kw: Any) -> Any:
            self._shape = (0, 0, 0, 0)
            c = time.process_time()
            t = time.perf_counter()
            out = step_fn(*a, **kw)
            dt = time.perf_counter() - t
            cpu = time.process_time() - c
            if self._shape != (0, 0, 0, 0):
                self.records.append(StepRecord(self.label, *self._shape, dt, cpu))
            return out

        sched.schedule = timed_schedule
        core.step_fn = timed_step


class _Driver:
    """Adds requests of random tokens to an ``LLMEngine`` and steps it."""

    def __init__(self, engine: Any, vocab: int, seed: int, sampling: Any = None) -> None:
        if sampling is None:
            from vllm import SamplingParams as sampling

        self.engine = engine
        self.core = engine.engine_core.engine_core
        self.rec = _Recorder(self.core)
        self.rng = random.Random(seed)
        self.vocab = vocab
        self.sampling = sampling
        self._next = 0

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(3, self.vocab) for _ in range(n)]

    def add(self, prompt: list[int], max_tokens: int) -> str:
        self._next += 1
        params = self.sampling(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        rid: str = self.engine.add_request(f"s{self._next}", {"prompt_token_ids": prompt}, params)
        return rid

    def step(self, label: str | None = None) -> StepRecord | None:
        self.rec.label = label
        before = len(self.rec.records)
        self.engine.step()
        self.rec.label = None
        return self.rec.records[-1] if len(self.rec.records) > before else None

    def drain(self) -> None:
        while self.engine.has_unfinished_requests():
            self.step()

    # -- the design's shapes ---------------------------------------------------
    def prefill(self, p: Point, reps: int, warmup: int) -> None:
        prefix = self.tokens(p.prefix)
        if p.prefix:  # put the prefix in the cache
            self.add(prefix + self.tokens(1), 1)
            self.drain()
        for r in range(warmup + reps):
            self.add(prefix + self.tokens(p.n), 1)
            self.step(p.label if r >= warmup else None)
            self.drain()

    def decode(self, p: Point, mixed: Sequence[Point], reps: int, warmup: int) -> None:
        # enough tokens for the steps below and for the prefill steps of the
        # last decoders (chunked: the first ones decode meanwhile); aborted
        # once measured
        steps = warmup + reps + len(mixed) * (warmup + reps) + p.batch * p.context // 64 + 16
        ids = [self.add(self.tokens(p.context), steps) for _ in range(p.batch)]
        while True:  # prefill the decoders (chunked), then they all decode
            rec = self.step()
            if rec is None:
                raise RuntimeError(f"{p.label}: the engine stopped before decoding")
            if rec.prefill_tokens == 0 and rec.batch_size == p.batch:
                break
        for r in range(warmup - 1 + reps):
            self.step(p.label if r >= warmup - 1 else None)
        for m in mixed:
            for r in range(warmup + reps):
                self.add(self.tokens(m.n), 1)
                self.step(m.label if r >= warmup else None)
        self.engine.abort_request(ids, internal=True)
        self.drain()


def _engine(
    size: str,
    max_num_seqs: int,
    max_batched: int,
    max_model_len: int,
    eager: bool,
    seed: int,
    folder: str,
    executor: str = "uni",
) -> tuple[Any, dict[str, Any]]:
    from fairq.enginebench.server import MODEL_SIZES, engine_env, write_model

    os.environ.update(engine_env())
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    model = write_model(folder, size)
    args = EngineArgs(
        model=model,
        load_format="dummy",
        max_model_len=max_model_len,
        enable_prefix_caching=True,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        enforce_eager=eager,
        seed=seed,
        disable_log_stats=True,
        distributed_executor_backend=executor,
    )
    engine = LLMEngine.from_engine_args(args)
    cfg: Any = engine.vllm_config
    blocks = int(cfg.cache_config.num_gpu_blocks or 0)
    block = int(cfg.cache_config.block_size)
    info = {
        "model": size,
        "model_shape": MODEL_SIZES[size],
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_batched,
        "max_model_len": max_model_len,
        "enforce_eager": eager,
        "executor": executor,
        "block_size": block,
        "num_kv_blocks": blocks,
        "kv_capacity_tokens": blocks * block,
        "dtype": str(cfg.model_config.dtype),
        "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
        "environment": engine_env(),
    }
    return engine, info


def machine() -> dict[str, Any]:
    """What ran the measurement: CPU, cores, load, library versions."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        out["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    for mod in ("vllm", "torch"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    try:
        import torch

        out["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return out


def run_design(drv: _Driver, pts: Sequence[Point], reps: int, t0: float | None = None) -> None:
    """Run every point of ``pts`` ``reps`` times after warming it up (a
    mixed point runs with its decode point); progress on standard error
    when ``t0`` (a ``perf_counter`` start) is given."""
    for p in pts:
        if p.kind == "prefill":
            drv.prefill(p, reps, 1)
        elif p.kind == "decode":
            mixed = [
                m for m in pts if m.kind == "mixed" and (m.batch, m.context) == (p.batch, p.context)
            ]
            drv.decode(p, mixed, reps, 2)
        else:
            continue
        if t0 is not None:
            print(f"  {p.label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the design on vLLM; the raw steps, the points and the engine's
    configuration (JSON-ready)."""
    folder = tempfile.mkdtemp(prefix="fairq-stepfit-")
    load_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    engine, info = _engine(
        args.model,
        args.max_num_seqs,
        args.max_num_batched_tokens,
        args.max_model_len,
        args.eager,
        args.seed,
        f"{folder}/model",
        args.executor,
    )
    startup = time.perf_counter() - t0
    from fairq.enginebench.server import MODEL_SIZES

    drv = _Driver(engine, MODEL_SIZES[args.model]["vocab_size"], args.seed)
    pts = design(args.quick, args.max_decode_kv)
    t1 = time.perf_counter()
    # warm-up: the largest prefill and a decode batch (compiles, allocates)
    drv.prefill(Point("prefill", n=min(2048, args.max_num_batched_tokens)), 0, 1)
    drv.decode(Point("decode", batch=4, context=64), [], 0, 2)
    warm = time.perf_counter() - t1
    for i in range(args.rounds):
        print(f"round {i + 1} of {args.rounds}", file=sys.stderr, flush=True)
        run_design(drv, pts, args.reps, t1)
    total = time.perf_counter() - t1
    return {
        "engine": info,
        "machine": {**machine(), "load_avg_start": load_start},
        "startup_s": startup,
        "warmup_s": warm,
        "measure_s": total,
        "reps": args.reps * args.rounds,
        "rounds": args.rounds,
        "design": [p.label for p in pts],
        "steps": [r.as_dict() for r in drv.rec.records],
    }


#: A repeat is *fast* when it takes at most this many times the point's
#: fastest repeat; the others lost the CPU to other jobs on a shared machine
#: (at ``nice 19`` a step waits a whole time slice, ~100 ms, for its turn).
FAST = 1.5


def fast(seconds: Sequence[float]) -> list[float]:
    """The repeats within :data:`FAST` of the fastest one."""
    lo = min(seconds)
    return [t for t in seconds if t <= FAST * lo]


def points_to_steps(records: Sequence[dict[str, Any]], order: Sequence[str]) -> list[Step]:
    """One :class:`Step` per design label, in ``order``: the median wall
    time of its :func:`fast` repeats, and the mean shape of all its repeats
    (a decode's context grows by one a step)."""
    out = []
    for label in order:
        group = [r for r in records if r["label"] == label]
        if not group:
            continue

        def mean(key: str, g: list[dict[str, Any]] = group) -> int:
            return round(statistics.fmean(r[key] for r in g))

        out.append(
            Step(
                mean("prefill_tokens"),
                mean("batch_size"),
                mean("kv_tokens_read"),
                mean("attn_pairs"),
                statistics.median(fast([r["seconds"] for r in group])),
                label,
            )
        )
    return out


def _limits(info: dict[str, Any]) -> dict[str, int]:
    return {
        "kv_capacity": int(info["kv_capacity_tokens"]),
        "prefill_budget": int(info["max_num_batched_tokens"]),
        "max_running": int(info["max_num_seqs"]),
    }


def report(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (from :func:`measure`) with the points and both fits added."""
    steps = points_to_steps(data["steps"], data["design"])
    data = dict(data)
    data["points"] = [s.as_dict() for s in steps]
    for p in data["points"]:
        group = [r for r in data["steps"] if r["label"] == p["label"]]
        p["fast_repeats"] = len(fast([r["seconds"] for r in group]))
        p["repeats"] = len(group)
    data["fit"] = fit_report(steps)
    data["preset"] = {
        form: {**data["fit"][form]["constants"], **_limits(data["engine"])}
        | ({"roofline": 1} if form == "roofline" else {})
        for form in ("linear", "roofline")
    }
    return data


def _ms(x: float) -> str:
    return f"{1e3 * x:.2f}"


def _const(name: str, v: float) -> str:
    if name in ("c0", "c_weights"):
        return f"{1e3 * v:.3f} ms"
    if name in ("c_prefill", "c_decode"):
        return f"{1e6 * v:.3f} us"
    return f"{1e9 * v:.4f} ns"


def _shape(shape: dict[str, int]) -> str:
    if not shape:
        return "?"
    return (
        f"hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, "
        f"{shape['num_attention_heads']} heads ({shape['num_key_value_heads']} KV), "
        f"vocabulary {shape['vocab_size']}"
    )


def markdown(data: dict[str, Any]) -> str:
    """The results page (``docs/results/step_fit.md``)."""
    eng, mach, fit = data["engine"], data["machine"], data["fit"]
    lines = [
        "# The step-time model fitted to vLLM (CPU)",
        "",
        "Regenerate: `docs/results/regenerate.sh step-fit` "
        "(`python/fairq/enginebench/stepfit.py`):",
        "",
        "```bash",
        data.get("command", ""),
        "```",
        "",
        f"**Engine**: vLLM {mach.get('vllm')} (V1 `LLMEngine`, its engine core in this "
        f"process, executor `{eng.get('executor')}`), torch {mach.get('torch')}, "
        f"random-weight Llama `{eng['model']}` ({_shape(eng['model_shape'])}, {eng['dtype']}, "
        f"`--load-format dummy`), block size {eng['block_size']}, "
        f"{eng['kv_capacity_tokens']:,} KV tokens, max_num_seqs {eng['max_num_seqs']}, "
        f"max_num_batched_tokens {eng['max_num_batched_tokens']}, enforce_eager "
        f"{eng['enforce_eager']}, prefix caching on.",
        "",
        f"**Machine**: {mach.get('cpu')}, {mach.get('cores')} cores, "
        f"load average {mach.get('load_avg_start')} at the start, "
        f"{mach.get('load_avg')} at the end (1, 5, 15 min).",
        "",
        f"**Time**: engine start {data['startup_s']:.0f} s, warm-up {data['warmup_s']:.0f} s, "
        f"design {data['measure_s']:.0f} s ({len(data['steps'])} steps recorded, "
        f"{len(data['points'])} points, {data['reps']} repeats each "
        f"in {data.get('rounds', 1)} rounds).",
        "",
        "Each point is one engine-core step (schedule + forward + sample + update) of a "
        "controlled shape, its shape read from vLLM's scheduler output; the wall time is the "
        "median of its *fast* repeats, those within "
        f"{FAST} x its fastest (the others lost the CPU to other jobs on this shared "
        "machine; the design runs in rounds so that a busy spell does not fall on every "
        "repeat of a point). The fit is non-negative least squares of the relative error. "
        "*Held out*: the points split into two interleaved halves, each half fitted and "
        "evaluated on the other (pooled).",
        "",
        "## Fit",
        "",
        "| model | c0 | c_weights | c_prefill | c_decode | c_kv | c_attn "
        "| held-out APE median / p90 / max % | in-sample median / p90 % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for form in ("linear", "roofline"):
        c, h, i = fit[form]["constants"], fit[form]["held_out"], fit[form]["in_sample"]
        cells = [
            _const(k, c[k]) if k in c else "-"
            for k in ("c0", "c_weights", "c_prefill", "c_decode", "c_kv", "c_attn")
        ]
        lines.append(
            f"| {form} | {' | '.join(cells)} | {h['median_ape']:.1f} / {h['p90_ape']:.1f} / "
            f"{h['max_ape']:.1f} | {i['median_ape']:.1f} / {i['p90_ape']:.1f} |"
        )
    lines += [
        "",
        "## Measured vs fitted",
        "",
        "| point | prefill tok | decodes | KV read | attn pairs | fast repeats | measured ms "
        "| linear ms | roofline ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lin, roof = fit["linear"]["predicted_s"], fit["roofline"]["predicted_s"]
    for p, a, b in zip(data["points"], lin, roof, strict=True):
        lines.append(
            f"| {p['label']} | {p['prefill_tokens']} | {p['batch_size']} "
            f"| {p['kv_tokens_read']} | {p['attn_pairs']} "
            f"| {p.get('fast_repeats', '?')}/{p.get('repeats', '?')} | {_ms(p['seconds'])} "
            f"| {_ms(a)} | {_ms(b)} |"
        )
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: str) -> None:
    """Measured vs predicted step time, both forms, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meas = [1e3 * p["seconds"] for p in data["points"]]
    kinds = [p["label"].split()[0] for p in data["points"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
    lo, hi = min(meas) / 1.5, max(meas) * 1.5
    marks = {"prefill": "o", "decode": "s", "mixed": "^"}
    for ax, form in zip(axes, ("linear", "roofline"), strict=True):
        pred = [1e3 * x for x in data["fit"][form]["predicted_s"]]
        for kind, mark in marks.items():
            xs = [m for m, k in zip(meas, kinds, strict=True) if k == kind]
            ys = [p for p, k in zip(pred, kinds, strict=True) if k == kind]
            ax.scatter(xs, ys, marker=mark, label=kind, alpha=0.8)
        ax.plot([lo, hi], [lo, hi], color="gray", lw=1)
        h = data["fit"][form]["held_out"]
        ax.set_title(
            f"{form}: held-out APE median {h['median_ape']:.1f} %, p90 {h['p90_ape']:.1f} %",
            fontsize=10,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured step (ms)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("model's step (ms)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"vLLM {data['machine'].get('vllm')} on CPU, model {data['engine']['model']}: "
        "step time, measured vs fitted"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary(data: dict[str, Any]) -> Iterator[str]:
    """Lines for the terminal: both fits and the PRESETS entries."""
    for form in ("linear", "roofline"):
        f = data["fit"][form]
        h = f["held_out"]
        yield (
            f"{form}: held-out APE median {h['median_ape']:.1f} %, p90 {h['p90_ape']:.1f} %, "
            f"max {h['max_ape']:.1f} %; in-sample median {f['in_sample']['median_ape']:.1f} %"
        )
        yield "  " + ", ".join(f"{k}={v:.4g}" for k, v in data["preset"][form].items())


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fairq.cliargs import count, output_file, plot_file

    p.add_argument(
        "--model",
        choices=("tiny", "small"),
        default="tiny",
        help="random-weight Llama size (fairq.enginebench.server.MODEL_SIZES)",
    )
    p.add_argument("--reps", type=count(1), default=5, help="repeats per shape and round")
    p.add_argument(
        "--rounds", type=count(1), default=3, help="passes over the whole design (default 3)"
    )
    p.add_argument("--max-num-seqs", type=count(1), default=128)
    p.add_argument("--max-num-batched-tokens", type=count(64), default=4096)
    p.add_argument("--max-model-len", type=count(64), default=4096)
    p.add_argument(
        "--max-decode-kv",
        type=count(1),
        default=MAX_DECODE_KV,
        help="decode groups with batch x context up to this many tokens",
    )
    p.add_argument(
        "--executor",
        choices=("mp", "uni"),
        default="uni",
        help="uni: the model runs in this process (default); mp: in a worker process, as "
        "in vLLM's server on CPU (about 1.2 ms more per step here, and noisier: two "
        "processes to schedule on a shared machine)",
    )
    p.add_argument("--eager", action="store_true", help="vLLM's enforce_eager (no compile)")
    p.add_argument("--quick", action="store_true", help="a few small shapes (smoke test)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="refit a previous --json's steps (no vLLM needed)",
    )
    p.add_argument("--json", type=output_file, default=None, help="write the results (JSON)")
    p.add_argument("--md", type=output_file, default=None, help="write the results page")
    p.add_argument("--plot", type=plot_file, default=None, help="measured vs fitted (PNG)")


def run(args: argparse.Namespace) -> int:
    import json

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
    else:
        data = measure(args)
        data["command"] = "python -m fairq.enginebench.stepfit " + " ".join(sys.argv[1:])
    data = report(data)
    for line in summary(data):
        print(line)
    if args.json == "-":
        print(json.dumps(data, indent=1))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(data))
    if args.plot:
        plot(data, args.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from fairq.cli import usage_error
    from fairq.cliargs import UsageError

    parser = argparse.ArgumentParser(
        prog="python -m fairq.enginebench.stepfit", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
        return run(args)
    except UsageError as e:
        return usage_error(parser.prog, e)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
