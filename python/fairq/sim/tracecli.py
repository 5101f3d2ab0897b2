"""``fairq trace``: import a public trace into fairq's one trace format.

``fairq trace import SOURCE -o OUT.jsonl``: SOURCE is a built-in trace's
name (:data:`fairq.sim.traces.BUILTIN`; its committed cut, with its options
as defaults) or a Mooncake FAST'25 JSONL file (``.gz`` too). Every option of
:class:`fairq.sim.traces.Options` is a flag; what each rule does is stated
in :mod:`fairq.sim.traces`. ``fairq trace list`` prints the built-in names.
The result replays wherever a trace goes (``fairq simulate --trace``,
``fairq engine-bench --trace``); a built-in name also goes there directly.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import asdict, fields
from typing import Any

from fairq.cliargs import (
    UsageError,
    count,
    non_negative,
    number,
    output_file,
    positive,
    trace_errors,
)

#: flag -> (Options field, argparse type, help)
FLAGS: dict[str, tuple[str, Any, str]] = {
    "--seed": ("seed", count(0), "seed of the tenant rule (and of the token ids on replay)"),
    "--tenants": ("tenants", count(1), "well-behaved tenants t0..t{N-1} (Zipf split)"),
    "--zipf": ("zipf", non_negative, "Zipf exponent of the tenants' session shares"),
    "--flood-share": (
        "flood_share",
        number(0, high=1),
        "share of sessions that go to the 'flood' tenant (0: none)",
    ),
    "--flood-speedup": (
        "flood_speedup",
        number(1),
        "the flood's arrivals replayed this many times faster",
    ),
    "--global-share": (
        "global_share",
        number(0, strict=True, high=1),
        "a block in at least this share of requests is global (not a session key)",
    ),
    "--start": ("start", non_negative, "window start, seconds into the trace"),
    "--minutes": ("minutes", positive, "window length in minutes (default: to the end)"),
    "--min-turns": ("min_turns", count(1), "keep sessions with at least this many requests"),
    "--requests": ("requests", count(1), "at most this many requests, whole sessions"),
    "--time-scale": ("time_scale", positive, "multiply arrival times (< 1: denser)"),
    "--length-scale": (
        "length_scale",
        number(0, strict=True, high=1),
        "multiply prompt, block and output lengths (blocks keep their count)",
    ),
    "--max-prompt-len": ("max_prompt_len", count(1), "fold longer prompts to their prefix"),
    "--max-output-len": ("max_output_len", count(1), "cap output lengths"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    sub.add_parser("list", help="the built-in traces")
    imp = sub.add_parser(
        "import",
        help="convert a Mooncake trace (a built-in name or a file) to fairq's trace format",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.add_argument("source", help="a built-in trace name (fairq trace list) or a Mooncake JSONL")
    imp.add_argument(
        "-o", "--output", required=True, type=output_file, help="the JSONL to write ('-': stdout)"
    )
    for flag, (name, kind, text) in FLAGS.items():
        imp.add_argument(flag, dest=name, type=kind, default=None, help=text)


def _options(args: argparse.Namespace, base: Any) -> Any:
    from fairq.sim.traces import Options

    given = {f.name: getattr(args, f.name) for f in fields(Options)}
    merged = {**asdict(base), **{k: v for k, v in given.items() if v is not None}}
    opts = Options(**merged)
    try:
        opts.check()
    except ValueError as e:
        flag = "--" + str(e).split()[0].replace("_", "-")
        raise UsageError(str(e), arg=flag) from None
    return opts


def _summary(lines: list[dict[str, Any]]) -> str:
    from fairq.sim.traces import implied_hit_rate

    by = collections.Counter(d["client"] for d in lines)
    tenants = ", ".join(f"{c} {n}" for c, n in sorted(by.items()))
    mean_in = sum(d["prompt_len"] for d in lines) / len(lines)
    return (
        f"{len(lines)} requests over {lines[-1]['time']:.1f} s, mean prompt {mean_in:,.0f} "
        f"tokens, block {lines[0]['block_size']}, hit rate implied by shared blocks "
        f"{implied_hit_rate(lines):.2f}; tenants: {tenants}"
    )


def run(args: argparse.Namespace) -> int:
    from fairq.sim import traces

    if args.trace_command == "list":
        for name, b in traces.BUILTIN.items():
            print(f"{name}: {b.description}")
        return 0
    if args.trace_command != "import":
        raise UsageError("needs an ACTION: import or list")
    builtin = traces.builtin_of(args.source)
    if builtin is not None:
        path, base = traces.DATA / builtin.file, builtin.options
    else:
        path, base = args.source, traces.Options()
    opts = _options(args, base)
    with trace_errors(args.source, "source"):
        recs = traces.read_mooncake(traces.open_text(path), str(args.source))
    try:
        lines = traces.import_mooncake(recs, opts)
    except ValueError as e:
        raise UsageError(str(e)) from None
    text = "".join(json.dumps(d) + "\n" for d in lines)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    print(_summary(lines), file=sys.stderr)
    return 0
