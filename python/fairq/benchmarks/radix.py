"""Radix tree and local-scheduler benchmarks (``fairq bench --suite radix``).

* ``RadixTree.match`` on 2k-token prompts against a pure-Python radix tree of
  the same design (one ``dict`` child map per node, SGLang-style token-by-token
  edge comparison).
* One LPM / DLPM scheduling step in steady state: every step the engine
  finishes the admitted requests, inserts their prompts into the cache (which
  evicts under capacity) and tops the queue back up; the step itself
  (``schedule``) is timed. The baseline re-matches every waiting request
  against a pure-Python radix tree and sorts ("match all, then sort", what
  SGLang does). At 10k waiting the row compares fairq against fairq itself at
  128 waiting: a ratio near 1 means the step cost does not grow with the queue.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fairq.benchmarks import Row, per_op

TITLE = "Radix tree and local schedulers (LPM, DLPM)"


# ----------------------------------------------------------- pure-Python tree


class _PyNode:
    __slots__ = ("children", "key", "parent")

    def __init__(self, key: list[int], parent: _PyNode | None) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _PyNode] = {}


def _key_match(a: Sequence[int], b: Sequence[int]) -> int:
    i = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        i += 1
    return i


class PyRadixTree:
    """The pure-Python baseline: a radix tree with a dict child map per node."""

    def __init__(self) -> None:
        self.root = _PyNode([], None)

    def match(self, tokens: Sequence[int]) -> int:
        """Length of the longest cached prefix of ``tokens``."""
        return self._walk(tokens, insert=False)

    def insert(self, tokens: Sequence[int]) -> int:
        """Cache ``tokens``; returns how many were cached before."""
        return self._walk(tokens, insert=True)

    def _walk(self, tokens: Sequence[int], *, insert: bool) -> int:
        """Follow ``tokens`` down the tree as far as they match; with
        ``insert``, split the edge where they diverge and hang the rest
        below. Returns the matched length."""
        node = self.root
        pos = 0
        n = len(tokens)
        while pos < n:
            child = node.children.get(tokens[pos])
            if child is None:
                if insert:
                    node.children[tokens[pos]] = _PyNode(list(tokens[pos:]), node)
                return pos
            m = _key_match(child.key, tokens[pos:])
            if m < len(child.key):
                if not insert:
                    return pos + m
                mid = _PyNode(child.key[:m], node)
                child.key = child.key[m:]
                child.parent = mid
                mid.children[child.key[0]] = child
                node.children[tokens[pos]] = mid
                child = mid
            pos += m
            node = child
        return pos


# ----------------------------------------------------------- pure-Python schedulers


class PyMatchAllScheduler:
    """LPM / DLPM the SGLang way: re-match everything, sort, walk."""

    def __init__(self, tree: PyRadixTree, quantum: float | None = None) -> None:
        self.tree = tree
        self.quantum = quantum
        self.waiting: dict[int, tuple[str, list[int], int]] = {}
        self.deficit: dict[str, float] = {}
        self.seq = 0

    def add(self, rid: int, client: str, tokens: list[int]) -> None:
        self.deficit.setdefault(client, 0.0)
        self.waiting[rid] = (client, tokens, self.seq)
        self.seq += 1

    def schedule(self, budget: int, max_requests: int) -> list[int]:
        m = {rid: self.tree.match(t) for rid, (_, t, _) in self.waiting.items()}
        out: list[int] = []
        q = self.deficit
        progress = True
        while progress and len(out) < max_requests:  # DLPM repeats the walk
            progress = False
            order = sorted(self.waiting, key=lambda r: (-m[r], self.waiting[r][2]))
            for rid in order:
                if len(out) >= max_requests:
                    break
                c, toks, _ = self.waiting[rid]
                if self.quantum is not None:
                    if q[c] <= 0:
                        active = {v[0] for v in self.waiting.values()}
                        while not any(q[k] > 0 for k in active):
                            progress = True
                            for k in q:
                                if q[k] <= 0:
                                    q[k] += self.quantum
                    if q[c] <= 0:
                        continue
                ext = len(toks) - m[rid]
                if ext > budget:
                    continue
                budget -= ext
                if self.quantum is not None:
                    q[c] -= ext
                out.append(rid)
                del self.waiting[rid]
                progress = True
            if self.quantum is None:
                break  # LPM: a second walk would admit nothing
        return out


# ----------------------------------------------------------- workload


class Workload:
    """Requests of 1-4k tokens: a shared document (1-3k) plus a unique suffix."""

    def __init__(self, n_docs: int = 64, clients: int = 8, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.docs = [
            self.rng.integers(0, 50_000, int(self.rng.integers(1000, 3000)), dtype=np.uint32)
            for _ in range(n_docs)
        ]
        self.clients = [f"c{i}" for i in range(clients)]
        self.n = 0

    def next(self) -> tuple[int, str, np.ndarray]:
        rid = self.n
        self.n += 1
        d = self.docs[int(self.rng.integers(len(self.docs)))]
        suffix = self.rng.integers(0, 50_000, int(self.rng.integers(50, 1000)), dtype=np.uint32)
        return rid, self.clients[rid % len(self.clients)], np.concatenate([d, suffix])


def _steady_state(
    n_waiting: int,
    steps: int,
    make: Callable[[int | None], tuple[Any, Any]],
    py: bool,
    capacity: int | None,
    budget: int = 16_384,
    per_step: int = 4,
) -> float:
    """Mean seconds per ``schedule`` call in steady state (setup untimed)."""
    wl = Workload()
    tree, sched = make(capacity)
    prompts: dict[int, Any] = {}

    def add_one() -> None:
        rid, client, toks = wl.next()
        t: Any = toks.tolist() if py else toks
        prompts[rid] = t
        sched.add(rid, client, t)

    for _ in range(n_waiting):
        add_one()
    # a warm cache: every document when unbounded, half of them otherwise
    warm = wl.docs if capacity is None else wl.docs[: len(wl.docs) // 2]
    for d in warm:
        tree.insert(d.tolist() if py else d)
    total = 0.0
    timed = 0
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()  # collector pauses are not the scheduler's cost
    try:
        for step in range(steps + 2):
            t0 = time.perf_counter()
            adm = sched.schedule(budget, per_step)
            dt = time.perf_counter() - t0
            if step >= 2:  # the first steps absorb the initial cache
                total += dt
                timed += 1
            for a in adm:
                rid = a if py else a.request_id
                tree.insert(prompts.pop(rid))  # prefill done: cache the prompt
                if not py:
                    sched.finish(rid)
                add_one()
    finally:
        if gc_was:
            gc.enable()
    return total / max(timed, 1)


def _best(
    reps: int, n: int, steps: int, make: Callable[[int | None], tuple[Any, Any]], cap: int | None
) -> float:
    """fairq: best of ``reps`` runs, each a mean over its steps (shared machines are noisy)."""
    return min(_steady_state(n, steps, make, py=False, capacity=cap) for _ in range(reps))


def _fairq_lpm(dlpm: bool) -> Callable[[int | None], tuple[Any, Any]]:
    from fairq import DLPM, LPM, RadixTree

    def make(capacity: int | None) -> tuple[Any, Any]:
        tree = RadixTree(capacity=capacity)
        return tree, (DLPM(tree, quantum=8192.0) if dlpm else LPM(tree))

    return make


def _py_lpm(dlpm: bool) -> Callable[[int | None], tuple[Any, Any]]:
    def make(capacity: int | None) -> tuple[Any, Any]:
        tree = PyRadixTree()  # unbounded: the baseline re-matches everything anyway
        return tree, PyMatchAllScheduler(tree, 8192.0 if dlpm else None)

    return make


def run(quick: bool = False) -> list[Row]:
    from fairq import RadixTree

    rows: list[Row] = []
    rng = np.random.default_rng(1)
    # --- match on 2k-token prompts
    n_prompts = 50 if quick else 200
    shared = rng.integers(0, 50_000, 1024, dtype=np.uint32)
    prompts = [
        np.concatenate([shared, rng.integers(0, 50_000, 1024, dtype=np.uint32)])
        for _ in range(n_prompts)
    ]
    lists = [p.tolist() for p in prompts]
    ft = RadixTree()
    pt = PyRadixTree()
    for p, lst in zip(prompts, lists, strict=True):
        ft.insert(p)
        pt.insert(lst)
    assert all(ft.match(p) == pt.match(lst) == 2048 for p, lst in zip(prompts, lists, strict=True))
    py_s = per_op(lambda: None, lambda _: [pt.match(x) for x in lists], len(lists))
    np_s = per_op(lambda: None, lambda _: [ft.match(x) for x in prompts], len(prompts))
    li_s = per_op(lambda: None, lambda _: [ft.match(x) for x in lists], len(lists))
    rows.append(Row("radix", "RadixTree.match, 2k tokens (numpy uint32)", 2048, np_s, py_s))
    rows.append(Row("radix", "RadixTree.match, 2k tokens (list)", 2048, li_s, py_s))
    ins_f = per_op(RadixTree, lambda t: [t.insert(x) for x in prompts], len(prompts), repeat=3)
    ins_p = per_op(PyRadixTree, lambda t: [t.insert(x) for x in lists], len(lists), repeat=3)
    rows.append(Row("radix", "RadixTree.insert, 2k tokens (numpy uint32)", 2048, ins_f, ins_p))

    # --- scheduling steps in steady state. Two cache regimes:
    # "warm": every document cached, only new unique suffixes get inserted
    # (the cache changes little); "churn": capacity 150k tokens, every step
    # inserts ~4 prompts and evicts as much (documents come and go, and every
    # waiting request on an evicted document must be re-matched).
    steps = 20 if quick else 200
    reps = 1 if quick else 3
    for name, dlpm in (("LPM", False), ("DLPM", True)):
        for n in (128, 1000):
            f = _best(reps, n, steps, _fairq_lpm(dlpm), 150_000)
            base = _steady_state(n, 3 if quick else 15, _py_lpm(dlpm), py=True, capacity=None)
            rows.append(
                Row(
                    "radix",
                    f"{name}.schedule step, 1-4k-token prompts, churn",
                    n,
                    f,
                    base,
                    "match all + sort",
                )
            )
        n_big = 2000 if quick else 10_000
        for regime, cap in (("warm", None), ("churn", 150_000)):
            f128 = _best(reps, 128, steps, _fairq_lpm(dlpm), cap)
            f10k = _best(reps, n_big, steps, _fairq_lpm(dlpm), cap)
            rows.append(
                Row(
                    "radix",
                    f"{name}.schedule step, 1-4k-token prompts, {regime}",
                    n_big,
                    f10k,
                    f128,
                    "fairq at 128 waiting",
                )
            )
    return rows
