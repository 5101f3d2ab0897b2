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

# --- sched (rust/python/sched.rs) ------------------------------------------

# --- dispatch (rust/python/dispatch.rs) ------------------------------------

class Dispatcher:
    """Base of every dispatcher (not constructible)."""

    def dispatch(self, request_id: int | str, client: str, tokens: TokenIds) -> int: ...
    def on_finish(self, request_id: int | str, output_tokens: int) -> int: ...
    def on_evict(self, worker: int, tokens: TokenIds, kept: int = 0) -> int: ...
    def worker_of(self, request_id: int | str) -> int: ...
    def longest_match(self, tokens: TokenIds) -> tuple[int, list[int]]: ...
    def held_len(self, worker: int, tokens: TokenIds) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def queue_sizes(self) -> list[int]: ...
    @property
    def dispatched_counts(self) -> list[int]: ...
    @property
    def tree_nodes(self) -> int: ...
    @property
    def policy(self) -> str: ...
    def clients(self) -> list[str]: ...
    def __contains__(self, request_id: int | str) -> bool: ...
    def __len__(self) -> int: ...

class D2LPM(Dispatcher):
    def __init__(
        self, num_workers: int, worker_quantum: float, w_e: float = 1.0, w_q: float = 2.0
    ) -> None: ...
    def deficit(self, client: str, worker: int) -> float: ...
    @property
    def worker_quantum(self) -> float: ...
    @property
    def w_e(self) -> float: ...
    @property
    def w_q(self) -> float: ...

class RoundRobin(Dispatcher):
    def __init__(self, num_workers: int) -> None: ...

class LeastLoaded(Dispatcher):
    def __init__(self, num_workers: int) -> None: ...

class ClientRoundRobin(Dispatcher):
    def __init__(self, num_workers: int) -> None: ...

class PrefixAffinity(Dispatcher):
    def __init__(
        self,
        num_workers: int,
        abs_threshold: float = 32.0,
        rel_threshold: float = 1.5,
        match_threshold: float = 0.5,
    ) -> None: ...
    @property
    def thresholds(self) -> tuple[float, float, float]: ...
