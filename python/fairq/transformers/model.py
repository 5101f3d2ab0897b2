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
    "page_size_field",
]

#: The transformers versions fairq's scheduler classes are tested with.
SUPPORTED_TRANSFORMERS = ">=5.17,<5.24"

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
