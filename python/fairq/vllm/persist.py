"""vLLM's saved fairness state: :mod:`fairq.ledger.persist` (moved there, for
every engine; this module keeps the names importable where they were)."""

from __future__ import annotations

import os  # noqa: F401 (the same module as fairq.ledger.persist.os; tests patch it here)

from fairq.ledger.persist import (
    DEFAULT_INTERVAL_S,
    FORMAT,
    VERSION,
    Persistence,
    StateFile,
    StateSource,
    fingerprint,
)

__all__ = ["FORMAT", "VERSION", "DEFAULT_INTERVAL_S", "StateSource", "StateFile"]
__all__ += ["Persistence", "fingerprint"]
