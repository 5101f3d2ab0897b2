"""DRR across policy classes: ``DRRQueue.pop`` against a pure-Python
implementation of the same O(C) algorithm (heapq heaps, ceil-division bulk
credit), same run.

Cases: pop latency against the number of classes C (every head costs 100
quanta, so each pop scans the ring, computes the bulk credit and scans again:
the O(C) worst case), and against the cost/quantum ratio at C = 8 (flat: the
bulk credit never loops per round).

Load snapshot: ``pop(active_prefill_tokens=..., max_num_batched_tokens=...)``
against the same pop without a snapshot, same queue contents, same run,
across the number of workers W and classes C. The profile has two distinct
busy rules (shared by all classes) and the snapshot is the worst case for
them: only the last worker is idle, so each rule scans all W workers before
it knows the pool is not busy. Expected cost O(C + 2W) per pop.
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


COLD_COST = 10**15


def _fill(q: Any, c: int, per_class: int, cost: int, worst: bool) -> Any:
    """``worst``: class c0 (quantum 1000) holds the work; the other C-1 classes
    (quantum 1) hold heads that stay unaffordable, so every pop scans the whole
    ring, computes the bulk credit and scans again. Otherwise every class holds
    equal-cost work (the steady round-robin case)."""
    for k in range(per_class):
        for i in range(c):
            if worst and i > 0:
                if k == 0:
                    q.push(k, f"c{i}", COLD_COST, arrival=float(k))
                continue
            q.push(k, f"c{i}", cost, arrival=float(k))
    return q


def _case(c: int, ratio: int, ops: int, worst: bool = True) -> tuple[float, float]:
    quantum = 1000
    quanta = [quantum] + [1 if worst else quantum] * (c - 1)
    per_class = ops + 1 if worst else -(-ops // c) + 1
    cost = ratio * quantum

    def setup_fairq() -> Any:
        q = DRRQueue([PolicyClass(f"c{i}", qn) for i, qn in enumerate(quanta)])
        return _fill(q, c, per_class, cost, worst)

    def setup_py() -> Any:
        return _fill(PyDRR(quanta), c, per_class, cost, worst)

    def op(q: Any) -> None:
        pop = q.pop
        for _ in range(ops):
            pop()

    repeat = 5
    return per_op(setup_fairq, op, ops, repeat=repeat), per_op(setup_py, op, ops, repeat=repeat)


def _load_profile(c: int) -> dict[str, Any]:
    """C explicit classes alternating two busy rules: an absolute threshold
    (every worker busy blocks) and a fractional one with busy_worker_ratio 1.0."""
    rules: list[dict[str, Any]] = [
        {"prefill_busy_threshold": 100},
        {"prefill_busy_threshold_frac": 1.0, "busy_worker_ratio": 1.0},
    ]
    classes = [{"name": f"c{i}", "quantum": 1000, **rules[i % 2]} for i in range(c)]
    return {
        "default_policy_family": "f",
        "uncached_isl_buckets": [{"min_tokens": 0, "bucket": "all"}],
        "policy_classes": [
            {"name": "f", "policy_family": "f", "cache_bucket": "all", "quantum": 1000},
            *classes,
        ],
    }


def _load_case(c: int, w: int, ops: int, as_numpy: bool = False) -> tuple[float, float]:
    tokens: Any = [1000] * (w - 1) + [0]  # all busy but the last worker: full scans
    if as_numpy:
        import numpy as np

        tokens = np.array(tokens, dtype=np.int64)
    per_class = -(-ops // c) + 1

    def setup() -> Any:
        q = DRRQueue.from_config(_load_profile(c))
        for k in range(per_class):
            for i in range(c):
                q.push(k, f"c{i}", 1000, arrival=float(k))
        return q

    def with_load(q: Any) -> None:
        pop = q.pop
        for _ in range(ops):
            pop(active_prefill_tokens=tokens, max_num_batched_tokens=500)

    def without(q: Any) -> None:
        pop = q.pop
        for _ in range(ops):
            pop()

    return per_op(setup, with_load, ops), per_op(setup, without, ops)


LOAD_BASELINE = "same pop, no snapshot"


def run_load(quick: bool = False) -> list[Row]:
    """Pop with a worker-load snapshot vs the same pop without, across W and C."""
    rows: list[Row] = []
    ops = 300 if quick else 1000
    for w in (1, 16, 256, 4096):
        f, b = _load_case(8, w, ops)
        rows.append(
            Row("drr", "pop with load snapshot, C=8, 2 busy rules", f"W={w}", f, b, LOAD_BASELINE)
        )
    for w in (256, 4096):
        f, b = _load_case(8, w, ops, as_numpy=True)
        rows.append(
            Row(
                "drr",
                "pop with load snapshot as a numpy int64 array, C=8",
                f"W={w}",
                f,
                b,
                LOAD_BASELINE,
            )
        )
    for c in (8, 64, 512):
        f, b = _load_case(c, 64, ops)
        rows.append(
            Row("drr", "pop with load snapshot, W=64, 2 busy rules", f"C={c}", f, b, LOAD_BASELINE)
        )
    return rows


def run(quick: bool = False) -> list[Row]:
    """Pop latency vs C and vs cost/quantum ratio, fairq vs pure Python; pop
    with a load snapshot vs without."""
    rows: list[Row] = []
    ops = 300 if quick else 1000
    for c in (2, 8, 64, 512):
        f, b = _case(c, 100, ops)
        rows.append(Row("drr", "pop, full scan + bulk every pop, cost/quantum=100", c, f, b))
    for ratio in (2, 10, 1000, 10**6):
        f, b = _case(8, ratio, ops)
        rows.append(Row("drr", "pop, full scan + bulk every pop, C=8", f"ratio {ratio:g}", f, b))
    for c in (8, 512):
        f, b = _case(c, 3, ops, worst=False)
        rows.append(Row("drr", "pop, steady round robin, cost/quantum=3", c, f, b))
    return rows + run_load(quick)
