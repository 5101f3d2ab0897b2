"""The engine step-time model and the worker's capacity limits.

One continuous-batching step (one forward pass) takes, in the linear model
(the default, ``roofline = 0``)::

    t = c0 + c_weights + c_prefill * prefill_tokens + c_decode * batch_size
           + c_kv * kv_tokens_read + c_attn * attn_pairs

and in the roofline model (``roofline = 1``: memory traffic and compute
overlap, the step takes the larger of the two)::

    t = c0 + max(c_weights + c_kv * kv_tokens_read,
                 c_prefill * prefill_tokens + c_decode * batch_size + c_attn * attn_pairs)

where ``prefill_tokens`` are the prompt tokens computed in the step (chunked
prefill, at most ``prefill_budget``), ``batch_size`` the requests decoding one
token, ``kv_tokens_read`` the context (prompt + generated) tokens of those
requests, whose KV entries attention reads, and ``attn_pairs`` the (query,
key) pairs prefill attention computes: a chunk of ``n`` tokens starting at
position ``s`` of its prompt adds ``n * s + n * (n + 1) / 2`` (causal), so a
long prompt costs more than linearly. ``c_weights`` is the weight read of one
step (in the linear presets it is folded into ``c0`` and ``c_weights = 0``).

Defaults: a roofline estimate for Llama-3.1-8B (bf16) on one A100-80GB, the
paper's Section 6.2 testbed (not a measurement; the presets ``vllm-cpu-tiny``
and ``vllm-cpu-tiny-roofline`` are fitted to a real engine's measured steps,
:mod:`fairq.enginebench.stepfit`):

- ``c0 = 10 ms``: every step reads the 16 GB of weights at ~2.0 TB/s HBM
  bandwidth (8 ms) plus ~2 ms of launch and scheduling overhead.
- ``c_prefill = 85 us/token``: 2 * 8e9 = 16 GFLOP per token at ~190 TFLOP/s
  (61 % of the A100's 312 TFLOP/s bf16 peak).
- ``c_decode = 85 us/request``: the same 16 GFLOP per decoded token; the
  linear model charges it on top of the weight read (no overlap), which is
  pessimistic for small batches.
- ``c_kv = 65 ns/token``: a token's KV entry is 128 KiB (32 layers x 8 KV
  heads x 128 dims x K and V x 2 bytes), read at 2.0 TB/s.
- ``kv_capacity = 400_000`` tokens: ~52 GB of KV pool (80 GB minus weights,
  activations and fragmentation), 128 KiB per token.
- ``prefill_budget = 8192`` tokens per step: SGLang's chunked-prefill size
  on an A100.
- ``max_running = 256`` requests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

_INT_FIELDS = ("kv_capacity", "prefill_budget", "max_running", "roofline")

#: The step-time constants of the linear fit, in the order of the formula above.
STEP_COSTS = ("c0", "c_prefill", "c_decode", "c_kv")


def step_time(
    costs: Any,
    prefill_tokens: float,
    batch_size: float,
    kv_tokens_read: float,
    attn_pairs: float = 0.0,
) -> float:
    """Seconds one engine step takes under the model above.

    ``costs``: anything with the :data:`STEP_COSTS` attributes (a
    :class:`StepModel`, or a fitted
    :class:`fairq.sim.fit.StepTimeModel`); ``c_weights``,
    ``c_attn`` and ``roofline`` are read when present (else 0).
    """
    c_weights = getattr(costs, "c_weights", 0.0)
    c_attn = getattr(costs, "c_attn", 0.0)
    compute = costs.c_prefill * prefill_tokens + costs.c_decode * batch_size + c_attn * attn_pairs
    memory = c_weights + costs.c_kv * kv_tokens_read
    if getattr(costs, "roofline", 0):
        return costs.c0 + max(memory, compute)
    return costs.c0 + memory + compute


def attn_pairs(start: int, n: int) -> int:
    """Causal (query, key) pairs of a prefill chunk of ``n`` tokens that starts
    at position ``start`` of its prompt (the ``start`` tokens before it are
    cached or computed by earlier chunks)."""
    return n * start + n * (n + 1) // 2


@dataclass(frozen=True)
class StepModel:
    """Step-time constants (seconds) and per-worker limits (tokens)."""

    c0: float = 0.010
    c_prefill: float = 85e-6
    c_decode: float = 85e-6
    c_kv: float = 65e-9
    kv_capacity: int = 400_000
    prefill_budget: int = 8192
    max_running: int = 256
    #: weight read per step (seconds; 0: folded into ``c0``)
    c_weights: float = 0.0
    #: prefill attention per causal (query, key) pair (seconds)
    c_attn: float = 0.0
    #: 1: step = c0 + max(memory, compute); 0: their sum
    roofline: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
                raise ValueError(f"StepModel.{f.name} must be a finite number >= 0, got {v!r}")
        for name in ("kv_capacity", "prefill_budget", "max_running"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"StepModel.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.roofline not in (0, 1):
            raise ValueError(f"StepModel.roofline must be 0 or 1, got {self.roofline!r}")

    def step_time(
        self, prefill_tokens: int, batch_size: int, kv_tokens_read: int, attn_pairs: int = 0
    ) -> float:
        """Seconds one step takes (:func:`step_time`)."""
        return step_time(self, prefill_tokens, batch_size, kv_tokens_read, attn_pairs)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def preset(cls, name: str) -> StepModel:
        """A named hardware preset (see :data:`PRESETS`)."""
        try:
            return cls(**PRESETS[name])  # type: ignore[arg-type]
        except KeyError:
            raise ValueError(
                f"model preset must be one of {', '.join(PRESETS)}; got {name!r}"
            ) from None

    @classmethod
    def from_overrides(cls, items: list[str] | None, base: StepModel | None = None) -> StepModel:
        """Build from ``KEY=VALUE`` strings (the CLI's ``--model``)."""
        kwargs: dict[str, float | int] = {}
        names = {f.name: f.type for f in fields(cls)}
        for item in items or []:
            key, sep, val = item.partition("=")
            key = key.strip()
            if not sep or key not in names:
                raise ValueError(
                    f"--model expects KEY=VALUE with KEY in {', '.join(names)}; got {item!r}"
                )
            try:
                num = float(val)
            except ValueError:
                raise ValueError(f"--model {key}: {val!r} is not a number") from None
            kwargs[key] = int(num) if key in _INT_FIELDS else num
        merged = {**(base or cls()).as_dict(), **kwargs}
        return cls(**merged)  # type: ignore[arg-type]


#: Hardware presets. ``a100-8b`` is the default above (linear). ``a10g-3b``: Llama-3.2-3B
#: (bf16, 6.4 GB of weights) on one A10G (24 GB, 600 GB/s, ~70 TFLOP/s bf16),
#: the testbed of the paper's Figures 1, 8, 9 and 10: c0 = 10.7 ms weight read
#: + ~1.3 ms overhead; 6.4 GFLOP per token at ~42 TFLOP/s (60 %) = 150 us; KV
#: entry 112 KiB (28 layers x 8 KV heads x 128 x 2 x 2 B) read at 600 GB/s =
#: 190 ns; ~14 GB of KV pool = 120k tokens; chunked prefill 4096.
PRESETS: dict[str, dict[str, float]] = {
    "a100-8b": {},
    "a10g-3b": {
        "c0": 0.012,
        "c_prefill": 150e-6,
        "c_decode": 150e-6,
        "c_kv": 190e-9,
        "kv_capacity": 120_000,
        "prefill_budget": 4096,
        "max_running": 256,
    },
    # The paper's testbeds in the roofline model (step = overhead + the larger
    # of memory traffic and compute; attention's quadratic prefill term). A10G:
    # 6.4 GB of weights at 600 GB/s = 10.7 ms, overhead 1.3 ms; attention per
    # causal pair 4 x 28 layers x 3072 = 344 kFLOP at ~42 TFLOP/s = 8.2 ns.
    "a10g-3b-roofline": {
        "c0": 0.0013,
        "c_weights": 0.0107,
        "c_prefill": 150e-6,
        "c_decode": 150e-6,
        "c_kv": 190e-9,
        "c_attn": 8.2e-9,
        "roofline": 1,
        "kv_capacity": 120_000,
        "prefill_budget": 4096,
        "max_running": 256,
    },
    # A100-80GB: 16 GB of weights at 2.0 TB/s = 8 ms, overhead 2 ms; attention
    # per causal pair 4 x 32 layers x 4096 = 524 kFLOP at ~190 TFLOP/s = 2.8 ns.
    "a100-8b-roofline": {
        "c0": 0.002,
        "c_weights": 0.008,
        "c_attn": 2.8e-9,
        "roofline": 1,
    },
    # Measured, not estimated: fitted to vLLM 0.32's step times (CPU build,
    # torch 2.13, executor uni) with the vLLM server bench's random-weight
    # `tiny` Llama (hidden 256, 2 layers, bf16) on this project's 2-core AMD
    # EPYC machine, shared with other jobs (each point is the median of its
    # repeats within 1.5x its fastest): 33 step shapes (prefill 32-2048 tokens
    # with and without a 1024-token cached prefix, decode batch 1-64 at
    # context 64-2048, mixed), 15 repeats each; `python -m
    # fairq.enginebench.stepfit` (fairq.sim.fit: NNLS of the relative error),
    # docs/results/step_fit.md. Two-fold held-out absolute error: linear
    # median 7.6 %, p90 20 % (max 32 %); roofline median 9.6 %, p90 22 % (the
    # roofline finds no weight-read floor, c_weights = 0: this CPU step is
    # overhead + compute). With the model in a worker process as in vLLM's
    # server (--executor mp, step_fit_mp.json): c0 2.2 ms, held-out 14.7 % /
    # 28 %. Limits: the measured engine's (max_num_seqs 128,
    # max_num_batched_tokens 4096, 1 GiB of KV = 1,048,576 tokens); the vLLM
    # server bench runs 8 / 1024 / 20 blocks = 2560 tokens (--model overrides).
    "vllm-cpu-tiny": {
        "c0": 0.0009926,
        "c_prefill": 10.35e-6,
        "c_decode": 40.33e-6,
        "c_kv": 86.05e-9,
        "c_attn": 13.93e-9,
        "kv_capacity": 1_048_576,
        "prefill_budget": 4096,
        "max_running": 128,
    },
    "vllm-cpu-tiny-roofline": {
        "c0": 0.0009909,
        "c_weights": 0.0,
        "c_prefill": 10.84e-6,
        "c_decode": 51.88e-6,
        "c_kv": 120.7e-9,
        "c_attn": 13.61e-9,
        "roofline": 1,
        "kv_capacity": 1_048_576,
        "prefill_budget": 4096,
        "max_running": 128,
    },
}
