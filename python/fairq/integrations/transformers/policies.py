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

#: policy name -> (fairq class name, keyword arguments it accepts with defaults)
POLICIES: dict[str, tuple[str, dict[str, float]]] = {
    "fcfs": ("FCFS", {}),
    "lpm": ("LPM", {}),
    "vtc": ("VTC", {"w_in": 1.0, "w_out": 2.0}),
    "dlpm": ("DLPM", {"quantum": 512.0, "w_e": 1.0, "w_q": 2.0}),
}


def check_policy(name: str) -> str:
    """Return the normalized policy name or raise ``ValueError`` naming the choices."""
    if not isinstance(name, str):
        raise TypeError(f"policy must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key.startswith("fairq-"):
        key = key[len("fairq-") :]
    if key not in POLICIES:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown fairq policy {name!r}; known policies: {known}")
    return key


def policy_options(name: str, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Defaults for ``name`` overridden by ``options``; rejects unknown or bad options."""
    key = check_policy(name)
    defaults = dict(POLICIES[key][1])
    for opt, value in (options or {}).items():
        if opt not in defaults:
            allowed = ", ".join(sorted(defaults)) or "none"
            raise ValueError(f"policy {key!r} has no option {opt!r} (options: {allowed})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"option {opt!r} must be a number, got {value!r}")
        if (
            not math.isfinite(float(value))
            or float(value) < 0
            or (opt == "quantum" and float(value) <= 0)
        ):
            raise ValueError(f"option {opt!r} must be finite and positive, got {value!r}")
        defaults[opt] = float(value)
    return defaults


def build_policy(name: str, tree: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Instantiate the fairq scheduler for ``name`` over ``tree``."""
    import fairq

    key = check_policy(name)
    opts = policy_options(key, options)
    cls = getattr(fairq, POLICIES[key][0])
    return cls(tree, **opts)
