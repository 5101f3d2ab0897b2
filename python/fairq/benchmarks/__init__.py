"""Microbenchmark suites: fairq against the pure-Python code it replaces.

Each suite is a module in this package exposing ``TITLE: str`` and
``run(quick: bool = False) -> list[Row]``. ``fairq bench`` discovers them, runs
fairq and its pure-Python baseline side by side in the same process, and prints
the per-operation times with the ratio. Absolute times on shared machines are
noise; the ratio measured in one run is the number to quote.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

S = TypeVar("S")


@dataclass(frozen=True)
class Row:
    """One benchmark case: seconds per operation for fairq and the baseline."""

    suite: str
    case: str
    n: int | str
    fairq_s: float
    baseline_s: float
    baseline: str = "pure Python"

    @property
    def speedup(self) -> float:
        """``baseline / fairq``: above 1 means fairq is faster."""
        return self.baseline_s / self.fairq_s if self.fairq_s > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup"] = self.speedup
        return d


def per_op(
    setup: Callable[[], S],
    op: Callable[[S], object],
    ops: int,
    *,
    repeat: int = 5,
    min_time: float = 0.02,
) -> float:
    """Best-of-``repeat`` seconds per operation.

    ``setup()`` builds fresh state (untimed); ``op(state)`` performs ``ops``
    operations on it (timed). Rounds repeat until at least ``min_time`` seconds
    were measured in total, so tiny operations are not lost in timer noise.
    """
    best = float("inf")
    total = 0.0
    rounds = 0
    gc_was = gc.isenabled()
    gc.disable()
    try:
        while rounds < repeat or (total < min_time and rounds < 1000):
            state = setup()
            t0 = time.perf_counter()
            op(state)
            dt = time.perf_counter() - t0
            total += dt
            rounds += 1
            best = min(best, dt)
    finally:
        if gc_was:
            gc.enable()
    return best / max(ops, 1)


def fmt_time(s: float) -> str:
    """Human units for a per-operation time."""
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def markdown_table(rows: list[Row]) -> str:
    """Rows as the Markdown table docs/BENCHMARKS.md shows."""
    out = [
        "| case | n | fairq | baseline | speedup |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.case} | {r.n} | {fmt_time(r.fairq_s)} | {fmt_time(r.baseline_s)} "
            f"({r.baseline}) | {r.speedup:.1f}x |"
        )
    return "\n".join(out)
