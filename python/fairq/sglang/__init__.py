"""fairq.sglang: fairq's FCFS, LPM, VTC and DLPM inside SGLang's scheduler.

``fairq.sglang.install("fairq-dlpm", quantum=2048)`` before SGLang builds its
scheduler (in the scheduler's process) makes it order and admit waiting
requests by fairq's policy (:mod:`fairq.sglang.fair`), with prefix matches
from SGLang's own ``RadixCache`` (:mod:`fairq.sglang.mirror`) and tenants
from each request (:mod:`fairq.sglang.tenants`). Tested with SGLang 0.5.23.

SGLang is never imported by this package until :func:`install` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairq._lazy import lazy_attributes
from fairq.sglang.tenants import POLICIES, TenantResolver, make_options

if TYPE_CHECKING:  # pragma: no cover
    from fairq.sglang._install import install, uninstall

__all__ = ["POLICIES", "TESTED_VERSIONS", "TenantResolver", "install", "make_options", "uninstall"]

#: SGLang versions the integration is tested with.
TESTED_VERSIONS = ("0.5.23",)

_LAZY = {"install": "fairq.sglang._install", "uninstall": "fairq.sglang._install"}


__getattr__, __dir__ = lazy_attributes("fairq.sglang", _LAZY, globals())
