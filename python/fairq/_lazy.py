"""Lazy attributes of a package (PEP 562), the one implementation.

A package lists ``name -> module`` and gets a module ``__getattr__`` that
imports the module on first access (then caches the value in the package's
globals) and a ``__dir__`` that lists the lazy names too, so that importing
the package stays cheap and optional dependencies load only when used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose globals are ``namespace``:
    ``name`` in ``table`` is ``getattr(import_module(table[name]), name)``; any
    other name is an ``AttributeError`` naming ``package``."""

    def __getattr__(name: str) -> Any:
        mod = table.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(mod), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
