"""Modules that moved keep their old import paths (installed by ``import fairq``).

Every engine integration lives in one place, a package named after the
engine directly under ``fairq`` (``fairq.vllm``, ``fairq.sglang``,
``fairq.transformers``, ``fairq.ray``), and the bench machinery that starts
servers and drives them lives in ``fairq.enginebench``. Code written against
the old paths keeps working: importing an old name (:data:`MOVED`, or a
module below one) gives the very module object of the new name (the same
classes, so ``isinstance`` holds, and import paths stored in configuration,
such as Ray's ``fairq.integrations.ray.router:FairqD2LPMRouter``, resolve).
New code should use the new paths. Nothing is imported until an old name is.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

#: old package -> the package it moved to
MOVED = {
    "fairq.integrations.ray": "fairq.ray",
    "fairq.integrations.transformers": "fairq.transformers",
    "fairq.vllm.server": "fairq.enginebench.server",
    "fairq.vllm.traffic": "fairq.enginebench.traffic",
    "fairq.vllm.demo": "fairq.enginebench.demo",
    "fairq.vllm.harness": "fairq.enginebench.harness.vllm",
    "fairq.sglang.harness": "fairq.enginebench.harness.sglang",
}


def _target(fullname: str) -> str | None:
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as its new module (one object under both names)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _target(fullname)
        if new is None:
            return None
        real = importlib.import_module(new)  # its errors (a missing extra) propagate
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=hasattr(real, "__path__"), loader_state=real
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        real: ModuleType = spec.loader_state
        # the import machinery writes spec attributes on what this returns:
        # keep the real module's own, restored in exec_module
        spec.loader_state = (real, real.__spec__, real.__loader__, real.__package__)
        return real

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        real, own_spec, own_loader, own_package = spec.loader_state if spec else (module,) * 4
        real.__spec__, real.__loader__, real.__package__ = own_spec, own_loader, own_package
        if getattr(own_spec, "submodule_search_locations", None) is not None:
            real.__path__ = list(own_spec.submodule_search_locations)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())


install()
