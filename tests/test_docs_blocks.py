"""Every code block in README.md and docs/USAGE.md runs as written.

A newcomer copies one block at a time, so each block runs on its own, in a
fresh interpreter (``python``) or shell (``bash``), in an empty folder that
holds the repository's ``examples/``. The line just above a block's fence
may say otherwise:

- ``<!-- doctest: skip REASON -->``: shown, not run; REASON says why and
  what runs it instead (an install, a server with a real model ...).
- ``<!-- doctest: needs MOD [MOD ...] -->``: run when those modules import,
  else skipped naming the extra that brings them.
- ``<!-- doctest: vllm-config POLICY -->`` (yaml blocks): the options file
  of fairq's vLLM scheduler, validated as the scheduler validates it.

A yaml block without a marker must parse; a ``text`` block is shown output
and not run. Any other language needs a marker.
Every relative link in the README and docs/ leads to a file that exists and,
with ``#anchor``, to a heading there. The installed-wheel runs of
``.ci/test-wheel`` skip the blocks: they ran against the build already.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/USAGE.md")
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*doctest:\s*(\S+)\s*(.*?)\s*-->\s*$")


def _install_hint(module: str) -> str:
    """How to get ``module``: the extra of pyproject.toml that brings it
    (fairq.extras), or, for an engine that is not an extra, the README."""
    from fairq.extras import EXTRAS, install_hint

    extra = next((e for e, mods in EXTRAS.items() if module in mods), None)
    return install_hint(extra) if extra else "not an extra: see the README"


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mark: str | None  # skip / needs / vllm-config
    arg: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    out: list[Block] = []
    lines = (ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        mark = MARK.match(lines[start - 1]) if start else None
        out.append(
            Block(
                doc,
                start + 1,
                m.group(1),
                "\n".join(lines[start + 1 : j]) + "\n",
                mark.group(1) if mark else None,
                mark.group(2) if mark else "",
            )
        )
        i = j + 1
    return out


ALL = [b for d in DOCS for b in blocks(d)]


def test_the_docs_have_blocks_and_every_marker_is_known() -> None:
    assert len(ALL) > 20
    for b in ALL:
        assert b.mark in (None, "skip", "needs", "vllm-config"), b.id
        if b.mark == "skip":
            assert b.arg, f"{b.id}: a skipped block says why"
        if b.mark is None:
            assert b.lang in ("python", "bash", "yaml", "text"), (
                f"{b.id}: a ```{b.lang} block needs a doctest marker"
            )


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


#: docs/*.md and docs/design/*.md (the design notes ARCHITECTURE.md points to)
DOC_FILES = sorted(
    str(p.relative_to(ROOT)) for d in ("docs", "docs/design") for p in (ROOT / d).glob("*.md")
)

LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", ["README.md", *DOC_FILES])
def test_relative_links_resolve(doc: str) -> None:
    src = ROOT / doc
    bad = []
    for target in LINK.findall(src.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (src.parent / path).resolve() if path else src
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, f"{doc}: " + "; ".join(bad)


PATH_REF = re.compile(r"`((?:rust|python|tests|docs|benches|examples|\.ci)/[\w./-]*)(.)")


@pytest.mark.parametrize("doc", ["README.md", *DOC_FILES])
def test_paths_named_in_the_docs_exist(doc: str) -> None:
    """A file or folder of the repository named in backquotes exists (a
    module path such as ``python/fairq/sim/engine.py`` or ``rust/wfq/``)."""
    missing = sorted(
        {
            ref
            for ref, after in PATH_REF.findall((ROOT / doc).read_text())
            # a pattern (test_<x>.py, test_vllm_server*.py) or another
            # project's path (docs/.../x.md) is not a file of this one
            if after not in "*<" and "..." not in ref and not (ROOT / ref.rstrip(".")).exists()
        }
    )
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def _workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.id)
def test_block_runs(block: Block, tmp_path: Path) -> None:
    if os.environ.get("FAIRQ_TEST_INSTALLED"):
        pytest.skip("the docs' blocks ran against the build already")
    if block.mark == "skip":
        pytest.skip(f"not run: {block.arg}")
    if block.lang == "text":
        pytest.skip("shown output, not code")
    if block.mark == "needs":
        for mod in block.arg.split():
            if importlib.util.find_spec(mod) is None:
                pytest.skip(f"needs {mod} ({_install_hint(mod)})")
    if block.lang == "yaml":
        yaml = pytest.importorskip("yaml", reason="needs pyyaml (pip install '.[yaml]')")
        data = yaml.safe_load(block.code)
        if block.mark == "vllm-config":
            from fairq.vllm.dualphase import DualPhaseOptions
            from fairq.vllm.tenants import FairOptions

            FairOptions.from_mapping(block.arg, data)
            if "dual_phase" in data:
                DualPhaseOptions.from_mapping(data["dual_phase"])
        return
    if block.lang == "python":
        cmd = [sys.executable, "-c", block.code]
    else:
        assert block.lang == "bash", block.id
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    proc = subprocess.run(
        cmd,
        cwd=_workdir(tmp_path),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"{block.id} ({block.lang}) failed with status {proc.returncode}:\n"
        f"{block.code}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )
