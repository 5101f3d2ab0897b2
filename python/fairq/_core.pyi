"""Type stubs for the Rust extension ``fairq._core``.

Each section belongs to one core module (rust/python/<name>.rs).
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

TokenIds = Sequence[int] | npt.NDArray[np.integer[Any]] | bytes | bytearray

class QueueFull(RuntimeError):
    """A push would exceed a per-class limit; nothing was enqueued.

    ``args`` is ``(message, class_name, limit, current, max)`` where ``limit`` is
    ``"max_queued_requests"`` or ``"max_queued_tokens"``.
    """

# --- tokens ---------------------------------------------------------------
def as_tokens(tokens: TokenIds, field: str = "tokens") -> list[int]: ...

# --- vllm (rust/python/vllm.rs) --------------------------------------------

# --- drr (rust/python/drr.rs) ----------------------------------------------

# --- wfq (rust/python/wfq.rs) ----------------------------------------------

# --- dualphase (rust/python/dualphase.rs) ----------------------------------

# --- radix (rust/python/radix.rs) ------------------------------------------

Namespace = str | int | None

class RadixTree:
    """Token radix tree modelling an engine's prefix (KV) cache."""

    def __init__(self, capacity: int | None = None, page_size: int = 1) -> None: ...
    def match(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def insert(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def lock(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def unlock(self, tokens: TokenIds, namespace: Namespace = None) -> None: ...
    def evict(self, n_tokens: int) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def evictable_size(self) -> int: ...
    @property
    def capacity(self) -> int | None: ...
    @property
    def page_size(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    def __len__(self) -> int: ...
    def _check(self) -> None: ...


# --- sched (rust/python/sched.rs) ------------------------------------------

# --- dispatch (rust/python/dispatch.rs) ------------------------------------
