"""The installed package: its version is Cargo.toml's, and it is what the
tests run against (see conftest.py's FAIRQ_TEST_INSTALLED check)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import sysconfig
from pathlib import Path

import pytest

import fairq
import fairq._core

ROOT = Path(__file__).resolve().parent.parent


def cargo_version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    assert m is not None, "Cargo.toml has no [package] version"
    return m.group(1)


def test_version_is_cargo_toml_version() -> None:
    version = cargo_version()
    assert fairq.__version__ == version
    assert fairq._core.__version__ == version
    assert importlib.metadata.version("fairq") == version


def test_typing_files_ship_with_the_package() -> None:
    pkg = Path(fairq.__file__).parent
    assert (pkg / "py.typed").is_file()
    assert (pkg / "_core.pyi").is_file()
    assert Path(fairq._core.__file__ or "").name.startswith("_core.")


def test_builtin_traces_ship_with_the_package() -> None:
    """``--trace mooncake`` works from a wheel: the committed cuts, their
    licence and provenance are package data (fairq.sim.traces.DATA)."""
    from fairq.sim.traces import BUILTIN, DATA

    assert DATA.parent == Path(fairq.__file__).parent / "sim"
    for name in {b.file for b in BUILTIN.values()} | {"LICENSE-MOONCAKE", "README.md"}:
        assert (DATA / name).is_file(), name


@pytest.mark.skipif(
    not os.environ.get("FAIRQ_TEST_INSTALLED"),
    reason="FAIRQ_TEST_INSTALLED unset: not a run against an installed wheel",
)
def test_imported_from_site_packages_not_the_checkout() -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    checkout = (ROOT / "python").resolve()
    for mod in (fairq, fairq._core):
        path = Path(mod.__file__ or "").resolve()
        assert site in path.parents, path
        assert checkout not in path.parents, path
    assert Path(fairq._core.__file__ or "").name == "_core.abi3.so"
