"""pytest-benchmark cases for WFQ (run: pytest benches/test_bench_wfq.py --benchmark-enable).

docs/BENCHMARKS.md's table comes from ``fairq bench --suite wfq``; these cases let
pytest-benchmark track the same operations over time.
"""

from __future__ import annotations

from typing import Any

import pytest

from fairq.benchmarks.wfq import PyWFQ, _fill_fairq, _fill_py, _trace

N = 10_000


@pytest.mark.parametrize("impl", ["fairq", "python"])
def test_bench_wfq_add_pop(benchmark: Any, impl: str) -> None:
    reqs = _trace(N)
    extra = _trace(1_000, seed=1)
    q = _fill_fairq(reqs) if impl == "fairq" else _fill_py(reqs)

    if isinstance(q, PyWFQ):
        py: PyWFQ = q

        def step() -> None:
            for r in extra:
                py.add(r, r.tokens, r.flow, r.weight)
                py.pop()

    else:

        def step() -> None:
            for r in extra:
                q.add(r, tokens=r.tokens, flow=r.flow, weight=r.weight)
                q.pop()

    benchmark(step)
    assert len(q) == N
