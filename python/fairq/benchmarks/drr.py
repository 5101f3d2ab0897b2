"""DRR across policy classes: ``DRRQueue.pop`` against a pure-Python
implementation of the same O(C) algorithm (heapq heaps, ceil-division bulk
credit), same run.

Cases: pop latency against the number of classes C (every head costs 100
quanta, so each pop scans the ring, computes the bulk credit and scans again:
the O(C) worst case), and against the cost/quantum ratio at C = 8 (flat: the
bulk credit never loops per round).
"""

from __future__ import annotations

import heapq
from typing import Any

from fairq.benchmarks import Row, per_op
from fairq.drr import DRRQueue, PolicyClass

TITLE = "DRR across policy classes (pop latency)"


class PyDRR:
    """Pure-Python DRR with the same arbitration as ``DRRQueue`` (FCFS only)."""

    def __init__(self, quanta: list[int]) -> None:
        self.names = [f"c{i}" for i in range(len(quanta))]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.quanta = quanta
        self.deficit = [0] * len(quanta)
        self.heaps: list[list[tuple[int, float, int, int, Any]]] = [[] for _ in quanta]
        self.cursor = 0
        self.retained = False
        self.seq = 0

    def push(self, item: Any, class_name: str, cost: int, arrival: float = 0.0) -> None:
        self.seq += 1
        entry = (0, arrival, self.seq, max(1, cost), item)
        heapq.heappush(self.heaps[self.index[class_name]], entry)

    def _dispatch(self, i: int) -> tuple[str, Any]:
        h = self.heaps[i]
        e = heapq.heappop(h)
        self.deficit[i] -= e[3]
        n = len(self.names)
        if not h:
            self.deficit[i] = 0
            self.cursor, self.retained = (i + 1) % n, False
        elif self.deficit[i] >= h[0][3]:
            self.cursor, self.retained = i, True
        else:
            self.cursor, self.retained = (i + 1) % n, False
        return self.names[i], e[4]

    def pop(self, blocked: frozenset[str] = frozenset()) -> tuple[str, Any] | None:
        heaps, deficit, quanta, names = self.heaps, self.deficit, self.quanta, self.names
        n = len(names)
        if self.retained:
            i = self.cursor
            h = heaps[i]
            if h and deficit[i] >= h[0][3] and names[i] not in blocked:
                return self._dispatch(i)
        live = []
        for j in range(n):
            i = (self.cursor + j) % n
            h = heaps[i]
            if not h:
                deficit[i] = 0
                continue
            if names[i] in blocked:
                continue
            live.append(i)
            cost = h[0][3]
            if deficit[i] >= cost:
                return self._dispatch(i)
            deficit[i] += quanta[i]
            if deficit[i] >= cost:
                return self._dispatch(i)
        if not live:
            return None
        r = min(-(-(heaps[i][0][3] - deficit[i]) // quanta[i]) for i in live)
        for i in live:
            deficit[i] += r * quanta[i]
        for i in live:
            if deficit[i] >= heaps[i][0][3]:
                return self._dispatch(i)
        raise AssertionError("unreachable")


def _fill(q: Any, c: int, per_class: int, cost: int) -> Any:
    for k in range(per_class):
        for i in range(c):
            q.push(k, f"c{i}", cost, arrival=float(k))
    return q


def _case(c: int, ratio: int, ops: int, quantum: int = 1000) -> tuple[float, float]:
    per_class = -(-ops // c) + 1
    cost = ratio * quantum

    def setup_fairq() -> Any:
        return _fill(
            DRRQueue([PolicyClass(f"c{i}", quantum) for i in range(c)]), c, per_class, cost
        )

    def setup_py() -> Any:
        return _fill(PyDRR([quantum] * c), c, per_class, cost)

    def op(q: Any) -> None:
        pop = q.pop
        for _ in range(ops):
            pop()

    repeat = 3
    return per_op(setup_fairq, op, ops, repeat=repeat), per_op(setup_py, op, ops, repeat=repeat)


def run(quick: bool = False) -> list[Row]:
    """Pop latency vs C and vs cost/quantum ratio, fairq vs pure Python."""
    rows: list[Row] = []
    ops = 500 if quick else 2000
    for c in (2, 8, 64, 512):
        f, b = _case(c, 100, ops)
        rows.append(Row("drr", "pop, cost/quantum=100, vs C", c, f, b))
    for ratio in (1, 10, 1000, 10**6):
        f, b = _case(8, ratio, ops)
        rows.append(Row("drr", "pop, C=8, vs cost/quantum", f"ratio {ratio:g}", f, b))
    return rows
