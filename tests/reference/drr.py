"""Slow, obviously-right reference model of DRR across policy classes.

Follows ALGORITHMS.md section 2 literally, with the one difference that the
bulk step simulates virtual rounds ONE AT A TIME (add one quantum to every
dispatchable class, check, repeat) instead of computing the minimum number of
rounds with a ceiling division. Heads are found by a linear ``min`` over a
plain list. Used only by the tests.

Also the obviously-correct versions of what a Dynamo policy file adds:
classification by linear search (:class:`RefClassifier`), Dynamo's
per-worker limits (usage before the push against ``per_worker *
num_workers``) and load-based blocking (count busy workers, compare).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RefEntry:
    key: tuple[int, float, int]
    item: Any
    cost: int
    ticket: int
    raw: int = 0
    cached: int = 0


@dataclass
class RefClass:
    name: str
    quantum: int
    order: str
    deficit: int = 0
    entries: list[RefEntry] = field(default_factory=list)
    # Dynamo's per-class options (None: unset)
    threshold: int | None = None
    frac: float | None = None
    ratio: float | None = None
    limits: dict[str, int] = field(default_factory=dict)
    raw: int = 0
    cached: int = 0

    def busy(self, tokens: list[int], max_batched: list[int]) -> bool:
        """Whether this class's pool of workers counts as busy."""
        if not tokens:
            return False
        n_busy = 0
        for t, m in zip(tokens, max_batched, strict=True):
            a = self.threshold is not None and t > self.threshold
            f = self.frac is not None and float(t) > self.frac * float(m)
            n_busy += a or f
        if self.ratio is None:
            return n_busy == len(tokens)
        return float(n_busy) >= self.ratio * float(len(tokens))

    def head(self) -> RefEntry | None:
        return min(self.entries, key=lambda e: e.key) if self.entries else None


class RefDRR:
    def __init__(self, classes: list[tuple[str, int, str]]) -> None:
        self.classes = [RefClass(n, q, o) for n, q, o in classes]
        self.num_workers = 1
        self.cursor = 0
        self.retained = False
        self.seq = 0
        self.tickets: dict[int, int] = {}

    def index(self, name: str) -> int:
        return [c.name for c in self.classes].index(name)

    def __len__(self) -> int:
        return sum(len(c.entries) for c in self.classes)

    def push(
        self,
        name: str,
        item: Any,
        cost: int,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float = 0.0,
        raw: int | None = None,
        cached: int = 0,
    ) -> int:
        c = self.classes[self.index(name)]
        cost = max(1, cost)
        c.raw += raw if raw is not None else cost
        c.cached += cached
        if c.order == "fcfs":
            policy = arrival - priority_jump
        else:
            policy = -((1.0 + priority_jump) / cost)
        ticket = self.seq
        self.seq += 1
        c.entries.append(
            RefEntry(
                (-strict_priority, policy, ticket),
                item,
                cost,
                ticket,
                raw if raw is not None else cost,
                cached,
            )
        )
        self.tickets[ticket] = self.index(name)
        return ticket

    def full(self, name: str) -> str | None:
        """The per-worker limit a push into ``name`` would hit, if any."""
        c = self.classes[self.index(name)]
        usage = {
            "request_queue_limit_per_worker": len(c.entries),
            "raw_isl_token_queue_limit_per_worker": c.raw,
            "cached_token_queue_limit_per_worker": c.cached,
        }
        for kind, per in c.limits.items():
            if usage[kind] >= per * self.num_workers:
                return kind
        return None

    def remove(self, ticket: int) -> Any:
        i = self.tickets.pop(ticket)
        c = self.classes[i]
        e = next(e for e in c.entries if e.ticket == ticket)
        c.entries.remove(e)
        c.raw -= e.raw
        c.cached -= e.cached
        if not c.entries:
            c.deficit = 0
            if self.cursor == i:
                self.retained = False
        return e.item

    def _dispatch(self, i: int) -> tuple[str, Any]:
        c = self.classes[i]
        e = c.head()
        assert e is not None and c.deficit >= e.cost
        c.entries.remove(e)
        c.raw -= e.raw
        c.cached -= e.cached
        del self.tickets[e.ticket]
        c.deficit -= e.cost
        n = len(self.classes)
        nxt = c.head()
        if nxt is None:
            c.deficit = 0
            self.cursor, self.retained = (i + 1) % n, False
        elif c.deficit >= nxt.cost:
            self.cursor, self.retained = i, True
        else:
            self.cursor, self.retained = (i + 1) % n, False
        return c.name, e.item

    def pop(
        self,
        blocked: frozenset[str] = frozenset(),
        dispatchable: Callable[[str, Any], bool] | None = None,
        load: tuple[list[int], list[int]] | None = None,
    ) -> tuple[str, Any] | None:
        n = len(self.classes)
        memo: dict[int, bool] = {}

        def ok(i: int) -> bool:
            if i not in memo:
                c = self.classes[i]
                h = c.head()
                assert h is not None
                memo[i] = (
                    c.name not in blocked
                    and (load is None or not c.busy(*load))
                    and (dispatchable is None or bool(dispatchable(c.name, h.item)))
                )
            return memo[i]

        # 1. cursor-retained burst
        if self.retained:
            c = self.classes[self.cursor]
            h = c.head()
            if h is not None and c.deficit >= h.cost and ok(self.cursor):
                return self._dispatch(self.cursor)
        # 2. one scan from the cursor
        order = [(self.cursor + j) % n for j in range(n)]
        for i in order:
            c = self.classes[i]
            h = c.head()
            if h is None:
                c.deficit = 0
                continue
            if not ok(i):
                continue
            if c.deficit >= h.cost:
                return self._dispatch(i)
            c.deficit += c.quantum
            if c.deficit >= h.cost:
                return self._dispatch(i)
        # 4. nothing dispatchable
        live = [i for i in order if self.classes[i].entries and ok(i)]
        if not live:
            return None
        # 3. virtual rounds, one at a time, credited to every dispatchable class
        while True:
            for i in live:
                self.classes[i].deficit += self.classes[i].quantum
            if any(self.classes[i].deficit >= self.classes[i].head().cost for i in live):  # type: ignore[union-attr]
                break
        for i in live:
            if self.classes[i].deficit >= self.classes[i].head().cost:  # type: ignore[union-attr]
                return self._dispatch(i)
        raise AssertionError("unreachable")


@dataclass
class RefClassifier:
    """Dynamo's classification by linear search: an explicit class's exact
    name selects it; a configured family selects itself; anything else the
    default family; the bucket is the last floor <= uncached tokens."""

    default_family: str
    buckets: list[tuple[str, int]]  # (name, min_tokens), floors ascending
    classes: list[tuple[str, str | None, str | None]]  # (name, family, bucket)

    def classify(self, requested: str | None, uncached: int) -> str:
        for name, fam, bucket in self.classes:
            if fam is None and bucket is None and name == requested:
                return name
        families = {fam for _, fam, _ in self.classes if fam is not None}
        fam = requested if requested in families else self.default_family
        bucket = [b for b, floor in self.buckets if floor <= uncached][-1]
        (name,) = [n for n, f, b in self.classes if f == fam and b == bucket]
        return name
