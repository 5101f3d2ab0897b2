"""Obviously-correct pure-Python model of ``fairq.RadixTree`` (dict of prefixes).

Every stored page-aligned prefix ``(namespace, tokens[:k])`` is a dict key
mapping to its last-access stamp; lock counts are kept per prefix. Eviction
removes one page at a time from the least-recently-used unlocked leaf prefix
(deepest first among equal stamps). The real tree frees whole nodes, so the
model is told how many tokens the tree freed and removes exactly that many.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Key = tuple[Any, tuple[int, ...]]


class RefRadix:
    def __init__(self, capacity: int | None = None, page_size: int = 1) -> None:
        self.capacity = capacity
        self.page = page_size
        self.stamp: dict[Key, int] = {}
        self.locks: dict[Key, int] = {}
        self.records: dict[Key, list[int]] = {}
        self.clock = 0

    # -- queries -----------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.stamp) * self.page

    @property
    def evictable_size(self) -> int:
        return sum(self.page for k in self.stamp if self.locks.get(k, 0) == 0)

    def match(self, tokens: Sequence[int], ns: Any = None) -> int:
        t = tuple(tokens)
        best = 0
        k = self.page
        while k <= len(t) and (ns, t[:k]) in self.stamp:
            best = k
            k += self.page
        return best

    # -- mutations -----------------------------------------------------------
    def _touch(self, ns: Any, t: tuple[int, ...], m: int) -> None:
        for k in range(self.page, m + 1, self.page):
            self.stamp[(ns, t[:k])] = self.clock

    def _leaves(self) -> list[Key]:
        out = []
        for ns, p in self.stamp:
            if self.locks.get((ns, p), 0):
                continue
            # a leaf: no stored extension by one page
            if any(
                kns == ns and len(kp) == len(p) + self.page and kp[: len(p)] == p
                for kns, kp in self.stamp
            ):
                continue
            out.append((ns, p))
        return out

    def _evict_one(self) -> bool:
        leaves = self._leaves()
        if not leaves:
            return False
        victim = min(leaves, key=lambda k: (self.stamp[k], -len(k[1])))
        del self.stamp[victim]
        return True

    def evict_exactly(self, n: int) -> None:
        """Remove ``n`` tokens in LRU order (the amount the real tree freed)."""
        assert n % self.page == 0
        for _ in range(n // self.page):
            assert self._evict_one(), "model has nothing left to evict"

    def _lock_path(self, ns: Any, t: tuple[int, ...], m: int, d: int) -> None:
        for k in range(self.page, m + 1, self.page):
            key = (ns, t[:k])
            self.locks[key] = self.locks.get(key, 0) + d
            if self.locks[key] == 0:
                del self.locks[key]

    def insert(self, tokens: Sequence[int], ns: Any = None, size_after: int | None = None) -> int:
        """Insert; with a capacity, ``size_after`` (the real tree's size after
        the call) tells how many tokens the node-granular eviction freed."""
        t = tuple(tokens)[: len(tokens) // self.page * self.page]
        self.clock += 1
        m = self.match(t, ns)
        self._touch(ns, t, m)
        need = len(t) - m
        if need == 0:
            return m
        if self.capacity is not None and self.size + need > self.capacity:
            required = self.size + need - self.capacity
            before = self.size
            self._lock_path(ns, t, m, +1)
            freed = 0
            while True:
                if freed >= required and (
                    size_after is None or before - freed + need == size_after
                ):
                    break
                if not self._evict_one():
                    break
                freed += self.page
            self._lock_path(ns, t, m, -1)
            room = self.capacity - self.size
            need = min(need, room) // self.page * self.page
        for k in range(m + self.page, m + need + 1, self.page):
            self.stamp[(ns, t[:k])] = self.clock
        return m

    def lock(self, tokens: Sequence[int], ns: Any = None) -> int:
        t = tuple(tokens)
        self.clock += 1
        m = self.match(t, ns)
        self._touch(ns, t, m)
        self._lock_path(ns, t, m, +1)
        self.records.setdefault((ns, t), []).append(m)
        return m

    def unlock(self, tokens: Sequence[int], ns: Any = None) -> None:
        t = tuple(tokens)
        stack = self.records.get((ns, t))
        if not stack:
            raise KeyError("no lock held")
        m = stack.pop()
        if not stack:
            del self.records[(ns, t)]
        self._lock_path(ns, t, m, -1)
