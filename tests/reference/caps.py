"""An obviously correct model of fairq.ledger.caps.AdmissionControl's decision:
it keeps the list of every held request and recomputes every number from it
(O(n) per offer). The token rate is left out (tests of the bucket are direct)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RefCaps:
    max_requests: int | None = None
    max_tokens: int | None = None
    tenant_max_requests: int | None = None
    tenant_max_tokens: int | None = None
    weights: dict[str, float] = field(default_factory=dict)
    accounts: dict[str, float] = field(default_factory=dict)
    #: (tenant, tokens) of every held request
    held: list[tuple[str, int]] = field(default_factory=list)

    def w(self, t: str) -> float:
        return self.weights.get(t, 1.0)

    def of(self, t: str) -> tuple[int, int]:
        mine = [n for u, n in self.held if u == t]
        return len(mine), sum(mine)

    def lead(self, t: str, extra: int = 0) -> float:
        return self.accounts.get(t, 0.0) + (self.of(t)[1] + extra) / self.w(t)

    def cap(self, c: int | None, t: str) -> int | None:
        return None if c is None else max(1, int(c * self.w(t)))

    def decide(self, t: str, n: int) -> str | None:
        """The refusal reason, or None (accepted, and then held)."""
        r, k = self.of(t)
        cr, ct = self.cap(self.tenant_max_requests, t), self.cap(self.tenant_max_tokens, t)
        if (ct is not None and n > ct) or (self.max_tokens is not None and n > self.max_tokens):
            return "too_large"
        if cr is not None and r + 1 > cr:
            return "tenant_requests"
        if ct is not None and k + n > ct:
            return "tenant_tokens"
        R = len(self.held)
        K = sum(m for _, m in self.held)
        full = (self.max_requests is not None and R + 1 > self.max_requests) or (
            self.max_tokens is not None and K + n > self.max_tokens
        )
        if full:
            if (self.max_requests is not None and R + 1 > 2 * self.max_requests) or (
                self.max_tokens is not None and K + n > 2 * self.max_tokens
            ):
                return "global_hard"
            holders = {u for u, _ in self.held}
            others = [self.lead(u) for u in holders if u != t]
            heaviest = not others or self.lead(t, n) >= max(others)
            W = sum(self.w(u) for u in holders | {t})
            share_r = (
                None if self.max_requests is None else max(1, self.max_requests * self.w(t) / W)
            )
            share_k = None if self.max_tokens is None else self.max_tokens * self.w(t) / W
            over = (share_r is not None and r + 1 > share_r) or (
                share_k is not None and k > 0 and k + n > share_k
            )
            if heaviest or over:
                return "global"
        self.held.append((t, n))
        return None

    def release(self, t: str, n: int) -> None:
        self.held.remove((t, n))
