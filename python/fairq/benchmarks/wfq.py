"""WFQ suite: fairq.WFQQueue against the pure-Python WFQ design.

The baseline is the seed design's data structure (a ``heapq`` list of
``(F, S, arrival, seq, item)`` tuples) running the same per-flow algorithm,
with removal as the seed does it (scan, delete, re-heapify: O(n)).
Cases at n = 1k / 10k / 100k queued requests over 64 flows:

- ``add``: n adds into an empty queue (per add);
- ``pop``: draining a queue of n (per pop);
- ``add+pop``: steady state at n queued, one add and one pop (per pair);
- ``remove``: removing random queued requests from a queue of n (per remove).
"""

from __future__ import annotations

import heapq
import math
import random
from typing import Any

from fairq._core import WFQQueue
from fairq.benchmarks import Row, per_op

TITLE = "Weighted Fair Queuing: fairq.WFQQueue vs pure-Python heapq WFQ"

FLOWS = 64


class PyWFQ:
    """Pure-Python WFQ: heapq on (F, S, arrival, seq), F_last per flow."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, float, float, int, Any]] = []
        self.V = 0.0
        self.last: dict[Any, float] = {}
        self.seq = 0

    def add(
        self, item: Any, tokens: float, flow: Any = None, weight: float = 1.0, arrival: float = 0.0
    ) -> None:
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"weight must be a finite number > 0, got {weight}")
        s = self.V if flow is None else max(self.V, self.last.get(flow, self.V))
        f = s + tokens / weight
        if flow is not None:
            self.last[flow] = f
        heapq.heappush(self.heap, (f, s, arrival, self.seq, item))
        self.seq += 1

    def pop(self) -> Any:
        f, s, _, _, item = heapq.heappop(self.heap)
        if s > self.V:
            self.V = s
        return item

    def remove(self, item: Any) -> None:
        for i, e in enumerate(self.heap):
            if e[4] is item:
                self.heap[i] = self.heap[-1]
                self.heap.pop()
                heapq.heapify(self.heap)
                return
        raise ValueError("item not in queue")

    def __len__(self) -> int:
        return len(self.heap)


class Req:
    __slots__ = ("flow", "tokens", "weight", "__weakref__")

    def __init__(self, flow: int, tokens: int, weight: float) -> None:
        self.flow, self.tokens, self.weight = flow, tokens, weight


def _trace(n: int, seed: int = 0) -> list[Req]:
    rng = random.Random(seed)
    return [
        Req(rng.randrange(FLOWS), rng.randint(16, 4096), rng.choice((1.0, 2.0, 4.0)))
        for _ in range(n)
    ]


def _fill_fairq(reqs: list[Req]) -> WFQQueue:
    q = WFQQueue()
    add = q.add
    for r in reqs:
        add(r, tokens=r.tokens, flow=r.flow, weight=r.weight)
    return q


def _fill_py(reqs: list[Req]) -> PyWFQ:
    q = PyWFQ()
    add = q.add
    for r in reqs:
        add(r, r.tokens, r.flow, r.weight)
    return q


def run(quick: bool = False) -> list[Row]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    repeat = 2 if quick else 3
    rows: list[Row] = []
    for n in sizes:
        rows.extend(_cases(n, repeat))
    return rows


def _cases(n: int, repeat: int) -> list[Row]:
    rows: list[Row] = []
    base = "pure-Python heapq WFQ"
    reqs = _trace(n)
    extra = _trace(n, seed=1)

    f = per_op(lambda: reqs, _fill_fairq, n, repeat=repeat)
    b = per_op(lambda: reqs, _fill_py, n, repeat=repeat)
    rows.append(Row("wfq", "add", n, f, b, base))

    def drain_f(q: WFQQueue) -> None:
        pop = q.pop
        for _ in range(n):
            pop()

    def drain_b(q: PyWFQ) -> None:
        pop = q.pop
        for _ in range(n):
            pop()

    f = per_op(lambda: _fill_fairq(reqs), drain_f, n, repeat=repeat)
    b = per_op(lambda: _fill_py(reqs), drain_b, n, repeat=repeat)
    rows.append(Row("wfq", "pop", n, f, b, base))

    def steady_f(q: WFQQueue) -> None:
        add, pop = q.add, q.pop
        for r in extra:
            add(r, tokens=r.tokens, flow=r.flow, weight=r.weight)
            pop()

    def steady_b(q: PyWFQ) -> None:
        add, pop = q.add, q.pop
        for r in extra:
            add(r, r.tokens, r.flow, r.weight)
            pop()

    f = per_op(lambda: _fill_fairq(reqs), steady_f, n, repeat=repeat)
    b = per_op(lambda: _fill_py(reqs), steady_b, n, repeat=repeat)
    rows.append(Row("wfq", "add+pop", n, f, b, base))

    k = min(n // 10, 200)
    victims = random.Random(2).sample(reqs, k)

    def remove_f(q: WFQQueue) -> None:
        for r in victims:
            q.remove(r)

    def remove_b(q: PyWFQ) -> None:
        for r in victims:
            q.remove(r)

    f = per_op(lambda: _fill_fairq(reqs), remove_f, k, repeat=repeat)
    b = per_op(lambda: _fill_py(reqs), remove_b, k, repeat=repeat)
    rows.append(Row("wfq", "remove", n, f, b, base))
    return rows
