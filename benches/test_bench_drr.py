"""pytest-benchmark cases for DRRQueue.pop (run: pytest benches/test_bench_drr.py
--benchmark-enable). With benchmarks disabled (the default) each runs once as a
smoke test."""

from __future__ import annotations

from typing import Any

import pytest

from fairq import DRRQueue, PolicyClass
from fairq.benchmarks.drr import PyDRR


def _filled(impl: str, c: int, ratio: int, per_class: int = 4) -> Any:
    q: Any = (
        DRRQueue([PolicyClass(f"c{i}", 1000) for i in range(c)])
        if impl == "fairq"
        else PyDRR([1000] * c)
    )
    for k in range(per_class):
        for i in range(c):
            q.push(k, f"c{i}", ratio * 1000, arrival=float(k))
    return q


@pytest.mark.parametrize("impl", ["fairq", "python"])
@pytest.mark.parametrize("c", [2, 8, 64, 512])
def test_pop_vs_classes(benchmark: Any, impl: str, c: int) -> None:
    def go() -> None:
        q = _filled(impl, c, 100)
        for _ in range(c):
            assert q.pop() is not None

    benchmark(go)


@pytest.mark.parametrize("ratio", [1, 1000, 10**6])
def test_pop_vs_ratio(benchmark: Any, ratio: int) -> None:
    def go() -> None:
        q = _filled("fairq", 8, ratio)
        for _ in range(32):
            assert q.pop() is not None
        assert q.pop() is None

    benchmark(go)


@pytest.mark.parametrize("snapshot", [False, True])
@pytest.mark.parametrize("w", [1, 64, 4096])
def test_pop_with_load_snapshot(benchmark: Any, snapshot: bool, w: int) -> None:
    """Pop with a worker-load snapshot vs the same pop without (compare the
    two rows of one W): O(C + R*W), every busy rule scans all W workers."""
    from fairq.benchmarks.drr import _load_profile

    tokens = [1000] * (w - 1) + [0]

    def go() -> None:
        q = DRRQueue.from_config(_load_profile(8))
        for k in range(4):
            for i in range(8):
                q.push(k, f"c{i}", 1000, arrival=float(k))
        for _ in range(32):
            r = (
                q.pop(active_prefill_tokens=tokens, max_num_batched_tokens=500)
                if snapshot
                else q.pop()
            )
            assert r is not None

    benchmark(go)
