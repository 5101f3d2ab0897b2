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

    class_name: str
    limit: str
    current: int
    max: int

# --- tokens ---------------------------------------------------------------
def as_tokens(tokens: TokenIds, field: str = "tokens") -> list[int]: ...

# --- vllm (rust/python/vllm.rs) --------------------------------------------

# --- drr (rust/python/drr.rs) ----------------------------------------------
from collections.abc import Callable, Iterable  # noqa: E402  (kept in this section)

class _DRRCore:
    """Rust core of ``fairq.DRRQueue`` (Deficit Round Robin across policy classes)."""

    def __new__(
        cls,
        specs: Sequence[tuple[str, int, str, int | None, int | None]],
        *args: Any,
        **kwargs: Any,
    ) -> _DRRCore: ...
    def push(
        self,
        item: Any,
        class_name: str,
        cost: int,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int: ...
    def _push_snapshot(
        self,
        item: Any,
        class_name: str,
        raw_isl_tokens: int,
        cached_tokens: int,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int: ...
    def pop(
        self,
        blocked: Iterable[str] | None = None,
        dispatchable: Callable[[str, Any], bool] | None = None,
    ) -> tuple[str, Any] | None: ...
    def remove(self, ticket: int) -> Any: ...
    def deficit(self, class_name: str) -> int: ...
    def depth(self, class_name: str) -> int: ...
    def head(self, class_name: str) -> Any | None: ...
    def head_cost(self, class_name: str) -> int | None: ...
    @property
    def cursor(self) -> str: ...
    @property
    def class_names(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def stats(self) -> dict[str, dict[str, Any]]: ...


# --- wfq (rust/python/wfq.rs) ----------------------------------------------

# --- dualphase (rust/python/dualphase.rs) ----------------------------------

# --- radix (rust/python/radix.rs) ------------------------------------------

# --- sched (rust/python/sched.rs) ------------------------------------------

# --- dispatch (rust/python/dispatch.rs) ------------------------------------
