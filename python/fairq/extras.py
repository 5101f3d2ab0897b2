"""fairq's optional extras and the one message for a missing one.

The extras are ``[project.optional-dependencies]`` in ``pyproject.toml``;
:data:`EXTRAS` names the modules each brings. fairq is installed from a
checkout (it is not on the package index), so the message says
``pip install '.[EXTRA]'``, run in the checkout, e.g. ``require("sim",
what="plotting", modules=("matplotlib",))`` without matplotlib raises
``MissingExtra("plotting needs matplotlib: pip install '.[sim]'")``.

:func:`require` looks modules up without importing them
(``importlib.util.find_spec``), so checking is cheap and happens before any
work; a module set to ``None`` in ``sys.modules`` (how tests hide one)
counts as missing.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtra", "install_hint", "missing", "require"]

#: extra -> the top-level modules it brings (as ``pyproject.toml`` lists them)
EXTRAS: dict[str, tuple[str, ...]] = {
    "yaml": ("yaml",),
    "sim": ("matplotlib", "tqdm"),
    "metrics": ("prometheus_client",),
    "engine": ("torch", "transformers", "psutil"),
    "ray": ("ray",),
    "demo": ("tokenizers", "httpx"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra
    that brings it and the ``pip install`` line, and ``name`` (as for any
    ``ImportError``) is the first missing module, e.g. ``"transformers"``."""


def install_hint(*extras: str) -> str:
    """``pip install '.[a,b]'`` for ``extras`` (each a key of :data:`EXTRAS`)."""
    for e in extras:
        if e not in EXTRAS:
            raise ValueError(f"unknown extra {e!r} (extras: {', '.join(EXTRAS)})")
    return f"pip install '.[{','.join(extras)}]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a bad spec
        return False


def missing(extra: str, what: str, cause: ImportError | None = None) -> MissingExtra:
    """The error for ``what`` failing on an ``ImportError`` of ``extra``'s
    module (``cause``: names the module when it knows it)."""
    module = getattr(cause, "name", None)
    name = module or ", ".join(EXTRAS[extra])
    return MissingExtra(
        f"{what} needs {name}: {install_hint(extra)}", name=module or EXTRAS[extra][0]
    )


def require(*extras: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extras`` is
    installed (``modules``: only these of them, e.g. ``("matplotlib",)`` of
    ``sim``). The message names all missing modules and one install line for
    the extras they come from: ``what needs ray, torch: pip install
    '.[ray,engine]'``."""
    gone: list[str] = []
    need: list[str] = []
    for extra in extras:
        mods = [m for m in EXTRAS[extra] if modules is None or m in modules]
        lost = [m for m in mods if not _installed(m)]
        if lost:
            gone += lost
            need.append(extra)
    if gone:
        raise MissingExtra(f"{what} needs {', '.join(gone)}: {install_hint(*need)}", name=gone[0])
