"""``fairq engine-bench``: its arguments and the table of engines
(:data:`ENGINES`): each ``--engine`` names the module that benches it
(:mod:`fairq.enginebench.transformers`, :mod:`fairq.enginebench.vllm`,
:mod:`fairq.enginebench.vllm_server`, :mod:`fairq.enginebench.ray_vllm`),
whose ``run(args)`` reads the workload and ``--policies`` the same way
(:mod:`fairq.enginebench.args`)."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from fairq.enginebench.args import policy_list
from fairq.engineopts import POLICIES
from fairq.transformers.model import MODEL_SIZES


@dataclass(frozen=True)
class Engine:
    """One ``--engine``.

    ``module``: the module that benches it; its ``run(args) -> int`` checks
    the engine's arguments and the workload before any work.
    ``own_arguments``: the module's ``add_arguments(parser)`` adds options
    of this engine alone (added to ``fairq engine-bench`` in table order).
    ``policies``: the default ``--policies`` (``None``: the engine takes
    none). ``help``: its line in ``--engine``'s help.
    """

    module: str
    own_arguments: bool
    policies: str | None
    help: str


#: Every ``--engine``, in the order of ``--help``.
ENGINES: dict[str, Engine] = {
    "transformers": Engine(
        "fairq.enginebench.transformers",
        own_arguments=False,
        policies="fifo,fcfs,lpm,vtc,dlpm",
        help="its continuous-batching engine with a random-weight model "
        "(needs the engine extra: pip install '.[engine]')",
    ),
    "vllm": Engine(
        "fairq.enginebench.vllm",
        own_arguments=False,
        policies="fifo,fcfs,vtc,lpm,dlpm",
        help="vLLM's real scheduler, step times simulated (fairq.enginebench.vllm)",
    ),
    "vllm-server": Engine(
        "fairq.enginebench.vllm_server",
        own_arguments=True,
        policies="vllm,fcfs,vtc,lpm,dlpm",
        help="real vLLM OpenAI servers under HTTP traffic (fairq.enginebench.vllm_server; "
        "policies: vllm for stock vLLM, fairq's fcfs, vtc, lpm, dlpm...)",
    ),
    "ray-vllm": Engine(
        "fairq.enginebench.ray_vllm",
        own_arguments=True,
        policies=None,
        help="vLLM replicas on Ray Serve behind a router (fairq.enginebench.ray_vllm; "
        "--configs, not --policies)",
    ),
}

#: ``--policies`` of each ``--engine`` when not given
DEFAULT_POLICIES = {name: e.policies for name, e in ENGINES.items() if e.policies is not None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fairq engine-bench``."""
    from fairq.cliargs import count, non_negative, output_file, positive
    from fairq.cliargs import quantum as quantum_arg

    parser.add_argument(
        "--engine",
        choices=tuple(ENGINES),
        default="transformers",
        help="; ".join(f"{name}: {e.help}" for name, e in ENGINES.items()),
    )
    parser.add_argument(
        "--waiting",
        type=count(0),
        default=10_000,
        help="vllm: also measure fairq's time per schedule() with this many requests "
        "waiting (0: skip)",
    )
    parser.add_argument(
        "--policies",
        default=None,
        help="comma-separated: fifo (the engine's own scheduler) and fairq policies "
        f"({', '.join(POLICIES)}); vllm-server: vllm (stock vLLM) and fairq's "
        "(default: " + "; ".join(f"{e}: {p}" for e, p in DEFAULT_POLICIES.items()) + ")",
    )
    parser.add_argument(
        "--model",
        choices=sorted(MODEL_SIZES),
        default="tiny",
        help="random-weight Llama-style model size (1b: use on a GPU)",
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="model dtype (auto: bfloat16 on cuda, else float32)",
    )
    parser.add_argument(
        "--threads",
        type=count(1),
        default=None,
        help="torch CPU threads (default 1 on CPU: steadier timings on a shared "
        "machine; torch's default elsewhere)",
    )
    parser.add_argument(
        "--workload",
        default="flood",
        help="flood (built-in: one client floods, per-client shared prefixes), "
        "sim:NAME for the simulator's qa/tot/judge/chat workloads, or reasoning "
        "(--engine vllm: long think, short output, one tenant flooding with long "
        "reasoning; its own engine limits, fairq.enginebench.reasoning; policies "
        "vllm-fcfs, dual, dual+dlpm, dual+vtc, dlpm, vtc)",
    )
    parser.add_argument(
        "--scale",
        type=positive,
        default=0.02,
        help="length scale of a sim: workload (default 0.02: CPU-sized)",
    )
    parser.add_argument(
        "--duration",
        type=positive,
        default=20.0,
        help="arrival window of a sim: workload in seconds",
    )
    parser.add_argument(
        "--clients", type=count(2), default=4, help="clients incl. the flooding one (>= 2)"
    )
    parser.add_argument("--requests-per-client", type=count(1), default=6)
    parser.add_argument(
        "--flood-factor",
        type=count(1),
        default=4,
        help="the misbehaving client sends this many times more requests",
    )
    parser.add_argument("--prefix-len", type=count(0), default=64, help="shared prefix per client")
    parser.add_argument(
        "--docs-per-client",
        type=count(1),
        default=1,
        help="prefixes (documents) per client of the flood workload; a client's "
        "requests cycle through them (default 1: one system prompt each)",
    )
    parser.add_argument("--suffix-len", type=count(1), default=16)
    parser.add_argument("--max-new-tokens", type=count(1), default=16)
    parser.add_argument(
        "--gap",
        type=non_negative,
        default=0.0,
        help="seconds between a well-behaved client's requests",
    )
    parser.add_argument("--page-size", type=count(1), default=16)
    parser.add_argument("--num-blocks", type=count(1), default=256)
    parser.add_argument("--max-batch-tokens", type=count(1), default=256)
    parser.add_argument("--max-requests-per-batch", type=count(1), default=4)
    parser.add_argument(
        "--quantum",
        type=quantum_arg,
        default=128.0,
        help="DLPM quantum: > 0 (fixed) or auto (derived from the request charges)",
    )
    parser.add_argument(
        "--quantum-scale",
        type=positive,
        default=None,
        help="DLPM with --quantum auto: the automatic quantum's scale (a refill gives this "
        "many mean uncached request costs; default: the core's, 0.8) (vllm, vllm-server, ray-vllm, "
        "transformers)",
    )
    parser.add_argument(
        "--strict-credit",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="DLPM: admit a request only when its client's credit covers its charge "
        "(strict_credit, ALGORITHMS.md section 6; default: on with --quantum auto, off with "
        "a fixed quantum, as in the engines) (vllm, vllm-server, ray-vllm, transformers)",
    )
    parser.add_argument("--seed", type=count(0), default=0)
    parser.add_argument(
        "--seeds",
        type=count(1),
        default=3,
        help="reasoning workload: run seeds --seed .. --seed + N - 1 and report the spread",
    )
    parser.add_argument(
        "--json",
        default=None,
        type=output_file,
        help="write the results as JSON to this path ('-': the document alone on stdout)",
    )
    parser.add_argument("--quick", action="store_true", help="small workload (smoke test)")
    parser.add_argument(
        "--system-len",
        type=count(0),
        default=0,
        help="flood workload: a system prompt of this many tokens before every document "
        "(shared by all tenants)",
    )
    parser.add_argument(
        "--flood-gap",
        type=non_negative,
        default=0.0,
        help="flood workload: seconds between the flooding client's requests (0: all at once)",
    )
    for engine in ENGINES.values():
        if engine.own_arguments:
            importlib.import_module(engine.module).add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fairq engine-bench``: every argument, the workload
    and the engine's dependencies are checked before any work."""
    if args.workload == "reasoning":
        from fairq.cliargs import UsageError
        from fairq.enginebench import reasoning

        if args.engine != "vllm":
            raise UsageError(
                "the reasoning workload runs on vLLM's scheduler: use --engine vllm",
                arg="--workload",
            )
        if args.policies is None:
            args.policies = reasoning.DEFAULT_POLICIES
        names = policy_list(args, ("fifo", *reasoning.POLICIES), reasoning.POLICY_NOTE)
        return reasoning.run(args, ["vllm-fcfs" if p == "fifo" else p for p in names])
    engine = ENGINES[args.engine]
    if args.policies is None:
        args.policies = engine.policies
    return int(importlib.import_module(engine.module).run(args))
