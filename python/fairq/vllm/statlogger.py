"""The ``fairq`` stat-logger plugin of vLLM's API server (imports vLLM).

Registered as the entry point ``fairq`` of group ``vllm.stat_logger_plugins``
(``pyproject.toml``); vLLM loads it in the API server process and calls
:meth:`FairqStatLogger.record` with each engine's ``SchedulerStats`` before
its own loggers. See :mod:`fairq.vllm.stats` for what travels and why.
Served from ``prometheus_client``'s default registry, which is what the
server's ``/metrics`` serves (vLLM's multi-API-server mode, which serves
only multiprocess files, is not covered).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from fairq.vllm.stats import decode_families, take_payload

__all__ = ["FairqStatLogger"]


class _Latest:
    """The latest families of each engine, served at scrape time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_engine: dict[int, str] = {}

    def collect(self) -> Iterator[Any]:
        with self.lock:
            items = sorted(self.by_engine.items())
        merged: dict[str, Any] = {}
        for engine, payload in items:
            for fam in decode_families(payload, {"engine": str(engine)}):
                have = merged.get(fam.name)
                if have is None:
                    merged[fam.name] = fam
                else:
                    have.samples.extend(fam.samples)
        yield from merged.values()

    def describe(self) -> list[Any]:
        return []


_LATEST: _Latest | None = None


def _registry_latest() -> _Latest:
    global _LATEST
    if _LATEST is None:
        import prometheus_client

        _LATEST = _Latest()
        prometheus_client.REGISTRY.register(_LATEST)
    return _LATEST


class FairqStatLogger(StatLoggerBase):
    """Takes fairq's metrics out of each ``SchedulerStats`` and serves them."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.latest = _registry_latest()

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is None:
            return
        payload = take_payload(scheduler_stats)
        if payload is not None:
            with self.latest.lock:
                self.latest.by_engine[engine_idx] = payload

    def log_engine_initialized(self) -> None:
        pass
