"""Dispatch decisions per second: fairq.D2LPM against a pure-Python D2LPM.

Both implement Algorithm 2 with a compressed radix tree whose nodes carry
the set of workers holding the prefix (a Python int bitmask in the baseline,
a word bitset in Rust). Each decision matches a 2k-token prompt (16 clients,
each with 4 shared 1.5k-token documents plus a 512-token private suffix),
picks the worker, charges the deficit and inserts the prompt for the chosen
worker; every dispatched request finishes 64 dispatches later, so ``s_w`` and
the deficits move as in a live router. The two implementations are checked
to make the same decisions before timing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fairq.benchmarks import Row, per_op

TITLE = "Dispatch: D2LPM decisions (fairq vs pure Python)"


class _Node:
    __slots__ = ("key", "children", "workers")

    def __init__(self, key: list[int], workers: int) -> None:
        self.key = key
        self.children: dict[int, _Node] = {}
        self.workers = workers


class PyD2LPM:
    """Pure-Python D2LPM (same rules and tie-breaks as ``fairq.D2LPM``)."""

    def __init__(self, num_workers: int, worker_quantum: float, w_e: float = 1.0, w_q: float = 2.0):
        self.n = num_workers
        self.Q = worker_quantum
        self.w_e = w_e
        self.w_q = w_q
        self.root = _Node([], (1 << num_workers) - 1)
        self.q: dict[str, list[float]] = {}
        self.s = [0] * num_workers
        self.inflight: dict[Any, tuple[str, int]] = {}

    @staticmethod
    def _common(key: list[int], toks: Sequence[int], pos: int) -> int:
        n = len(key)
        if toks[pos : pos + n] == key:
            return n
        k = 0
        lim = min(n, len(toks) - pos)
        while k < lim and key[k] == toks[pos + k]:
            k += 1
        return k

    def _match(self, toks: list[int]) -> int:
        node, pos, best = self.root, 0, self.root
        while pos < len(toks):
            child = node.children.get(toks[pos])
            if child is None:
                break
            k = self._common(child.key, toks, pos)
            pos += k
            best = child
            if k < len(child.key):
                break
            node = child
        return best.workers

    def _insert(self, toks: list[int], w: int) -> None:
        bit = 1 << w
        node, pos = self.root, 0
        while pos < len(toks):
            child = node.children.get(toks[pos])
            if child is None:
                node.children[toks[pos]] = _Node(toks[pos:], bit)
                return
            k = self._common(child.key, toks, pos)
            if k < len(child.key):
                upper = _Node(child.key[:k], child.workers)
                child.key = child.key[k:]
                upper.children[child.key[0]] = child
                node.children[toks[pos]] = upper
                child = upper
            child.workers |= bit
            pos += k
            node = child

    def dispatch(self, rid: Any, client: str, toks: list[int]) -> int:
        if rid in self.inflight:
            raise ValueError(f"request_id {rid!r} is already in flight")
        q = self.q.get(client)
        if q is None:
            q = self.q[client] = [0.0] * self.n
        if max(q) <= 0:
            k = min((-x // self.Q) + 1 for x in q)
            for w in range(self.n):
                q[w] += k * self.Q
        g = self._match(toks)
        s = self.s
        best = -1
        for w in range(self.n):
            if q[w] > 0 and (g >> w) & 1 and (best < 0 or s[w] < s[best]):
                best = w
        if best < 0:
            for w in range(self.n):
                if q[w] > 0 and (best < 0 or s[w] < s[best]):
                    best = w
        q[best] -= self.w_e * len(toks)
        s[best] += 1
        self._insert(toks, best)
        self.inflight[rid] = (client, best)
        return best

    def on_finish(self, rid: Any, output_tokens: int) -> int:
        client, w = self.inflight.pop(rid)
        self.q[client][w] -= self.w_q * output_tokens
        self.s[w] -= 1
        return w


def _prompts(n: int, seed: int = 0) -> tuple[list[str], list[list[int]]]:
    rng = np.random.default_rng(seed)
    docs = {c: [rng.integers(0, 50_000, 1536).tolist() for _ in range(4)] for c in range(16)}
    clients, prompts = [], []
    for _ in range(n):
        c = int(rng.integers(0, 16))
        d = docs[c][int(rng.integers(0, 4))]
        clients.append(f"c{c}")
        prompts.append(d + rng.integers(0, 50_000, 512).tolist())
    return clients, prompts


def _drive(d: Any, clients: list[str], prompts: Sequence[Any]) -> list[int]:
    out = []
    for i, (c, p) in enumerate(zip(clients, prompts, strict=True)):
        out.append(d.dispatch(i, c, p))
        if i >= 64:
            d.on_finish(i - 64, 128)
    return out


def run(quick: bool = False) -> list[Row]:
    import fairq

    n = 300 if quick else 2000
    clients, prompts = _prompts(n)
    arrays = [np.asarray(p, dtype=np.uint32) for p in prompts]
    rows: list[Row] = []
    q = 20_000.0
    for workers in (8, 64):
        # same decisions first
        a = _drive(fairq.D2LPM(workers, q), clients[:300], prompts[:300])
        b = _drive(PyD2LPM(workers, q), clients[:300], prompts[:300])
        if a != b:
            raise AssertionError("fairq.D2LPM and the pure-Python D2LPM disagree")
        repeat = 2 if quick else 3

        def make_py(w: int = workers) -> PyD2LPM:
            return PyD2LPM(w, q)

        def make_fq(w: int = workers) -> Any:
            return fairq.D2LPM(w, q)

        def on_lists(d: Any) -> object:
            return _drive(d, clients, prompts)

        def on_arrays(d: Any) -> object:
            return _drive(d, clients, arrays)

        py = per_op(make_py, on_lists, n, repeat=repeat)
        fq_list = per_op(make_fq, on_lists, n, repeat=repeat)
        fq_arr = per_op(make_fq, on_arrays, n, repeat=repeat)
        rows.append(
            Row("dispatch", f"D2LPM dispatch, {workers} workers, list prompt", n, fq_list, py)
        )
        rows.append(
            Row(
                "dispatch",
                f"D2LPM dispatch, {workers} workers, uint32 array prompt",
                n,
                fq_arr,
                py,
                baseline="pure Python (list)",
            )
        )
    return rows
