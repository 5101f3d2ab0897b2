"""What every engine of ``fairq engine-bench`` reads from its arguments the
same way: the workload it replays (:func:`workload`), ``--policies``
(:func:`policy_list`) and DLPM's options (:func:`dlpm_options`); and how it
writes ``--json`` (:func:`write_results`).

Used by :mod:`fairq.enginebench.cli` and by the engines' modules; imports
none of them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fairq.enginebench.workload import EngineRequest, from_sim_workload, multi_client_workload

__all__ = ["dlpm_options", "policy_list", "vocab", "workload", "write_results"]


def vocab(args: argparse.Namespace) -> int:
    """The model's vocabulary (the vLLM server's models have their own sizes)."""
    if args.engine in ("vllm-server", "ray-vllm"):
        from fairq.enginebench.server import MODEL_SIZES as SERVER_SIZES

        return SERVER_SIZES[args.model]["vocab_size"]
    from fairq.transformers.model import MODEL_SIZES

    return int(MODEL_SIZES[args.model]["vocab_size"])


def workload(args: argparse.Namespace) -> list[EngineRequest]:
    """The workload every engine replays, built (and a trace parsed) before
    any work: a bad ``--workload`` or ``--trace`` is a
    :class:`~fairq.cliargs.UsageError` naming it."""
    from fairq.cliargs import UsageError, read_trace

    size = vocab(args)
    if getattr(args, "trace", None):
        wl = read_trace(args.trace, args.seed)
        return from_sim_workload(wl, size, args.max_new_tokens)
    if args.workload == "flood":
        return multi_client_workload(
            n_clients=args.clients,
            requests_per_client=2 if args.quick else args.requests_per_client,
            flood_factor=args.flood_factor,
            prefix_len=args.prefix_len,
            suffix_len=args.suffix_len,
            max_new_tokens=4 if args.quick else args.max_new_tokens,
            vocab_size=size,
            well_behaved_gap=args.gap,
            seed=args.seed,
            docs_per_client=args.docs_per_client,
            system_len=args.system_len,
            flood_gap=args.flood_gap,
        )
    if args.workload.startswith("sim:"):
        from fairq.sim.workloads import make_workload

        try:
            sim = make_workload(
                args.workload[4:], scale=args.scale, duration=args.duration, seed=args.seed
            )
        except ValueError as e:
            raise UsageError(str(e), arg="--workload") from None
        wl_requests = from_sim_workload(sim, size, max_new_tokens=args.max_new_tokens)
        if not wl_requests:
            raise UsageError(
                f"{args.workload} has no requests at --scale {args.scale:g} "
                f"--duration {args.duration:g} (raise them)",
                arg="--workload",
            )
        return wl_requests
    raise UsageError(
        f"must be flood or sim:NAME (or reasoning with --engine vllm), got {args.workload!r}",
        arg="--workload",
    )


def dlpm_options(args: argparse.Namespace) -> dict[str, Any]:
    """DLPM's options from ``--quantum``, and when given ``--quantum-scale``
    (the automatic quantum's scale; absent: the core's default) and
    ``--strict-credit`` / ``--no-strict-credit`` (absent: on with the
    automatic quantum, off with a fixed one)."""
    options: dict[str, Any] = {"quantum": args.quantum}
    if getattr(args, "quantum_scale", None):
        options["quantum_scale"] = args.quantum_scale
    if getattr(args, "strict_credit", None) is not None:
        options["strict_credit"] = bool(args.strict_credit)
    return options


def policy_list(args: argparse.Namespace, known: tuple[str, ...], note: str) -> list[str]:
    """``--policies`` as a list (case-insensitive), each one of ``known``;
    a :class:`~fairq.cliargs.UsageError` naming ``--policies`` (and ``note``,
    what the names mean for this engine) otherwise."""
    from fairq.cliargs import UsageError

    names = [p.strip().lower() for p in args.policies.split(",") if p.strip()]
    if not names:
        raise UsageError("names no policy", arg="--policies")
    for p in names:
        if p not in known:
            raise UsageError(
                f"{p!r} is not one of {', '.join(known)} for --engine {args.engine} ({note})",
                arg="--policies",
            )
    return names


def write_results(args: argparse.Namespace, document: dict[str, Any], *, indent: int = 1) -> None:
    """With ``--json``: write ``document`` (:func:`fairq.cli.write_json`),
    after a ``command`` field holding this ``fairq engine-bench`` command
    line; nothing without it."""
    if not args.json:
        return
    from fairq.cli import write_json

    command = "fairq engine-bench " + " ".join(sys.argv[2:])
    write_json(args, {"command": command, **document}, indent=indent)
