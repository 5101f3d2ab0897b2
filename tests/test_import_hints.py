"""Importing an integration without its extra names the extra (issue 31,
item 5): a fresh interpreter per case, torch and transformers hidden."""

from __future__ import annotations

import subprocess
import sys

import pytest

HIDE = "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"


@pytest.mark.parametrize(
    "code",
    [
        "from fairq.transformers import register",
        "from fairq.integrations.transformers import scheduler_type; scheduler_type('dlpm')",
        "import fairq.transformers.scheduler",
    ],
)
def test_the_transformers_integration_names_the_engine_extra(code: str) -> None:
    p = subprocess.run(
        [sys.executable, "-c", HIDE + code], capture_output=True, text=True, timeout=60
    )
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("fairq.extras.MissingExtra: "), p.stderr[-2000:]
    assert "pip install '.[engine]'" in last


def test_its_pure_python_parts_import_without_torch() -> None:
    code = HIDE + "from fairq.transformers import TenantResolver, make_options; print('ok')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_the_error_names_the_missing_module_as_any_import_error_does() -> None:
    """``MissingExtra.name`` is the missing module, as ``ImportError.name``
    is: code that skips a module whose engine is absent (the import test in
    tests/test_layout.py, a user's own) reads it there."""
    code = HIDE + (
        "try:\n"
        "    import fairq.transformers.scheduler\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e.name)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["MissingExtra", "transformers"], p.stdout + p.stderr[-2000:]


def test_require_names_the_first_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    from fairq.extras import MissingExtra, require

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingExtra) as e:
        require("sim", "demo", what="this", modules=("matplotlib", "tokenizers"))
    assert e.value.name == "matplotlib"
    assert str(e.value) == "this needs matplotlib, tokenizers: pip install '.[sim,demo]'"
