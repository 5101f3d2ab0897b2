"""The ``fairq`` command line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only dispatches, so importing the CLI does not
import matplotlib, the simulator or transformers.

``--json -`` (every command that has ``--json``): the JSON document alone goes
to standard output, so ``fairq simulate --json - | jq`` parses; tables,
progress and notes go to standard error. ``main`` arranges it once for every
command: it points ``sys.stdout`` at standard error while the command runs,
and the command writes its document with :func:`write_json`, which knows the
real standard output.

A bad command line (an argument out of range, an output directory that does
not exist, a missing extra...) is refused before any work, as one line
``fairq COMMAND: error: ...`` with exit status 2: the checks live in
:mod:`fairq.cliargs`; ``main`` prints the line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from fairq import __version__
from fairq.cliargs import UsageError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("fairq.sim.cli", "run the DLPM paper's policy comparison in the simulator"),
    "bench": ("fairq.bench", "microbenchmarks: fairq vs the pure-Python queues it replaces"),
    "soak": (
        "fairq.soak",
        "millions of random operations per structure: conservation and memory over time",
    ),
    "engine-bench": (
        "fairq.enginebench.cli",
        "replay a multi-tenant workload on a real engine: transformers, vLLM's scheduler, "
        "a vLLM server",
    ),
    "demo": (
        "fairq.enginebench.demo",
        "stock vLLM vs fairq's DLPM in a real (tiny, CPU) vLLM server under a flood",
    ),
    "trace": (
        "fairq.sim.tracecli",
        "import a public trace (Mooncake's) into fairq's trace format; list the built-in ones",
    ),
    "ray-bench": (
        "fairq.enginebench.ray",
        "D2LPM vs Ray Serve's routers on a local Ray cluster with engine replicas",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse, with errors raised as :class:`UsageError` (``main`` prints
    them as one line and returns 2, so ``main`` is callable from tests)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fairq", description="Fair, prefix-aware request scheduling for LLM serving."
    )
    parser.add_argument("--version", action="version", version=f"fairq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        mod.add_arguments(p)
    return parser


def write_json(args: argparse.Namespace, payload: Any, *, indent: int = 1) -> None:
    """Write ``payload`` as JSON where ``args.json`` says: a file, or ``-``
    for the real standard output (the document alone; see the module doc)."""
    text = json.dumps(payload, indent=indent)
    if args.json == "-":
        out: TextIO = getattr(args, "_json_stdout", None) or sys.stdout
        out.write(text + "\n")
        out.flush()
    else:
        with open(args.json, "w") as f:
            f.write(text + "\n")


def usage_error(prog: str, error: object) -> int:
    """Print ``PROG: error: MESSAGE`` (one line) to standard error; return 2."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # name the command, as its own options would be
            prog = f"fairq {args.command}" if args.command else "fairq"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}", prog=prog)
    except UsageError as e:
        return usage_error(e.prog or "fairq", e)
    if args.command is None:
        parser.print_help()
        return 2
    prog = f"fairq {args.command}"
    try:
        mod = importlib.import_module(args._module)
    except ImportError as e:
        return usage_error(prog, f"unavailable ({e})")
    try:
        if getattr(args, "json", None) != "-":
            return int(mod.run(args) or 0)
        # --json -: stdout carries the JSON document alone; the rest goes to stderr.
        args._json_stdout = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            return int(mod.run(args) or 0)
    except UsageError as e:
        return usage_error(e.prog or prog, e)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
