"""Modules that moved keep their old import paths (:data:`fairq._moved.MOVED`).

``fairq.integrations.ray`` is ``fairq.ray`` now, ``fairq.integrations.transformers``
``fairq.transformers``, and the bench machinery that was inside the vLLM and
SGLang integrations (``fairq.vllm.server``, ``.traffic``, ``.demo``,
``.harness``, ``fairq.sglang.harness``) is in ``fairq.enginebench``: users'
imports, and the import paths Ray Serve deployments carry, must keep giving
the very same modules and classes.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from fairq._moved import MOVED


def _import_or_skip(name: str) -> object:
    """``name`` imported; skipped where an optional dependency it needs (not
    fairq's own module) is missing, as in the wheel's test environments."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != "fairq":
            pytest.skip(f"{name} needs {e.name}")
        raise


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_package_is_the_new_module(old: str) -> None:
    new = _import_or_skip(MOVED[old])
    assert importlib.import_module(old) is new
    assert new.__name__ == MOVED[old]
    assert new.__spec__ is not None and new.__spec__.name == MOVED[old]


def test_old_submodule_and_class_are_the_new_ones() -> None:
    from fairq.integrations.ray.options import RouterOptions as Old
    from fairq.ray.options import RouterOptions as New

    assert Old is New
    old = importlib.import_module("fairq.integrations.ray.extract")
    assert old is importlib.import_module("fairq.ray.extract")
    assert old.__spec__ is not None and old.__spec__.name == "fairq.ray.extract"


def test_old_path_first_in_a_fresh_interpreter() -> None:
    """Imported by its old name before anything else: still one module."""
    code = (
        "import fairq.integrations.ray.feedback as a, sys; import fairq.ray.feedback as b; "
        "assert a is b and sys.modules['fairq.integrations.ray.feedback'] is b; "
        "assert b.__name__ == 'fairq.ray.feedback'; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_unknown_old_module_is_a_module_not_found_error() -> None:
    with pytest.raises(ModuleNotFoundError, match="fairq.ray.nope"):
        importlib.import_module("fairq.integrations.ray.nope")
