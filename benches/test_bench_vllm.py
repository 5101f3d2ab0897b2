"""pytest-benchmark versions of the ``fairq bench --suite vllm`` cases at n=10k.

Run: ``pytest benches/test_bench_vllm.py --benchmark-enable``. Each case is
measured for fairq and for the pure-Python baseline (vLLM's deque / heapq
queues), grouped so the report shows them side by side.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from fairq.benchmarks.vllm import build, make_requests

N = 10_000
REQS = make_requests(N)
EXTRA = make_requests(100, seed=1)
for _i, _r in enumerate(EXTRA):
    _r.request_id = f"extra-{_i}"
_rng = random.Random(0)
VICTIMS = _rng.sample(REQS, 10)
BATCH = _rng.sample(REQS, N // 10)

IMPLS = ["fairq", "baseline"]
POLICIES = ["fcfs", "priority"]


def _fresh(impl: str, policy: str) -> Any:
    return (build(impl, policy, REQS),), {}


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_add(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} add x100"

    def op(q: Any) -> None:
        for r in EXTRA:
            q.add_request(r)

    benchmark.pedantic(op, setup=lambda: _fresh(impl, policy), rounds=20)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_pop(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} pop x100"

    def op(q: Any) -> None:
        for _ in range(100):
            q.pop_request()

    benchmark.pedantic(op, setup=lambda: _fresh(impl, policy), rounds=20)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_peek(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} peek"
    q = build(impl, policy, REQS)
    benchmark(q.peek_request)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_remove_one(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} remove-one x10"

    def op(q: Any) -> None:
        for r in VICTIMS:
            q.remove_request(r)

    benchmark.pedantic(op, setup=lambda: _fresh(impl, policy), rounds=10)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_remove_batch(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} remove-batch 10%"
    benchmark.pedantic(
        lambda q: q.remove_requests(BATCH), setup=lambda: _fresh(impl, policy), rounds=10
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("policy", POLICIES)
def test_iterate(benchmark: Any, impl: str, policy: str) -> None:
    benchmark.group = f"vllm {policy} iterate"
    q = build(impl, policy, REQS)

    def op() -> None:
        for _ in q:
            pass

    benchmark.pedantic(op, rounds=5 if impl == "baseline" and policy == "priority" else 20)
