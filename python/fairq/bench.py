"""``fairq bench``: run the microbenchmark suites and print their tables."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import platform
import sys
from typing import Any

import fairq.benchmarks as suites_pkg
from fairq.benchmarks import Row, markdown_table
from fairq.cli import write_json
from fairq.cliargs import output_file


def available_suites() -> list[str]:
    """Names of the suite modules in ``fairq.benchmarks``."""
    return sorted(m.name for m in pkgutil.iter_modules(suites_pkg.__path__))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--suite",
        action="append",
        choices=available_suites(),
        help="suite to run (repeatable; default: all)",
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument(
        "--json",
        metavar="FILE",
        type=output_file,
        help="also write all rows as JSON to FILE ('-': stdout, tables on stderr)",
    )


def machine() -> str:
    """One line naming the machine the numbers came from."""
    return (
        f"{platform.machine()} {platform.processor() or ''} {platform.system()} "
        f"Python {platform.python_version()}".replace("  ", " ")
    )


def run(args: argparse.Namespace) -> int:
    names = args.suite or available_suites()
    all_rows: list[Row] = []
    print(f"fairq bench on {machine()}\n")
    for name in names:
        mod = importlib.import_module(f"fairq.benchmarks.{name}")
        title = getattr(mod, "TITLE", name)
        print(f"## {title}\n", flush=True)
        rows: list[Row] = mod.run(quick=args.quick)
        print(markdown_table(rows) + "\n", flush=True)
        all_rows.extend(rows)
    if args.json:
        payload: dict[str, Any] = {
            "machine": machine(),
            "rows": [r.as_dict() for r in all_rows],
        }
        write_json(args, payload, indent=2)
    return 0


if __name__ == "__main__":  # pragma: no cover
    from fairq.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
