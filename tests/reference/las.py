"""A small, obviously-correct pure-Python reference for LAS (least attained
service per tenant with half-life decay; ALGORITHMS.md section 5b).

Each client keeps its attained service ``S`` and the time it was last
brought up to date; reading it at time ``now`` decays it directly,
``S * 2 ** (-(now - at) / half_life_s)``. Every step scans every client:
the waiting client with the least decayed ``S`` (ties: first seen) has its
oldest request admitted if it fits, else the pass stops; admission charges
``w_in * extend / weight``, output ``w_out * n / weight``, a recharge the
difference with the weight at admission; ``S`` never goes below 0. Plus the
oversize rule as fairq.sched states it (a call that admits nothing is
repeated once for one request with ``oversize_budget`` of room). No prefix
tree: every prompt token is extend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LClient:
    weight: float = 1.0
    service: float = 0.0
    attained: float = 0.0
    at: float = 0.0
    waiting: list[tuple[Any, int]] = field(default_factory=list)


class RefLAS:
    def __init__(self, half_life_s: float, w_in: float = 1.0, w_out: float = 2.0) -> None:
        self.h, self.w_in, self.w_out = half_life_s, w_in, w_out
        self.now = 0.0
        self.clients: dict[str, LClient] = {}
        self.waiting: dict[Any, str] = {}
        #: rid -> (client, charged extend, input_len, weight at admission)
        self.running: dict[Any, tuple[str, int, int, float]] = {}

    def _client(self, name: str) -> LClient:
        return self.clients.setdefault(name, LClient(at=self.now))

    def attained(self, name: str) -> float:
        c = self.clients.get(name)
        return 0.0 if c is None else c.attained * 2.0 ** (-(self.now - c.at) / self.h)

    def _charge(self, name: str, x: float) -> None:
        c = self.clients[name]
        c.attained = max(0.0, self.attained(name) + x)
        c.at = self.now

    def set_time(self, now: float) -> None:
        assert now >= self.now
        self.now = now

    def set_weight(self, name: str, w: float) -> None:
        self._client(name).weight = w

    def add(self, rid: Any, name: str, tokens: Sequence[int]) -> None:
        self._client(name).waiting.append((rid, len(tokens)))
        self.waiting[rid] = name

    def remove(self, rid: Any) -> None:
        c = self.clients[self.waiting.pop(rid)]
        c.waiting = [(r, n) for r, n in c.waiting if r != rid]

    def _pass(self, budget: float, max_requests: float) -> list[Any]:
        out: list[Any] = []
        left = budget
        while len(out) < max_requests:
            order = sorted(
                (self.attained(name), i, name)
                for i, (name, c) in enumerate(self.clients.items())
                if c.waiting
            )
            if not order:
                break
            name = order[0][2]
            c = self.clients[name]
            rid, n = c.waiting[0]
            if n > left:
                break
            left -= n
            c.waiting.pop(0)
            del self.waiting[rid]
            self._charge(name, self.w_in * n / c.weight)
            c.service += self.w_in * n
            self.running[rid] = (name, n, n, c.weight)
            out.append(rid)
        return out

    def schedule(
        self, budget: int, max_requests: int | None = None, oversize_budget: int | None = None
    ) -> list[Any]:
        m = math.inf if max_requests is None else max_requests
        room = math.inf if oversize_budget is None else oversize_budget
        out = self._pass(budget, m)
        if not out and m >= 1 and room > budget and self.waiting:
            out = self._pass(room, 1)
        return out

    def charge_output(self, rid: Any, n: int) -> None:
        name = self.running[rid][0]
        c = self.clients[name]
        self._charge(name, self.w_out * n / c.weight)
        c.service += self.w_out * n

    def recharge_extend(self, rid: Any, extend: int) -> int:
        name, old, input_len, w = self.running[rid]
        self.running[rid] = (name, extend, input_len, w)
        if extend != old:
            self._charge(name, self.w_in * (extend - old) / w)
            self.clients[name].service += self.w_in * (extend - old)
        return old

    def finish(self, rid: Any) -> None:
        del self.running[rid]
