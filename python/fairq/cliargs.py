"""Argument checks shared by the ``fairq`` commands.

One place for what every command checks before it does any work: numbers in
range (and finite), output files whose directory exists and is writable, plot
files matplotlib can write, traces parsed and validated, extras installed. A
bad argument ends the command the same way everywhere, argparse's way: one
line ``fairq COMMAND: error: argument --x: ...`` on standard error and exit
status 2.

- While parsing: the ``type=`` functions :func:`number` (and its shorthands
  :func:`count`, :func:`positive`, :func:`non_negative`), :func:`output_file`
  and :func:`plot_file` raise ``argparse.ArgumentTypeError``; argparse
  names the argument.
- After parsing, for what needs several arguments or a file's contents
  (a trace parsed with the seed, a policy list, an extra): a command's
  ``run`` calls :func:`need`, :func:`read_trace` or raises
  :class:`UsageError` first, before any work; :func:`fairq.cli.main` prints
  it the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from fairq.extras import MissingExtra, require

__all__ = [
    "UsageError",
    "count",
    "count_list",
    "need",
    "non_negative",
    "number",
    "output_file",
    "plot_file",
    "positive",
    "quantum",
    "read_trace",
]


class UsageError(Exception):
    """A bad command line. ``str()`` is the message after ``error:``
    (``argument --x: ...`` when ``arg`` is given); ``prog`` the command
    (``fairq simulate``) when known."""

    def __init__(self, message: str, *, arg: str | None = None, prog: str | None = None) -> None:
        super().__init__(f"argument {arg}: {message}" if arg else message)
        self.prog = prog


def number(
    low: float,
    *,
    strict: bool = False,
    integer: bool = False,
    inf: bool = False,
    high: float | None = None,
) -> Callable[[str], Any]:
    """An argparse ``type=``: a number ``>= low`` (``> low`` when ``strict``;
    ``<= high`` when given), an ``int`` when ``integer``, else a finite
    ``float`` (``inf`` also accepted when ``inf``; NaN never)."""
    op = ">" if strict else ">="
    if integer:
        want = f"an integer {op} {low:g}"
    elif inf:
        want = f"a number {op} {low:g} or inf"
    else:
        want = f"a finite number {op} {low:g}"
    if high is not None:
        want += f" and <= {high:g}"

    def convert(text: str) -> Any:
        try:
            v: Any = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        ok = not math.isnan(v) and (v > low if strict else v >= low)
        if ok and not integer and math.isinf(v):
            ok = inf and v > 0
        if ok and high is not None:
            ok = v <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text}")
        return v

    convert.__name__ = "integer" if integer else "number"
    return convert


def count(low: int = 1) -> Callable[[str], int]:
    """An integer ``>= low`` (argparse ``type=``)."""
    return number(low, integer=True)


def count_list(low: int = 1) -> Callable[[str], list[int]]:
    """Comma-separated integers ``>= low`` (argparse ``type=``; ``""``: none)."""
    one = count(low)

    def convert(text: str) -> list[int]:
        return [one(x.strip()) for x in text.split(",") if x.strip()]

    convert.__name__ = "list"
    return convert


#: a finite number > 0 (argparse ``type=``)
positive = number(0, strict=True)
#: a finite number >= 0 (argparse ``type=``)
non_negative = number(0)


def quantum(text: str) -> float | str:
    """DLPM's quantum (argparse ``type=``): a finite number > 0 (fixed) or
    ``auto`` (ALGORITHMS.md §6: derived from the observed request charges)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be a finite number > 0 or auto, got {text!r}"
        ) from None


def output_file(text: str) -> str:
    """An argparse ``type=`` for a file the command writes: ``-`` (standard
    output), or a path that is not a directory, in an existing, writable
    directory (checked before the command runs, not when it has finished)."""
    if text == "-":
        return text
    if not text:
        raise argparse.ArgumentTypeError("must be a file name, got ''")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    parent = os.path.dirname(text) or "."
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"directory {parent} is not writable")
    if os.path.exists(text) and not os.access(text, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text} is not writable")
    return text


def plot_formats() -> list[str]:
    """The file suffixes matplotlib can write (needs matplotlib)."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def plot_file(text: str) -> str:
    """An argparse ``type=`` for ``--plot FILE``: an :func:`output_file`
    (not ``-``) whose suffix is a format matplotlib writes, with matplotlib
    installed (the ``sim`` extra)."""
    if text == "-":
        raise argparse.ArgumentTypeError("must be a file name (FILE.png), not '-'")
    output_file(text)
    try:
        require("sim", what="plotting", modules=("matplotlib",))
    except MissingExtra as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    suffix = os.path.splitext(text)[1].lstrip(".").lower()
    formats = plot_formats()
    if suffix not in formats:
        what = f"a .{suffix} file" if suffix else "a file without a suffix"
        raise argparse.ArgumentTypeError(
            f"matplotlib cannot write {what} (FILE.png; formats: {', '.join(formats)})"
        )
    return text


def need(*extras: str, what: str, modules: tuple[str, ...] | None = None) -> None:
    """:func:`fairq.extras.require` as a :class:`UsageError` (a missing extra
    ends a command like a bad argument: exit status 2, one line)."""
    try:
        require(*extras, what=what, modules=modules)
    except MissingExtra as e:
        raise UsageError(str(e)) from None


@contextlib.contextmanager
def trace_errors(path: Any, arg: str) -> Iterator[None]:
    """Reading the trace at ``path`` (a file, or a built-in trace's name):
    a bad line (:class:`fairq.sim.workloads.TraceError`, its number in the
    message) or a file that cannot be read (missing, unreadable, a
    truncated or corrupt ``.gz``, not UTF-8) is a :class:`UsageError`
    naming ``arg``."""
    from fairq.sim.workloads import TraceError

    try:
        yield
    except TraceError as e:
        raise UsageError(str(e), arg=arg) from None
    except FileNotFoundError:
        from fairq.sim.traces import BUILTIN

        names = ", ".join(BUILTIN)
        msg = f"cannot read {path}: no such file, nor a built-in trace ({names})"
        raise UsageError(msg, arg=arg) from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}", arg=arg) from None
    except (EOFError, zlib.error):
        raise UsageError(f"cannot read {path}: a truncated or corrupt gzip file", arg=arg) from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text (a JSONL trace)", arg=arg) from None


def read_trace(path: str, seed: int = 0, *, arg: str = "--trace") -> Any:
    """Parse and validate the JSONL trace at ``path`` before any work
    (:func:`fairq.sim.traces.load`: a file, or a built-in trace's name);
    errors as :func:`trace_errors` says."""
    from fairq.sim.traces import load

    with trace_errors(path, arg):
        workload = load(path, seed)
    return workload
