"""vLLM's own load client against the real server with fairq inside (issue 32).

A serving team trusts its engine's own benchmark client more than ours: this
drives ``python -m vllm.entrypoints.openai.api_server`` (vLLM's CPU build,
``$FAIRQ_VLLM_SERVER_PYTHON``, a random-weight model written here) with
vLLM's serving benchmark, ``vllm.benchmarks.serve`` (the CPU build's ``vllm``
console script fails on its distribution name and the module has no
``__main__``, so it runs as ``add_cli_args`` + ``main``, :data:`CLIENT`), one
client process per tenant, each naming its tenant in the request body
(``--extra-body '{"vllm_xargs": {"tenant": ...}}'``: fairq's ``extra_args``
tenant source). A flood tenant sends its requests at once on one shared
prefix; three well-behaved tenants join 1 s later, and not before half the
flood waits in vLLM's scheduler, each on its own
prefix (``--dataset-name random --random-prefix-len``). Stock vLLM against
fairq's VTC and DLPM: nothing fails, the well-behaved tenants' median latency
falls under VTC and their first tokens come sooner under DLPM; each policy's
throughput is printed (a measurement, not a check).

Marker ``vllm_server``. Three servers (~45 s each to start on 2 quiet
cores), four client processes per run (~15 s of imports, overlapped), ~12 s
of traffic: about 4 minutes on quiet cores; 7.9 minutes measured on the
shared, loaded machine (docs/results/vllm_server.md).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fairq.enginebench.server import server_python, write_model

from reference.vllm import require_serving_vllm, vllm_server, wait_until_waiting

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()

#: vLLM's serving benchmark as a command (the module has no ``__main__``):
#: ``CLIENT READY GO args...`` imports it (~15 s on 2 cores), touches READY,
#: waits for GO to exist, then runs: every tenant starts when the test says,
#: not when its imports happen to finish.
CLIENT = (
    "import argparse, os, sys, time\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = argparse.ArgumentParser(); add_cli_args(p); args = p.parse_args(sys.argv[3:])\n"
    "open(sys.argv[1], 'w').close()\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
    "main(args)\n"
)

#: tenant -> (requests, request rate per second (inf: all at once), start
#: delay s, seed: its own random prefix)
TENANTS: dict[str, tuple[int, float, float, int]] = {
    "flood": (96, float("inf"), 0.0, 1),
    "well0": (6, 4.0, 1.0, 2),
    "well1": (6, 4.0, 1.0, 3),
    "well2": (6, 4.0, 1.0, 4),
}
PREFIX_LEN, INPUT_LEN, OUTPUT_LEN = 384, 16, 32


def client_command(url: str, model: str, tenant: str, out: Path) -> list[str]:
    """One tenant's run of vLLM's serving benchmark (completions, streamed),
    started by the file ``<out>.go`` (:data:`CLIENT`). No initial test
    request (``--ready-check-timeout-sec 0``): under stock vLLM it would wait
    behind the flood and start the tenant's measured requests after it."""
    n, rate, _, seed = TENANTS[tenant]
    return [
        server_python(),
        "-c",
        CLIENT,
        f"{out}.ready",
        f"{out}.go",
        "--ready-check-timeout-sec",
        "0",
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        model,
        "--dataset-name",
        "random",
        "--random-prefix-len",
        str(PREFIX_LEN),
        "--random-input-len",
        str(INPUT_LEN),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--ignore-eos",
        "--num-prompts",
        str(n),
        "--request-rate",
        str(rate),
        "--seed",
        str(seed),
        "--extra-body",
        json.dumps({"vllm_xargs": {"tenant": tenant}}),
        "--percentile-metrics",
        "ttft,e2el",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
    ]


