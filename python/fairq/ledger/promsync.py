"""fairq's metric families as plain ``prometheus_client`` gauges, for an
engine whose ``/metrics`` only serves metrics written to prometheus's
multiprocess files (SGLang: its scheduler runs in its own process and its
HTTP server's ``/metrics`` is a ``MultiProcessCollector`` over
``$PROMETHEUS_MULTIPROC_DIR``). A custom collector
(:class:`fairq.metrics.FairqCollector`) in the scheduler process is never
scraped there; gauges created in that process are: each sample of the
families becomes the value of a ``Gauge`` of the sample's name and labels
(multiprocess mode ``livemostrecent``: the last value written, dropped when
the process ends). Counters keep their ``_total`` names and their values
(a gauge that only grows; ``rate()`` works on it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

__all__ = ["GaugeMirror", "multiprocess_dir"]


def multiprocess_dir() -> str | None:
    """``$PROMETHEUS_MULTIPROC_DIR`` when set (the engine serves
    multiprocess metrics), else None."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class GaugeMirror:
    """Writes metric families' samples into gauges (see the module doc).

    ``registry``: where the gauges are registered (None: nowhere, which is
    what multiprocess mode needs: the values go to the process's files).
    ``prefix``: only samples whose name starts with it are mirrored.
    """

    def __init__(self, registry: Any = None, prefix: str = "fairq_") -> None:
        self.registry = registry
        self.prefix = prefix
        self._gauges: dict[str, tuple[Any, tuple[str, ...]]] = {}

    def _gauge(self, name: str, doc: str, labels: tuple[str, ...]) -> Any:
        have = self._gauges.get(name)
        if have is not None and have[1] == labels:
            return have[0]
        if have is not None:
            return None  # the same name with other labels: skipped
        from prometheus_client import Gauge

        g = Gauge(
            name,
            doc or name,
            labelnames=labels,
            registry=self.registry,
            multiprocess_mode="livemostrecent",
        )
        self._gauges[name] = (g, labels)
        return g

    def write(self, families: Iterable[Any]) -> int:
        """Set a gauge for each sample of ``families``; returns how many."""
        n = 0
        for fam in families:
            for smp in fam.samples:
                if not smp.name.startswith(self.prefix):
                    continue
                labels = tuple(sorted(smp.labels))
                g = self._gauge(smp.name, fam.documentation, labels)
                if g is None:
                    continue
                (g.labels(*(smp.labels[k] for k in labels)) if labels else g).set(smp.value)
                n += 1
        return n
