"""Obviously-correct pure-Python reference models of the dispatchers.

Who holds what is kept as a set of held token sequences per worker (holding a
sequence means holding every prefix of it), so the longest match is a plain
maximum over workers. D2LPM's refill is the paper's literal while loop.
"""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class RefHoldings:
    def __init__(self, num_workers: int) -> None:
        self.held: list[list[tuple[int, ...]]] = [[] for _ in range(num_workers)]

    def held_len(self, w: int, tokens: Sequence[int]) -> int:
        return max((common_prefix(s, tokens) for s in self.held[w]), default=0)

    def longest_match(self, tokens: Sequence[int]) -> tuple[int, list[int]]:
        lens = [self.held_len(w, tokens) for w in range(len(self.held))]
        best = max(lens)
        if best == 0:
            return 0, list(range(len(self.held)))
        return best, [w for w, n in enumerate(lens) if n == best]

    def insert(self, w: int, tokens: Sequence[int]) -> None:
        if tokens:
            self.held[w].append(tuple(tokens))

    def evict(self, w: int, tokens: Sequence[int], kept: int) -> None:
        if kept >= len(tokens):
            return
        out = []
        for s in self.held[w]:
            if common_prefix(s, tokens) >= kept + 1:
                s = s[:kept]
            if s:
                out.append(s)
        self.held[w] = out


class RefD2LPM:
    """Algorithm 2, line by line."""

    def __init__(
        self,
        num_workers: int,
        worker_quantum: float,
        w_e: float = 1.0,
        w_q: float = 2.0,
        placement_slack: int = 0,
        match_threshold: float = 0.0,
        spread_by_credit: bool = False,
    ):
        self.n = num_workers
        self.slack = placement_slack
        self.match_t = match_threshold
        self.spread = spread_by_credit
        self.Q = worker_quantum
        self.w_e = w_e
        self.w_q = w_q
        self.q: dict[str, list[float]] = {}
        self.s = [0] * num_workers
        self.tree = RefHoldings(num_workers)
        self.inflight: dict[object, tuple[str, int, int]] = {}

    def dispatch(
        self, rid: object, client: str, tokens: Sequence[int], chosen: int | None = None
    ) -> int:
        return self.dispatch_among(rid, client, tokens, range(self.n), chosen)

    def dispatch_among(
        self,
        rid: object,
        client: str,
        tokens: Sequence[int],
        workers: Sequence[int],
        chosen: int | None = None,
    ) -> int:
        """Algorithm 2 with only ``workers`` in the world. With a placement
        slack the last step may take any worker of the pool loaded at most
        ``slack`` above the pool's least: ``chosen`` (the one under test,
        which must be such a worker)."""
        assert rid not in self.inflight
        eligible = sorted(set(workers))
        q = self.q.setdefault(client, [0.0] * self.n)
        m, G = self.tree.longest_match(tokens)
        if m == 0 or m / len(tokens) < self.match_t:
            G = []  # no match, or one this short: the pick comes from avail
        avail = [w for w in eligible if q[w] > 0]
        while not avail:
            for w in eligible:
                q[w] += self.Q
            avail = [w for w in eligible if q[w] > 0]
        cand = [w for w in G if w in avail]
        if not cand and self.spread:  # placed from avail: the most credit first
            avail = [w for w in avail if q[w] == max(q[x] for x in avail)]
        pool = cand or avail
        w = min(pool, key=lambda x: (self.s[x], x))
        if self.slack:
            least = self.s[w]
            allowed = [x for x in pool if self.s[x] <= least + self.slack]
            assert chosen in allowed, (chosen, allowed)
            w = chosen
        q[w] -= self.w_e * len(tokens)
        self.s[w] += 1
        self.tree.insert(w, tokens)
        self.inflight[rid] = (client, w, len(tokens))
        return w

    def withdraw(self, rid: object) -> int:
        client, w, n = self.inflight.pop(rid)
        self.q[client][w] += self.w_e * n
        self.s[w] -= 1
        return w

    def remove_worker(self, w: int) -> list[object]:
        self.tree.held[w] = []
        for row in self.q.values():
            row[w] = 0.0
        gone = sorted(r for r, (_, x, _) in self.inflight.items() if x == w)  # type: ignore[type-var]
        for r in gone:
            del self.inflight[r]
        self.s[w] = 0
        return gone

    def charge_output(self, client: str, w: int, out: int) -> bool:
        if client not in self.q:
            return False
        self.q[client][w] -= self.w_q * out
        return True

    def on_finish(self, rid: object, out: int) -> int:
        client, w, _ = self.inflight.pop(rid)
        self.q[client][w] -= self.w_q * out
        self.s[w] -= 1
        return w

    def on_evict(self, w: int, tokens: Sequence[int], kept: int = 0) -> None:
        self.tree.evict(w, tokens, kept)


class RefAffinity:
    def __init__(self, n: int, abs_t: float, rel_t: float, match_t: float) -> None:
        self.n = n
        self.abs_t, self.rel_t, self.match_t = abs_t, rel_t, match_t
        self.s = [0] * n
        self.tree = RefHoldings(n)
        self.inflight: dict[object, int] = {}

    def dispatch(self, rid: object, client: str, tokens: Sequence[int]) -> int:
        m, G = self.tree.longest_match(tokens)
        hi, lo = max(self.s), min(self.s)
        imbalanced = hi - lo > self.abs_t and hi > self.rel_t * lo
        ratio = m / len(tokens) if tokens else 0.0
        pool = list(range(self.n)) if imbalanced or m == 0 or ratio < self.match_t else G
        w = min(pool, key=lambda x: (self.s[x], x))
        self.s[w] += 1
        self.tree.insert(w, tokens)
        self.inflight[rid] = w
        return w

    def on_finish(self, rid: object, out: int) -> int:
        w = self.inflight.pop(rid)
        self.s[w] -= 1
        return w

    def on_evict(self, w: int, tokens: Sequence[int], kept: int = 0) -> None:
        self.tree.evict(w, tokens, kept)
