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
