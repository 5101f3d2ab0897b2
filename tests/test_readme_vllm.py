"""The README's vLLM server quick start runs as written (issue 31, item 2).

Takes the ``bash`` block of the README that starts
``vllm.entrypoints.openai.api_server`` and runs it, unchanged, with
``bash -e`` in an empty folder, ``python`` being the serving interpreter
(``$FAIRQ_VLLM_SERVER_PYTHON``'s folder first on ``PATH``): it writes the
tiny model, starts the server on port 8000 with fairq's DLPM, waits for
it, asks for a completion as tenant ``alice``, prints fairq's metrics and
stops the server. Marker ``vllm_server``; about a minute on 2 cores (most
of it the server starting).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from test_docs_blocks import blocks

from reference.vllm import require_serving_vllm

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()


def _server_block() -> str:
    (block,) = [
        b
        for b in blocks("README.md")
        if b.lang == "bash" and "vllm.entrypoints.openai.api_server --model tiny-llama" in b.code
    ]
    return block.code


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_readme_server_quick_start_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the README's block uses curl")
    if not _port_free(8000):
        pytest.skip("port 8000 (vLLM's default, the README's) is in use here")
    from fairq.enginebench.server import engine_env, server_python

    py = server_python()
    env = {**os.environ, "PATH": f"{os.path.dirname(py)}{os.pathsep}{os.environ['PATH']}"}
    # offline, no usage stats, no thread binding on a shared machine (not the
    # KV-cache size: the block sets VLLM_CPU_KVCACHE_SPACE itself)
    env.update({k: v for k, v in engine_env().items() if k != "VLLM_CPU_KVCACHE_SPACE"})
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    for var in ("FAIRQ_VLLM_POLICY", "FAIRQ_VLLM_OPTIONS", "FAIRQ_VLLM_CONFIG"):
        env.pop(var, None)
    proc = subprocess.Popen(
        ["bash", "-e", "-c", _server_block()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the cleanup reaches the server
    )
    try:
        out, _ = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the README's block did not finish in 420 s:\n{out[-3000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the block left running
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out[-3000:]
    assert (tmp_path / "tiny-llama" / "config.json").exists()
    assert '"object":"text_completion"' in out.replace(" ", ""), out[-3000:]
    # fairq's per-tenant metrics name the tenant the request gave
    fairq_lines = [line for line in out.splitlines() if line.startswith("fairq_")]
    assert fairq_lines and any('tenant="alice"' in line for line in fairq_lines), out[-3000:]
