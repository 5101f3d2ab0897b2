"""Pure-Python reference model of WFQ (ALGORITHMS.md section 3), for tests.

Deliberately simple: a ``heapq`` of ``(F, S, arrival, seq)`` with lazy
deletion, a dict of ``F_last`` per flow, and a dict of the tags of popped
items (strong references; fine for tests). No flow garbage collection (the
core's is unobservable: it only drops flows whose ``F_last <= V``).

``virtual_clock``: ``"start"`` (ALGORITHMS.md: ``V = max(V, S)`` on pop) or
``"finish"`` (self-clocked: ``V = max(V, F)`` on pop).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Tags:
    flow: Any
    weight: float
    start: float
    finish: float
    arrival: float
    remaining: float
    seq: int


class RefWFQ:
    """The obviously-correct model the Rust core is checked against."""

    def __init__(self, virtual_clock: str = "start") -> None:
        if virtual_clock not in ("start", "finish"):
            raise ValueError(f"virtual_clock must be 'start' or 'finish', got {virtual_clock!r}")
        self.clock = virtual_clock
        self.heap: list[tuple[float, float, float, int, int]] = []
        self.live: dict[int, tuple[Any, Tags]] = {}  # token -> (item, tags)
        self.V = 0.0
        self.last: dict[Any, float] = {}
        self.next_seq = 0
        self.next_token = 0
        self.departed: dict[int, tuple[Any, Tags]] = {}

    def _push(self, item: Any, t: Tags) -> None:
        tok = self.next_token
        self.next_token += 1
        self.live[tok] = (item, t)
        heapq.heappush(self.heap, (t.finish, t.start, t.arrival, t.seq, tok))

    def _clean(self) -> None:
        while self.heap and self.heap[0][4] not in self.live:
            heapq.heappop(self.heap)

    def _token_of(self, item: Any) -> int | None:
        best = None
        for tok, (it, t) in self.live.items():
            if it is item:
                k = (t.finish, t.start, t.arrival, t.seq)
                if best is None or k < best[0]:
                    best = (k, tok)
        return None if best is None else best[1]

    def add(
        self, item: Any, tokens: float, flow: Any = None, weight: float = 1.0, arrival: float = 0.0
    ) -> None:
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"weight must be a finite number > 0, got {weight}")
        if not (math.isfinite(tokens) and tokens >= 0):
            raise ValueError(f"tokens must be a finite number >= 0, got {tokens}")
        s = self.V if flow is None else max(self.V, self.last.get(flow, self.V))
        f = s + tokens / weight
        if flow is not None:
            self.last[flow] = f
        t = Tags(flow, weight, s, f, arrival + 0.0, tokens, self.next_seq)
        self.next_seq += 1
        self.departed.pop(id(item), None)
        self._push(item, t)

    def pop(self) -> Any:
        self._clean()
        if not self.heap:
            raise IndexError("pop from empty heap")
        tok = heapq.heappop(self.heap)[4]
        item, t = self.live.pop(tok)
        self.V = max(self.V, t.start if self.clock == "start" else t.finish)
        self.departed[id(item)] = (item, t)
        return item

    def peek(self) -> Any:
        self._clean()
        if not self.heap:
            raise IndexError("peek from empty heap")
        return self.live[self.heap[0][4]][0]

    def discard(self, item: Any) -> bool:
        tok = self._token_of(item)
        if tok is None:
            return False
        del self.live[tok]
        return True

    def prepend(self, item: Any) -> None:
        it, t = self.departed.pop(id(item))
        assert it is item
        if t.flow is not None:
            self.last[t.flow] = max(self.last.get(t.flow, self.V), t.finish)
        self.next_seq = max(self.next_seq, t.seq + 1)
        self._push(item, t)

    def update_remaining(self, item: Any, remaining: float) -> float:
        tok = self._token_of(item)
        if tok is None:
            raise KeyError("not queued")
        it, t = self.live.pop(tok)
        nt = replace(t, finish=t.start + remaining / t.weight, remaining=remaining)
        self._push(it, nt)
        return nt.finish

    def tags(self, item: Any) -> Tags:
        tok = self._token_of(item)
        assert tok is not None
        return self.live[tok][1]

    def order(self) -> list[Any]:
        ts = sorted(
            self.live.values(), key=lambda p: (p[1].finish, p[1].start, p[1].arrival, p[1].seq)
        )
        return [it for it, _ in ts]

    def __len__(self) -> int:
        return len(self.live)
