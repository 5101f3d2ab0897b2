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
