"""Per-tenant tally of requests, prompt tokens and prefix-cache hits (every
engine, every policy; pure Python).

The engine's integration calls :meth:`TenantTally.record` when it first
schedules a request (its prefix-cache hit is then known);
:meth:`TenantTally.families` renders Prometheus counters
``fairq_<engine>_requests_total``, ``..._prompt_tokens_total`` and
``..._prefix_hit_tokens_total`` (labels ``name``, ``tenant``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["TenantTally"]


class TenantTally:
    """Per tenant: requests, prompt tokens and the engine's prefix-cache hits
    when each request is first scheduled.

    Bounded: the first ``max_tenants`` tenants seen are counted by name, every
    later one under :attr:`OTHER` (so memory and the exported series stay
    bounded however many tenants a server sees, and every counter still only
    grows, as Prometheus requires). ``resolver``: request -> tenant (for
    callers that pass requests, not tenants)."""

    #: The tenant label that counts the tenants beyond ``max_tenants``.
    OTHER = "(other)"

    def __init__(self, resolver: Any = None, max_tenants: int = 1000) -> None:
        self.resolver = resolver
        self.max_tenants = max_tenants
        self.requests: dict[str, int] = {}
        self.prompt_tokens: dict[str, int] = {}
        self.hit_tokens: dict[str, int] = {}
        self._seen: set[str] = set()

    def record(self, rid: str, tenant: str, prompt_tokens: int, hit_tokens: int) -> bool:
        """Count request ``rid`` of ``tenant`` (once: a request already
        counted is skipped; returns whether it counted it)."""
        if rid in self._seen:
            return False
        self._seen.add(rid)
        if tenant not in self.requests and len(self.requests) >= self.max_tenants:
            tenant = self.OTHER
        self.requests[tenant] = self.requests.get(tenant, 0) + 1
        self.prompt_tokens[tenant] = self.prompt_tokens.get(tenant, 0) + int(prompt_tokens)
        self.hit_tokens[tenant] = self.hit_tokens.get(tenant, 0) + max(int(hit_tokens), 0)
        return True

    def seen(self, rid: str) -> bool:
        """Whether ``rid`` was counted (and not forgotten since)."""
        return rid in self._seen

    def forget_finished(self, live: Collection[str]) -> None:
        """Forget the ids counted that are not in ``live`` (the engine's
        requests) once there are many more of them (amortised O(1))."""
        if len(self._seen) > 4 * len(live) + 1024:
            self._seen.intersection_update(live)

    def families(self, engine: str, name: str) -> list[Any]:
        """Prometheus counter families ``fairq_<engine>_<key>`` (labels
        ``name``, ``tenant``)."""
        from prometheus_client.core import CounterMetricFamily

        out = []
        for key, doc, values in (
            ("requests", "Requests first scheduled", self.requests),
            ("prompt_tokens", "Prompt tokens of requests first scheduled", self.prompt_tokens),
            ("prefix_hit_tokens", "Of those, the engine's prefix-cache hits", self.hit_tokens),
        ):
            fam = CounterMetricFamily(f"fairq_{engine}_{key}", doc, labels=["name", "tenant"])
            for t, v in values.items():
                fam.add_metric([name, t], v)
            out.append(fam)
        return out
