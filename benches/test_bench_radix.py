"""pytest-benchmark cases for the radix tree and the LPM/DLPM step.

Run with ``pytest benches/test_bench_radix.py --benchmark-enable``; the
default test run (``--benchmark-disable``) executes each once as a smoke test.
The docs/BENCHMARKS.md table comes from ``fairq bench --suite radix``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fairq import DLPM, LPM, RadixTree
from fairq.benchmarks.radix import PyRadixTree, Workload


@pytest.fixture(scope="module")
def prompts() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 50_000, 1024, dtype=np.uint32)
    return [
        np.concatenate([shared, rng.integers(0, 50_000, 1024, dtype=np.uint32)]) for _ in range(50)
    ]


def test_match_fairq(benchmark: Any, prompts: list[np.ndarray]) -> None:
    t = RadixTree()
    for p in prompts:
        t.insert(p)
    assert benchmark(lambda: [t.match(p) for p in prompts])[0] == 2048


def test_match_pure_python(benchmark: Any, prompts: list[np.ndarray]) -> None:
    t = PyRadixTree()
    lists = [p.tolist() for p in prompts]
    for p in lists:
        t.insert(p)
    assert benchmark(lambda: [t.match(p) for p in lists])[0] == 2048


@pytest.mark.parametrize("policy", ["lpm", "dlpm"])
@pytest.mark.parametrize("n", [128, 2000])
def test_schedule_step(benchmark: Any, policy: str, n: int) -> None:
    wl = Workload(n_docs=16)
    tree = RadixTree(capacity=100_000)
    s: Any = LPM(tree) if policy == "lpm" else DLPM(tree, quantum=8192.0)
    prompts: dict[int, np.ndarray] = {}

    def add() -> None:
        rid, client, toks = wl.next()
        prompts[rid] = toks
        s.add(rid, client, toks)

    for _ in range(n):
        add()
    for d in wl.docs[:8]:
        tree.insert(d)

    def step() -> int:
        adm = s.schedule(16_384, 4)
        for a in adm:
            tree.insert(prompts.pop(a.request_id))
            s.finish(a.request_id)
            add()
        return len(adm)

    assert benchmark(step) == 4
    s._check()
