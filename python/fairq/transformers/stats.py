"""Per-tenant metrics of transformers' fairq schedulers (pure Python).

Each scheduler counts its tenants' requests, prompt tokens and engine
prefix-cache hits (:class:`fairq.ledger.TenantTally`); with
``$FAIRQ_METRICS`` set, :func:`publish_tally` registers them with
``prometheus_client``'s default registry beside the scheduler's own
collector (:func:`fairq.metrics.publish`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from fairq.ledger import TenantTally
from fairq.metrics import ENV_VAR as METRICS_ENV_VAR

__all__ = ["TallyCollector", "publish_tally"]


class TallyCollector:
    """``prometheus_client`` collector of a :class:`TenantTally`
    (``fairq_transformers_requests_total``... labels ``name``, ``tenant``)."""

    def __init__(self, tally: TenantTally, name: str, lock: Any) -> None:
        self.tally = tally
        self.name = name
        self.lock = lock

    def describe(self) -> list[Any]:
        return []  # as FairqCollector: one scheduler per policy shares the names

    def collect(self) -> Iterator[Any]:
        with self.lock:  # the engine's thread records while a scrape reads
            return iter(self.tally.families("transformers", self.name))


_tallies: dict[str, TallyCollector] = {}


def publish_tally(tally: TenantTally, name: str, lock: Any) -> None:
    """With ``$FAIRQ_METRICS`` set (as :func:`fairq.metrics.publish`),
    register ``tally``'s collector under ``name``, replacing the last one."""
    if os.environ.get(METRICS_ENV_VAR, "").strip().lower() not in ("1", "true", "yes"):
        return
    try:
        import prometheus_client
    except ImportError:
        return  # fairq.metrics.publish has warned
    old = _tallies.pop(name, None)
    if old is not None:
        prometheus_client.REGISTRY.unregister(old)
    collector = TallyCollector(tally, name, lock)
    prometheus_client.REGISTRY.register(collector)
    _tallies[name] = collector
