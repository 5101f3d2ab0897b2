"""Build fairq local schedulers by name (pure Python; needs only ``fairq``).

``POLICIES`` lists the policies the engine integration supports. Each is one
of fairq's local schedulers (see ``docs/ARCHITECTURE.md``), built over the
integration's mirror of the engine's prefix cache (a ``fairq.RadixTree``).
WFQ and DRR are not offered here: they order flows by virtual finish time /
per-class deficits over *classes* of requests, not per client with prefix
reuse, and the engine integration is about the latter (see docs/RESULTS.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fairq.sched import POLICIES as _SCHEDULERS
from fairq.sched import make_scheduler, policy_name

#: the engine's default options (DLPM's quantum sized for one engine batch)
_ENGINE_DEFAULTS: dict[str, dict[str, float]] = {
    "vtc": {"w_in": 1.0, "w_out": 2.0},
    "dlpm": {"quantum": 512.0, "w_e": 1.0, "w_q": 2.0},
}

#: policy name -> (fairq class name, keyword arguments it accepts with defaults)
POLICIES: dict[str, tuple[str, dict[str, float]]] = {
    key: (cls.__name__, dict(_ENGINE_DEFAULTS.get(key, {}))) for key, cls in _SCHEDULERS.items()
}


def check_policy(name: str) -> str:
    """Return the normalized policy name (a ``"fairq-"`` prefix is accepted)
    or raise ``ValueError`` naming the choices (:func:`fairq.sched.policy_name`)."""
    if isinstance(name, str) and name.strip().lower().startswith("fairq-"):
        name = name.strip()[len("fairq-") :]
    return policy_name(name)


def policy_options(name: str, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Defaults for ``name`` overridden by ``options``; rejects unknown or bad
    options when the scheduler class is made, before the engine builds it."""
    key = check_policy(name)
    defaults = dict(POLICIES[key][1])
    for opt, value in (options or {}).items():
        if opt not in defaults:
            allowed = ", ".join(sorted(defaults)) or "none"
            raise ValueError(f"policy {key!r} has no option {opt!r} (options: {allowed})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"option {opt!r} must be a number, got {value!r}")
        # as the schedulers check them: every weight and the quantum finite and > 0
        if not math.isfinite(float(value)) or float(value) <= 0:
            raise ValueError(f"option {opt!r} must be a finite number > 0, got {value!r}")
        defaults[opt] = float(value)
    return defaults


def build_policy(name: str, tree: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Instantiate the fairq scheduler for ``name`` over ``tree``
    (:func:`fairq.sched.make_scheduler` with the engine's defaults)."""
    key = check_policy(name)
    return make_scheduler(key, tree, **policy_options(key, options))
