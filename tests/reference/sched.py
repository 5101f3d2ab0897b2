"""Small, obviously-correct pure-Python references for FCFS, LPM, VTC, DLPM.

They re-match every waiting request against the tree on every step and sort
(the "match all, then sort" design fairq replaces), and follow ALGORITHMS.md
sections 5 and 6 literally (DLPM: Algorithm 1's repeated walk; a refill check
that fires does single refills one at a time until a waiting client has
``q > 0``), plus the oversize rule as fairq.sched states it (a call that
admits nothing is repeated once for one request with ``oversize_budget`` of
room). DLPM's ``strict_credit``: a request of a client with credit is
skipped unless its charge is below the deficit; a walk that admits nothing
while something fits, with every waiting client with credit unable to pay
for any of its requests, refills one round at a time (``Q_u`` to each
client below its threshold: its cheapest charge if it waits with credit,
else 0) until a waiting client is past its threshold. ``match`` is any
``(tokens, namespace) -> int``. LPM's engine rule:
``stop_at_unfit`` ends the walk at the first request that does not fit;
with more than ``fcfs_above`` waiting when a walk starts, it walks in arrival
order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Match = Callable[[Sequence[int], Any], int]


@dataclass
class RReq:
    rid: Any
    client: str
    tokens: Sequence[int]
    item: Any
    ns: Any
    seq: int


@dataclass
class RClient:
    weight: float = 1.0
    service: float = 0.0
    counter: float = 0.0
    deficit: float = 0.0
    waiting: list[RReq] = field(default_factory=list)


class AutoQuantum:
    """DLPM's quantum (ALGORITHMS.md §6): fixed (``scale == 0``) or ``scale``
    times the mean uncached cost per admission (input charge at admission,
    output charges as made), sums decayed by ``1 - 1/64`` per admission;
    rounded when >= 1; ``initial`` until the first admission."""

    WINDOW = 64.0

    def __init__(self, initial: float, scale: float) -> None:
        self.initial, self.scale = initial, scale
        self.cost = self.count = 0.0

    def value(self) -> float:
        if self.scale == 0 or self.count == 0:
            return self.initial
        q = self.scale * (self.cost / self.count)
        if q <= 0:
            return self.initial
        # rounded half away from zero, as Rust's f64::round
        return float(math.floor(q) + (q - math.floor(q) >= 0.5)) if q >= 1 else q

    def admitted(self, charge: float) -> None:
        if self.scale:
            keep = 1.0 - 1.0 / self.WINDOW
            self.cost *= keep
            self.count = self.count * keep + 1.0
            self.charged(charge)

    def charged(self, charge: float) -> None:
        if self.scale:
            self.cost = max(0.0, self.cost + charge)


class RefSched:
    """``policy`` in {"fcfs", "lpm", "vtc", "dlpm"}."""

    def __init__(
        self,
        policy: str,
        match: Match | None = None,
        *,
        w_in: float = 1.0,
        w_out: float = 2.0,
        quantum: float = 1.0,
        quantum_scale: float = 0.0,
        w_e: float = 1.0,
        w_q: float = 2.0,
        stop_at_unfit: bool = False,
        fcfs_above: int | None = None,
        strict_credit: bool = False,
    ) -> None:
        self.policy = policy
        self.strict = strict_credit
        self.stop_at_unfit = stop_at_unfit
        self.fcfs_above = fcfs_above
        self.match = match or (lambda t, ns: 0)
        if policy == "vtc":
            self.wi, self.wo = w_in, w_out
        elif policy == "dlpm":
            self.wi, self.wo = w_e, w_q
        else:
            self.wi, self.wo = 1.0, 2.0
        self.auto = AutoQuantum(quantum, quantum_scale)
        self.clients: dict[str, RClient] = {}
        self.waiting: dict[Any, RReq] = {}
        self.running: dict[Any, str] = {}
        # running rid -> [extend charged, input_len, client weight at admission]
        self.charged: dict[Any, list[Any]] = {}
        self.seq = 0
        self.refills = 0

    def _client(self, name: str) -> RClient:
        if name not in self.clients:
            self.clients[name] = RClient()
        return self.clients[name]

    def __len__(self) -> int:
        return len(self.waiting)

    def add(
        self, rid: Any, client: str, tokens: Sequence[int], item: Any = None, ns: Any = None
    ) -> None:
        if rid in self.waiting or rid in self.running:
            raise ValueError(f"duplicate request_id {rid!r}")
        c = self._client(client)
        if self.policy == "vtc" and not c.waiting:
            others = [k.counter for k in self.clients.values() if k.waiting]
            if others:
                c.counter = max(c.counter, min(others))
        r = RReq(rid, client, tokens, item, ns, self.seq)
        self.seq += 1
        c.waiting.append(r)
        self.waiting[rid] = r

    def remove(self, rid: Any) -> Any:
        r = self.waiting.pop(rid)
        self.clients[r.client].waiting.remove(r)
        return r.item

    def _credit_waiting(self) -> bool:
        """Some client with waiting requests has deficit > 0 (DLPM)."""
        return any(k.deficit > 0 for k in self.clients.values() if k.waiting)

    def _admit(self, r: RReq, cached: int) -> tuple[Any, str, Any, int, int, int]:
        del self.waiting[r.rid]
        c = self.clients[r.client]
        c.waiting.remove(r)
        self.running[r.rid] = r.client
        ext = len(r.tokens) - cached
        c.service += self.wi * ext
        self.charged[r.rid] = [ext, len(r.tokens), c.weight]
        return (r.rid, r.client, r.item, len(r.tokens), cached, ext)

    def schedule(
        self,
        budget: int,
        max_requests: int | None = None,
        refill: bool = True,
        oversize_budget: int | None = None,
    ) -> list[tuple[Any, str, Any, int, int, int]]:
        """``refill=False`` (``schedule_within_credit``): stop the call where
        a DLPM refill check would fire, without refilling. The oversize rule:
        if nothing is admitted, ``max_requests`` allows one and something
        waits, the walk is made again for one request with
        ``oversize_budget`` (None: unlimited) tokens of room."""
        out = self._walk(budget, max_requests, refill)
        room = float("inf") if oversize_budget is None else oversize_budget
        if not out and max_requests != 0 and self.waiting and room > budget:
            out = self._walk(room, 1, refill)
        return out

    def _walk(
        self, budget: float, max_requests: int | None, refill: bool
    ) -> list[tuple[Any, str, Any, int, int, int]]:
        out: list[tuple[Any, str, Any, int, int, int]] = []
        rem = budget
        maxr = len(self.waiting) + 1 if max_requests is None else max_requests
        if self.policy == "fcfs":
            for r in sorted(self.waiting.values(), key=lambda r: r.seq):
                if len(out) >= maxr:
                    break
                cached = self.match(r.tokens, r.ns)
                if len(r.tokens) - cached > rem:
                    break
                rem -= len(r.tokens) - cached
                out.append(self._admit(r, cached))
        elif self.policy == "vtc":
            while len(out) < maxr:
                active = [
                    (c.counter, i, n) for i, (n, c) in enumerate(self.clients.items()) if c.waiting
                ]
                if not active:
                    break
                name = min(active)[2]
                c = self.clients[name]
                r = min(c.waiting, key=lambda r: r.seq)
                cached = self.match(r.tokens, r.ns)
                ext = len(r.tokens) - cached
                if ext > rem:
                    break
                rem -= ext
                c.counter += self.wi * len(r.tokens) / c.weight
                out.append(self._admit(r, cached))
        else:
            # LPM / DLPM: walk in LPM order; DLPM repeats the walk (Algorithm 1's
            # outer loop) until a whole walk admits nothing and refills nothing.
            matched = {r.rid: self.match(r.tokens, r.ns) for r in self.waiting.values()}
            fcfs = self.fcfs_above is not None and len(self.waiting) > self.fcfs_above
            while len(out) < maxr:
                progress = False
                if fcfs:
                    order = sorted(self.waiting.values(), key=lambda r: r.seq)
                else:
                    order = sorted(self.waiting.values(), key=lambda r: (-matched[r.rid], r.seq))
                for r in order:
                    if len(out) >= maxr:
                        break
                    c = self.clients[r.client]
                    if self.policy == "dlpm":
                        if c.deficit <= 0 and not refill and not self._credit_waiting():
                            return out
                        if c.deficit <= 0:
                            # CheckRefill, repeated while it still fires: one
                            # single refill at a time until a waiting client has q > 0
                            while not self._credit_waiting():
                                self.refills += 1
                                progress = True
                                q = self.auto.value()
                                for k in self.clients.values():
                                    if k.deficit <= 0:
                                        k.deficit += q
                        if c.deficit <= 0:
                            continue
                        charge = self._charge(r, matched)
                        if self.strict and math.isfinite(charge) and charge >= c.deficit:
                            continue  # its credit does not cover it
                    ext = len(r.tokens) - matched[r.rid]
                    if ext > rem:
                        if self.stop_at_unfit:
                            break
                        continue
                    rem -= ext
                    if self.policy == "dlpm":
                        c.deficit -= self.wi * ext / c.weight
                        self.auto.admitted(self.wi * len(r.tokens) / c.weight)
                    out.append(self._admit(r, matched[r.rid]))
                    progress = True
                if not progress and self.strict and refill and self._poverty_refill(matched, rem):
                    continue
                if not progress or self.policy != "dlpm":
                    break  # LPM: a second walk would admit nothing
        return out

    def _charge(self, r: RReq, matched: dict[Any, int]) -> float:
        return self.wi * (len(r.tokens) - matched[r.rid]) / self.clients[r.client].weight

    def _poverty_refill(self, matched: dict[Any, int], rem: float) -> bool:
        """Strict credit's refill at the end of a walk that admitted nothing."""
        credit = {n: c for n, c in self.clients.items() if c.waiting and c.deficit > 0}
        if not credit:
            return False
        if not any(len(r.tokens) - matched[r.rid] <= rem for r in self.waiting.values()):
            return False
        for c in credit.values():
            if any(self._charge(r, matched) < c.deficit for r in c.waiting):
                return False  # it can pay for a request that does not fit
        cheapest = {n: min(self._charge(r, matched) for r in c.waiting) for n, c in credit.items()}
        while not any(
            c.deficit > cheapest.get(n, 0.0) for n, c in self.clients.items() if c.waiting
        ):
            self.refills += 1
            q = self.auto.value()
            for n, c in self.clients.items():
                if c.deficit <= cheapest.get(n, 0.0):
                    c.deficit += q
        return True

    def schedule_within_credit(
        self, budget: int, max_requests: int | None = None, oversize_budget: int | None = None
    ) -> list[tuple[Any, str, Any, int, int, int]]:
        return self.schedule(budget, max_requests, False, oversize_budget)

    def charge_output(self, rid: Any, n: int = 1) -> None:
        c = self.clients[self.running[rid]]
        c.service += self.wo * n
        if self.policy == "vtc":
            c.counter += self.wo * n / c.weight
        elif self.policy == "dlpm":
            c.deficit -= self.wo * n / c.weight
            self.auto.charged(self.wo * n / c.weight)

    def recharge_extend(self, rid: Any, ext: int) -> int:
        """Replace the extend tokens charged at admission (VTC's counter charges
        the input length, so only service moves; DLPM's deficit moves with the
        weight the client had at admission)."""
        client = self.running[rid]
        old, n, w = self.charged[rid]
        if not 0 <= ext <= n:
            raise ValueError(f"extend_len = {ext} outside [0, {n}]")
        c = self.clients[client]
        c.service += self.wi * (ext - old)
        if self.policy == "dlpm":
            c.deficit += self.wi * old / w - self.wi * ext / w
        self.charged[rid][0] = ext
        return int(old)

    def finish(self, rid: Any) -> None:
        del self.running[rid]
        del self.charged[rid]

    def set_weight(self, client: str, w: float) -> None:
        self._client(client).weight = w
