"""The package's layout: no import cycle among fairq's modules, the
integrations import no bench or simulator code, every module imports.

The cycle check is static: every ``import`` / ``from ... import`` statement
of every module under ``python/fairq`` (read with :mod:`ast`), **top-level
and function-level imports both counted** (an import inside a function is
still a dependency of the module; deferring it hides a cycle, it does not
remove one). Statements under ``if TYPE_CHECKING:`` are not counted: they
never run. ``from pkg import name`` depends on ``pkg.name`` when that is a
module, else on ``pkg``; importing ``a.b`` is a dependency on ``a.b`` only
(not on the package ``a``, whose ``__init__`` Python runs first: a package
that re-exports its own modules is not a cycle). Imports by name through
:mod:`importlib` (the packages' lazy exports) are not seen.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fairq

PACKAGE = Path(fairq.__file__).resolve().parent

#: The engine integrations: they translate an engine's events to fairq's
#: core and import neither the benches nor the simulator.
INTEGRATIONS = (
    "fairq.vllm",
    "fairq.sglang",
    "fairq.ray",
    "fairq.transformers",
    "fairq.integrations",
)
BENCH_AND_SIM = ("fairq.enginebench", "fairq.sim", "fairq.bench", "fairq.benchmarks", "fairq.soak")


def _modules() -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (source, is a package)}`` of every module of fairq
    (the compiled core by its stub)."""
    mods: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        mods[".".join(parts)] = (path, is_pkg)
    mods["fairq._core"] = (PACKAGE / "_core.pyi", False)
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of the nodes under an ``if TYPE_CHECKING:`` block."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: the fairq modules it imports}`` (see the module docstring)."""
    mods = _modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        if mod == "fairq._core":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _type_checking_nodes(tree)
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names if a.name.split(".")[0] == "fairq"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] == "fairq":
                    targets = [
                        f"{source}.{a.name}" if f"{source}.{a.name}" in mods else owner(source)
                        for a in node.names
                    ]
            graph[mod].update(t for t in targets if t and t != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_of_every_kind() -> None:
    graph = import_graph()
    # top level, absolute
    assert "fairq.enginebench.workload" in graph["fairq.enginebench.args"]
    # inside a function
    assert "fairq.sim.workloads" in graph["fairq.enginebench.args"]
    # the compiled core
    assert "fairq._core" in graph["fairq.sched"]
    # a cycle is found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    detail = "; ".join(" ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)
    assert not found, f"import cycles among fairq's modules: {detail}"


def test_integrations_import_no_bench_or_simulator_code() -> None:
    graph = import_graph()
    bad = sorted(
        (m, t)
        for m, targets in graph.items()
        if m.startswith(INTEGRATIONS)
        for t in targets
        if t.startswith(BENCH_AND_SIM)
    )
    assert not bad, f"integration modules importing bench or simulator code: {bad}"


def test_transformers_names_that_moved_still_resolve() -> None:
    """What users imported from ``fairq.transformers`` before the
    bench and simulator names moved out is the same object, at first use."""
    import fairq.transformers as tf
    from fairq.enginebench import workload
    from fairq.sim import fit, metrics

    assert tf.multi_client_workload is workload.multi_client_workload
    assert tf.EngineRequest is workload.EngineRequest
    assert tf.jain_index is metrics.jain_index
    assert tf.percentile is metrics.percentile
    assert tf.fit_step_time is fit.fit_step_time
    assert tf.StepTimeModel is fit.StepTimeModel
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tf.nope  # noqa: B018


_IMPORT_ALL = r"""
import importlib, sys, traceback
failed, skipped = [], []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as e:
        missing = (e.name or "").split(".")[0]
        if missing and missing != "fairq":
            skipped.append(f"{name} ({missing})")
        else:
            failed.append(f"{name}: {traceback.format_exc()}")
    except Exception:
        failed.append(f"{name}: {traceback.format_exc()}")
print("skipped:", ", ".join(skipped) or "none")
for f in failed:
    print("FAILED", f)
sys.exit(1 if failed else 0)
"""


def test_every_module_imports() -> None:
    """Each module imports (in a fresh interpreter, so an import-order cycle
    shows and nothing registered by an import leaks into other tests); a
    module whose optional engine (vLLM, SGLang, Ray, torch...) is missing
    here is skipped with its name."""
    names = sorted(m for m in _modules() if m not in ("fairq._core", "fairq.__main__"))
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *names],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_importing_an_integration_loads_no_bench_or_simulator() -> None:
    """At run time too: importing each integration package (and the
    transformers policy table) leaves the benches and the simulator
    unloaded."""
    code = (
        "import sys\n"
        "import fairq.vllm, fairq.sglang, fairq.transformers\n"
        "import fairq.transformers.policies\n"
        "import fairq.transformers.fit\n"
        f"bad = sorted(m for m in sys.modules if m.startswith({BENCH_AND_SIM!r}))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_engine_bench_engines_come_from_one_table() -> None:
    """``fairq engine-bench --engine`` offers exactly the table's engines,
    each module has the ``run(args)`` the table calls (and the
    ``add_arguments`` it promises), and the defaults come from the table."""
    import argparse
    import importlib
    import inspect

    from fairq.enginebench import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    (engine_arg,) = [a for a in parser._actions if a.dest == "engine"]
    assert tuple(engine_arg.choices or ()) == tuple(cli.ENGINES)
    for name, engine in cli.ENGINES.items():
        mod = importlib.import_module(engine.module)
        assert list(inspect.signature(mod.run).parameters) == ["args"], name
        if engine.own_arguments:
            assert callable(mod.add_arguments), name
        assert cli.DEFAULT_POLICIES.get(name) == engine.policies
        assert name in (engine_arg.help or "")


@pytest.mark.parametrize(
    "command", ["simulate", "bench", "soak", "engine-bench", "demo", "ray-bench"]
)
def test_every_command_still_parses(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``fairq`` command (the bench ones included, wherever their code
    lives) still builds its arguments and answers ``--help``."""
    from fairq.cli import COMMANDS, main

    assert command in COMMANDS
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert f"usage: fairq {command}" in capsys.readouterr().out
