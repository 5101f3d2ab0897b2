"""The engine's model and configuration for tests and benches: a Llama-style
model of a named size (:data:`MODEL_SIZES`) with random weights, built from a
config (nothing is downloaded), and the checks of transformers'
continuous-batching configuration that would otherwise fail silently."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "MODEL_SIZES",
    "SUPPORTED_TRANSFORMERS",
    "build_model",
    "check_scheduler_type",
    "greedy_manager",
    "page_size_field",
]

#: The transformers versions fairq's scheduler classes are tested with.
SUPPORTED_TRANSFORMERS = ">=5.17,<5.24"

#: The fields of a model size, in the order of :data:`MODEL_SIZES`' rows.
_SHAPE_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)

#: ``LlamaConfig`` shape fields by size name.
MODEL_SIZES: dict[str, dict[str, int]] = {
    name: dict(zip(_SHAPE_FIELDS, row, strict=True))
    for name, row in {
        # vocab, hidden, intermediate, layers, attention heads, key/value heads
        "tiny": (256, 64, 128, 2, 4, 2),  # ~0.1M parameters: CPU tests and smoke runs
        "small": (4096, 512, 1408, 4, 8, 4),  # ~16M: a CPU bench where compute is not negligible
        "1b": (32000, 2048, 8192, 16, 32, 8),  # ~1.1B, Llama-3.2-1B-like shapes: GPU runs
    }.items()
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


def greedy_manager(
    model: Any,
    scheduler_type: str,
    max_new_tokens: int,
    *,
    page_size: int,
    num_blocks: int,
    max_batch_tokens: int,
    max_requests_per_batch: int,
) -> Any:
    """A continuous-batching manager of ``model`` (not started) with
    ``scheduler_type`` and these cache and batch limits, block sharing on,
    synchronous batching and greedy decoding with EOS disabled: every request
    generates exactly the ``max_new_tokens`` it is added with (at most this
    ``max_new_tokens``). ``scheduler_type`` is not checked here (see
    :func:`check_scheduler_type`)."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    options: dict[str, Any] = {
        page_size_field(): page_size,
        "num_blocks": num_blocks,
        "max_batch_tokens": max_batch_tokens,
        "max_requests_per_batch": max_requests_per_batch,
        "allow_block_sharing": True,
        "use_async_batching": False,
        "scheduler_type": scheduler_type,
    }
    cb_config = ContinuousBatchingConfig(**options)
    gen_config = GenerationConfig(
        do_sample=False, eos_token_id=-1, pad_token_id=0, max_new_tokens=max_new_tokens
    )
    return model.init_continuous_batching(
        generation_config=gen_config, continuous_batching_config=cb_config
    )


def check_scheduler_type(name: str) -> str:
    """Refuse names transformers would silently replace by FIFO: names not in
    transformers' ``SCHEDULER_MAPPING`` (fairq's scheduler module registers
    its classes there when imported)."""
    from transformers.generation.continuous_batching.scheduler import SCHEDULER_MAPPING

    if name not in SCHEDULER_MAPPING:
        raise ValueError(
            f"scheduler_type {name!r} is not registered in transformers' SCHEDULER_MAPPING "
            f"(known: {', '.join(sorted(SCHEDULER_MAPPING))}); transformers would fall back to FIFO"
        )
    return name