def run(model: str, policy: str | None, tmp: Path) -> dict[str, Any]:
    """Every tenant's client at once against a fresh server; returns each
    tenant's result file and the run's wall time."""
    args = ["--max-num-seqs", "4", "--max-num-batched-tokens", "512"]
    args += ["--num-gpu-blocks-override", "16"]
    name = policy or "stock"
    with vllm_server(model, policy, args=args, log=tmp / f"{name}.log", max_model_len=1024) as s:
        procs = {}
        for tenant in TENANTS:
            out = tmp / f"{name}-{tenant}.json"
            log = open(tmp / f"{name}-{tenant}.log", "wb")  # noqa: SIM115
            cmd = client_command(s.url, model, tenant, out)
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            procs[tenant] = (proc, out, log)
        deadline = time.monotonic() + 180
        for tenant, (proc, out, _) in procs.items():
            while not Path(f"{out}.ready").exists():
                assert proc.poll() is None, (tenant, _log(tmp, name, tenant))
                assert time.monotonic() < deadline, f"{tenant}'s client did not start"
                time.sleep(0.05)
        t0 = time.monotonic()
        queued = False
        for tenant, (_, _, delay, _) in sorted(TENANTS.items(), key=lambda kv: kv[1][2]):
            if delay > 0 and not queued:  # once, before the first well-behaved tenant
                # most of the flood waits in vLLM: its client samples and
                # tokenizes its prompts after its signal, so a fixed delay
                # alone raced it (in one quiet run stock vLLM served the
                # well-behaved tenants at once, no contention to measure)
                want = TENANTS["flood"][0] // 2
                assert wait_until_waiting(s.url, want, deadline), "the flood never queued"
                queued = True
            while time.monotonic() - t0 < delay:
                time.sleep(0.01)
            Path(f"{procs[tenant][1]}.go").touch()
        for tenant, (proc, _, log) in procs.items():
            rc = proc.wait(timeout=300)
            log.close()
            assert rc == 0, (tenant, _log(tmp, name, tenant))
        wall = time.monotonic() - t0
    results = {t: json.loads(out.read_text()) for t, (_, out, _) in procs.items()}
    return {"wall_s": wall, "tenants": results}


def _log(tmp: Path, name: str, tenant: str) -> str:
    return (tmp / f"{name}-{tenant}.log").read_text(errors="replace")[-3000:]


def summary(r: dict[str, Any]) -> dict[str, Any]:
    t = r["tenants"]
    well = [t[k] for k in t if k != "flood"]
    tokens = sum(x["total_output_tokens"] for x in t.values())
    return {
        "completed": {k: x["completed"] for k, x in t.items()},
        "failed": {k: x.get("failed", 0) for k, x in t.items()},
        # the median of the three well-behaved tenants' median latencies
        "well_median_e2el_s": sorted(x["median_e2el_ms"] for x in well)[1] / 1000,
        "well_median_ttft_s": sorted(x["median_ttft_ms"] for x in well)[1] / 1000,
        "flood_median_e2el_s": t["flood"]["median_e2el_ms"] / 1000,
        "output_tok_s": tokens / r["wall_s"],
        "wall_s": r["wall_s"],
    }


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Slow enough per step that the flood is still queued when the
    well-behaved tenants arrive (see test_vllm_server.py)."""
    return write_model(tmp_path_factory.mktemp("model"), "small")


def test_vllm_benchmark_client_as_tenants(small_model: str, tmp_path: Path) -> None:
    runs = {p or "stock": summary(run(small_model, p, tmp_path)) for p in (None, "vtc", "dlpm")}
    print(json.dumps(runs, indent=1))
    for name, r in runs.items():
        want = {k: v[0] for k, v in TENANTS.items()}
        assert r["completed"] == want, (name, r)
        assert not any(r["failed"].values()), (name, r)
    stock = runs["stock"]
    # stock serves the flood first; VTC serves the well-behaved tenants
    # between its requests (measured: 7.9 s -> 0.43 s at larger scale, issue
    # 32; 0.35-0.37x here): a margin far beyond the shared machine's noise
    assert runs["vtc"]["well_median_e2el_s"] < 0.7 * stock["well_median_e2el_s"], runs
    # DLPM puts them ahead of the flood too: their first token comes sooner
    # (TTFT 0.23-0.61x stock's, measured). Their end-to-end latency also
    # depends on how fast this 16-block cache decodes once DLPM interleaves
    # documents (0.15-0.97x stock's measured), so it is not asserted.
    assert runs["dlpm"]["well_median_ttft_s"] < stock["well_median_ttft_s"], runs
    # Throughput is printed, not asserted: a ratio of two 15 s wall times on
    # a shared machine is a benchmark, not a check (DLPM/stock measured 0.85x
    # quiet and 0.73x in a loaded CI run; docs/results/vllm_server.md).
