"""Drive a real vLLM scheduler without a model (tests and ``engine-bench``).

vLLM's own scheduler tests do the same: build a ``Scheduler`` (or
``AsyncScheduler``) from a ``VllmConfig`` whose model is a local
``config.json`` (no hub, no weights), add ``Request`` objects, and alternate
``schedule()`` with ``update_from_output()`` fed a ``ModelRunnerOutput`` the
caller builds: one sampled token for every request whose scheduled tokens
complete its sequence, none for a partial prefill chunk. Everything between
(admission, prefix caching, chunked prefill, preemption, block allocation,
finishing) is vLLM's real code.

Needs vLLM (tested with the 0.33 series) and torch; importing this module
imports them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

if not torch.cuda.is_available():
    # vLLM's wheels are built for CUDA; on a CPU-only machine its platform
    # must be named (nothing here runs a kernel).
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

__all__ = [
    "TINY_LLAMA",
    "model_dir",
    "build_scheduler",
    "make_request",
    "model_output",
    "step",
    "Replay",
    "replay",
]

#: A small Llama-style config: only its shape is read (no weights exist).
TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float16",
}

EOS = 2
_hash_ready = False


def model_dir(config: dict[str, Any] | None = None) -> str:
    """A folder holding ``config.json`` (default :data:`TINY_LLAMA`)."""
    d = tempfile.mkdtemp(prefix="fairq-vllm-model-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config or TINY_LLAMA, f)
    return d


def build_scheduler(
    scheduler_cls: type,
    *,
    num_blocks: int = 2048,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 64,
    max_model_len: int = 8192,
    enable_prefix_caching: bool = True,
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs",
    async_scheduling: bool = False,
    model: str | None = None,
) -> Any:
    """A ``scheduler_cls`` (vLLM's or fairq's) over ``num_blocks`` KV blocks."""
    model_config = ModelConfig(
        model=model or model_dir(),
        dtype="float16",
        seed=0,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
        watermark=0.0,
        policy=scheduling_policy,
    )
    cache_config = CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=enable_prefix_caching,
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
    )
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    cache_config.num_gpu_blocks = num_blocks
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


def make_request(
    request_id: str,
    prompt: Sequence[int],
    max_tokens: int,
    *,
    block_size: int = 16,
    tenant: str | None = None,
    priority: int = 0,
    arrival_time: float | None = None,
) -> Request:
    """A vLLM ``Request`` that generates exactly ``max_tokens`` tokens."""
    global _hash_ready
    if not _hash_ready:
        init_none_hash(sha256)
        _hash_ready = True
    params = SamplingParams(
        max_tokens=max_tokens,
        ignore_eos=True,
        extra_args={"tenant": tenant} if tenant is not None else None,
    )
    params.update_from_generation_config({}, EOS)
    return Request(
        request_id=request_id,
        prompt_token_ids=list(prompt),
        sampling_params=params,
        pooling_params=None,
        block_hasher=get_request_block_hasher(block_size, sha256),
        priority=priority,
        arrival_time=arrival_time,
    )


def model_output(
    scheduler: Any, out: Any, token: int = 7, tokens: Callable[[Any], int] | None = None
) -> ModelRunnerOutput:
    """What a model runner returns for ``out`` (a ``SchedulerOutput``): one
    sampled token per request whose scheduled tokens complete its sequence,
    nothing for a partial prefill chunk. The token: ``tokens(request)`` (the
    vLLM ``Request`` before it grows) when given, else ``token``."""
    req_ids = list(out.num_scheduled_tokens)
    sampled: list[list[int]] = []
    for rid in req_ids:
        r = scheduler.requests[rid]
        if getattr(r, "is_prefill_chunk", False):
            sampled.append([])
        else:
            sampled.append([token if tokens is None else int(tokens(r))])
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def step(scheduler: Any, token: int = 7) -> tuple[Any, dict[int, Any]]:
    """One engine step: ``schedule()``, then ``update_from_output()`` with
    :func:`model_output`. Returns the ``SchedulerOutput`` and vLLM's
    engine-core outputs."""
    out = scheduler.schedule()
    return out, scheduler.update_from_output(out, model_output(scheduler, out, token))


class Replay:
    """What :func:`replay` measured (simulated seconds from the step model)."""

    def __init__(self) -> None:
        self.arrival: dict[str, float] = {}
        self.first_token: dict[str, float] = {}
        self.finish: dict[str, float] = {}
        self.finished_count: dict[str, int] = {}
        self.tenant: dict[str, str] = {}
        self.steps = 0
        self.clock = 0.0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.output_tokens = 0
        self.prompt_tokens = 0
        #: per step: (clock, {tenant: service}, {tenant: waiting count},
        #: {tenant: VTC's cost: every prompt token, cached or not, + w_q * output})
        self.timeline: list[tuple[float, dict[str, float], dict[str, int], dict[str, float]]] = []
        #: wall seconds inside schedule() / update_from_output()
        self.schedule_s = 0.0
        self.update_s = 0.0
        #: per request, the clock at each of its output tokens (only with
        #: ``replay(..., token_times=True)``)
        self.token_times: dict[str, list[float]] = {}
        #: the ``on_step`` hook's value after every step (when given)
        self.step_info: list[Any] = []

    @property
    def hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0


def replay(
    scheduler: Any,
    workload: Sequence[Any],
    step_model: Any,
    *,
    block_size: int = 16,
    max_steps: int = 100_000,
    w_e: float = 1.0,
    w_q: float = 2.0,
    tokens: Callable[[Any], int] | None = None,
    token_times: bool = False,
    on_step: Callable[[Any, Any], Any] | None = None,
) -> Replay:
    """Run ``workload`` (``EngineRequest``s: ``request_id``, ``client``,
    ``arrival``, ``prompt``, ``max_new_tokens``) through ``scheduler`` to
    the end. Time advances by ``step_model.step_time(prefill tokens, decode
    batch, KV tokens read)`` per step (the simulator's model: on CPU there is
    no forward pass to time).

    Service is measured from what vLLM scheduled, whatever the policy:
    ``w_e`` per prompt position computed for the first time (prefix-cache
    hits are not computed; recomputation after a preemption is not counted
    again) and ``w_q`` per output token; ``timeline`` holds, after every step, the
    clock, each tenant's cumulative service and its waiting requests.

    ``tokens``: the token each request samples (:func:`model_output`; e.g.
    an end-of-think id at a chosen position). ``token_times``: record the
    clock of every output token (:attr:`Replay.token_times`). ``on_step``:
    called as ``on_step(scheduler, scheduler_output)`` after each step; its
    values go to :attr:`Replay.step_info`."""
    import time

    rep = Replay()
    pending = sorted(workload, key=lambda r: r.arrival)
    by_id = {r.request_id: r for r in pending}
    tenants = sorted({r.client for r in pending})
    served: dict[str, float] = dict.fromkeys(tenants, 0.0)
    cost: dict[str, float] = dict.fromkeys(tenants, 0.0)
    high: dict[str, int] = {}  # prompt positions computed once (preemption recomputes)
    i = 0
    while i < len(pending) or scheduler.has_requests():
        if rep.steps >= max_steps:
            raise RuntimeError(f"replay: not done after {max_steps} steps")
        if not scheduler.has_requests() and i < len(pending):
            rep.clock = max(rep.clock, pending[i].arrival)
        while i < len(pending) and pending[i].arrival <= rep.clock:
            r = pending[i]
            scheduler.add_request(
                make_request(
                    r.request_id, r.prompt, r.max_new_tokens, block_size=block_size, tenant=r.client
                )
            )
            rep.arrival[r.request_id] = rep.clock
            rep.tenant[r.request_id] = r.client
            rep.prompt_tokens += len(r.prompt)
            i += 1
        t0 = time.perf_counter()
        out = scheduler.schedule()
        t1 = time.perf_counter()
        prefill = decode = kv = 0
        for rid, n in out.num_scheduled_tokens.items():
            r = scheduler.requests[rid]
            before = r.num_computed_tokens - n
            if before < r.num_prompt_tokens:
                prefill += n
                if rid not in high:
                    cost[rep.tenant[rid]] += w_e * r.num_prompt_tokens
                    high[rid] = 0
                end = min(before + n, r.num_prompt_tokens)
                first = end - max(before, high.get(rid, 0))
                if first > 0:
                    served[rep.tenant[rid]] += w_e * first
                    high[rid] = end
            else:
                decode += 1
                kv += r.num_computed_tokens
        mro = model_output(scheduler, out, tokens=tokens)
        rep.clock += step_model.step_time(prefill, decode, kv)
        t2 = time.perf_counter()
        eco = scheduler.update_from_output(out, mro)
        t3 = time.perf_counter()
        rep.schedule_s += t1 - t0
        rep.update_s += t3 - t2
        rep.steps += 1
        for o in eco.values():
            stats = getattr(o, "scheduler_stats", None)
            pcs = getattr(stats, "prefix_cache_stats", None)
            if pcs is not None:
                rep.prefix_queries += pcs.queries
                rep.prefix_hits += pcs.hits
            for ro in o.outputs:
                rid = ro.request_id
                if ro.new_token_ids:
                    rep.first_token.setdefault(rid, rep.clock)
                    rep.output_tokens += len(ro.new_token_ids)
                    served[rep.tenant[rid]] += w_q * len(ro.new_token_ids)
                    cost[rep.tenant[rid]] += w_q * len(ro.new_token_ids)
                    if token_times:
                        rep.token_times.setdefault(rid, []).extend(
                            [rep.clock] * len(ro.new_token_ids)
                        )
                if ro.finish_reason is not None:
                    rep.finish[rid] = rep.clock
                    rep.finished_count[rid] = rep.finished_count.get(rid, 0) + 1
        waiting: dict[str, int] = dict.fromkeys(tenants, 0)
        for r in getattr(scheduler, "waiting", []):
            t = rep.tenant.get(r.request_id)
            if t is not None:
                waiting[t] += 1
        rep.timeline.append((rep.clock, dict(served), waiting, dict(cost)))
        if on_step is not None:
            rep.step_info.append(on_step(scheduler, out))
    missing = [rid for rid in by_id if rid not in rep.finish]
    if missing:
        raise RuntimeError(f"replay: {len(missing)} requests never finished, e.g. {missing[:3]}")
    return rep
