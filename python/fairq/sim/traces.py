"""Public production traces in fairq's one trace format.

:func:`import_mooncake` turns a Mooncake FAST'25 trace (kvcache-ai/Mooncake,
``FAST25-release/traces/*.jsonl``: ``timestamp`` in ms, ``input_length``,
``output_length``, ``hash_ids`` with one id per 512-token block, equal ids
being equal blocks) into the lines :func:`fairq.sim.workloads.parse_trace`
reads: ``time``, ``client``, ``prompt_len``, ``hash_ids``, ``block_size``,
``output_len``. Shared block ids stay shared prefixes (equal ids are equal
tokens, :func:`fairq.sim.workloads.block_tokens`).

**Tenants** (no public trace carries them; this rule is fairq's, seeded):

1. *Sessions.* A block id that appears in at least ``global_share`` (5%) of
   the requests in the time window is *global* (the conversation trace's block 0, a
   system prompt every request starts with). A request's session is its
   first non-global block id: the turns of one conversation repeat the
   earlier turns' blocks, so they land in one session. A request with only
   global blocks is a session of its own.
2. *Tenants.* Sessions, in order of first arrival, go to tenants one by one
   with a generator seeded by ``seed``: to ``flood`` with probability
   ``flood_share`` (30%), else to ``t0`` ... ``t{tenants-1}`` with
   probabilities proportional to ``1 / (i + 1) ** zipf`` (a heavy-tailed,
   Zipf split: ``t0`` sends the most).
3. *The flood.* The ``flood`` tenant's arrivals are replayed
   ``flood_speedup`` (4) times faster: ``t -> t0 + (t - t0) / speedup`` from
   the window's first arrival ``t0``, so it sends its share within the first
   quarter of the window, over the engine's capacity while it lasts.

**Selection and scaling** (in this order): the records with ``start <=
timestamp / 1000 < start + minutes``; sessions with at least ``min_turns``
requests in that window; whole sessions in order of first arrival, each
one kept if the request count stays within ``requests`` with it (a session
that would pass it is skipped, and a later, smaller one may still fit);
then tenants as above; then times
rebased to 0 and multiplied by ``time_scale`` (< 1: denser arrivals);
lengths times ``length_scale``: the block size becomes ``max(1,
round(512 * length_scale))``, a prompt ``ceil(input_length * block / 512)``
tokens (the same number of blocks: sharing is kept exactly), an output
``max(1, round(output_length * length_scale))``; then ``max_prompt_len``
folds a longer prompt to its first ``max_prompt_len`` tokens (its prefix:
blocks past it are dropped), ``max_output_len`` caps outputs.

Built-in traces (:data:`BUILTIN`, usable wherever a trace file is:
``fairq simulate --trace mooncake``): committed cuts of the two traces
under ``fairq/sim/data`` (see its README for provenance), converted with
fixed options.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from fairq.sim.workloads import (
    TraceError,
    Workload,
    id_list,
    json_objects,
    load_trace,
    open_text,
    parse_trace,
)

__all__ = [
    "BUILTIN",
    "MOONCAKE_BLOCK",
    "builtin_of",
    "MooncakeRecord",
    "Options",
    "builtin_lines",
    "implied_hit_rate",
    "import_mooncake",
    "load",
    "read_mooncake",
    "sessions",
    "tenant_of_sessions",
]

#: Tokens per ``hash_ids`` block in Mooncake's traces.
MOONCAKE_BLOCK = 512

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True, slots=True)
class MooncakeRecord:
    """One line of a Mooncake trace."""

    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Options:
    """How :func:`import_mooncake` selects, assigns tenants and scales (the
    module docstring states each rule)."""

    seed: int = 0
    tenants: int = 4
    zipf: float = 1.2
    flood_share: float = 0.3
    flood_speedup: float = 4.0
    global_share: float = 0.05
    start: float = 0.0
    minutes: float | None = None
    min_turns: int = 1
    requests: int | None = None
    time_scale: float = 1.0
    length_scale: float = 1.0
    max_prompt_len: int | None = None
    max_output_len: int | None = None

    def check(self) -> None:
        """Raise ValueError naming the first option out of range (or of the
        wrong type: ints for the counts, numbers for the rest)."""
        for f in fields(self):
            v = getattr(self, f.name)
            whole = f.name in _INT_OPTIONS
            if v is None and f.default is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int if whole else (int, float)):
                what = "an int" if whole else "a number"
                raise ValueError(f"{f.name} must be {what}, got {v!r}")
        bad = [
            ("tenants", self.tenants >= 1),
            ("zipf", math.isfinite(self.zipf) and self.zipf >= 0),
            ("flood_share", 0 <= self.flood_share <= 1),
            ("flood_speedup", math.isfinite(self.flood_speedup) and self.flood_speedup >= 1),
            ("global_share", 0 < self.global_share <= 1),
            ("start", math.isfinite(self.start) and self.start >= 0),
            ("minutes", self.minutes is None or (math.isfinite(self.minutes) and self.minutes > 0)),
            ("min_turns", self.min_turns >= 1),
            ("requests", self.requests is None or self.requests >= 1),
            ("time_scale", math.isfinite(self.time_scale) and self.time_scale > 0),
            ("length_scale", math.isfinite(self.length_scale) and 0 < self.length_scale <= 1),
            ("max_prompt_len", self.max_prompt_len is None or self.max_prompt_len >= 1),
            ("max_output_len", self.max_output_len is None or self.max_output_len >= 1),
            ("seed", self.seed >= 0),
        ]
        for name, ok in bad:
            if not ok:
                raise ValueError(f"{name} out of range: {getattr(self, name)!r}")


#: The :class:`Options` that are counts (ints).
_INT_OPTIONS = ("seed", "tenants", "min_turns", "requests", "max_prompt_len", "max_output_len")


def _int(obj: dict, key: str, where: str, minimum: int) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise TraceError(f"{where}: {key!r} must be an int >= {minimum}, got {v!r}")
    return v


def read_mooncake(lines: Iterable[str], source: str = "<mooncake>") -> list[MooncakeRecord]:
    """Parse Mooncake JSONL lines; a bad line is a :class:`TraceError`
    naming the source, line number and field. Blank lines are skipped."""
    out: list[MooncakeRecord] = []
    for where, obj in json_objects(lines, source):
        ts = _int(obj, "timestamp", where, 0)
        n_in = _int(obj, "input_length", where, 1)
        n_out = _int(obj, "output_length", where, 1)
        if "hash_ids" not in obj:
            raise TraceError(f"{where}: 'hash_ids' is missing")
        hids = id_list(obj, "hash_ids", where, 2**63, "block id")
        if len(hids) != -(-n_in // MOONCAKE_BLOCK):
            raise TraceError(
                f"{where}: 'hash_ids' has {len(hids)} blocks, 'input_length' {n_in} needs "
                f"{-(-n_in // MOONCAKE_BLOCK)} of {MOONCAKE_BLOCK} tokens"
            )
        if out and ts < out[-1].timestamp_ms:
            raise TraceError(f"{where}: 'timestamp' {ts} is before the previous line's")
        out.append(MooncakeRecord(ts, n_in, n_out, tuple(hids)))
    if not out:
        raise TraceError(f"{source}: the trace holds no requests")
    return out


def sessions(records: list[MooncakeRecord], global_share: float = 0.05) -> list[int]:
    """Each record's session number (0, 1, ... in order of first arrival),
    by rule 1 of the module docstring."""
    count: dict[int, int] = {}
    for r in records:
        for h in set(r.hash_ids):
            count[h] = count.get(h, 0) + 1
    floor = global_share * len(records)
    keys: dict[Any, int] = {}
    out: list[int] = []
    for i, r in enumerate(records):
        key: Any = next((h for h in r.hash_ids if count[h] < floor), ("solo", i))
        out.append(keys.setdefault(key, len(keys)))
    return out


def tenant_of_sessions(n_sessions: int, opts: Options) -> list[str]:
    """The tenant of each session (rule 2 of the module docstring)."""
    rng = np.random.default_rng(opts.seed)
    weights = 1.0 / np.arange(1, opts.tenants + 1, dtype=float) ** opts.zipf
    weights /= weights.sum()
    flood = rng.random(n_sessions) < opts.flood_share
    pick = rng.choice(opts.tenants, size=n_sessions, p=weights)
    return ["flood" if f else f"t{int(t)}" for f, t in zip(flood, pick, strict=True)]


def _select(records: list[MooncakeRecord], opts: Options) -> tuple[list[MooncakeRecord], list[int]]:
    """The window; its sessions (rule 1, over the whole window); the
    ``min_turns`` and ``requests`` (whole sessions) selection. Returns the
    records kept and their sessions, renumbered 0, 1, ... in order of first
    arrival."""
    lo = opts.start * 1000.0
    hi = math.inf if opts.minutes is None else lo + opts.minutes * 60_000.0
    recs = [r for r in records if lo <= r.timestamp_ms < hi]
    sess = sessions(recs, opts.global_share)
    size = Counter(sess)
    keep: dict[int, int] = {}
    total = 0
    for s in dict.fromkeys(sess):  # order of first arrival
        if size[s] < opts.min_turns:
            continue
        if opts.requests is not None and total + size[s] > opts.requests:
            continue
        keep[s] = len(keep)
        total += size[s]
    kept = [(r, keep[s]) for r, s in zip(recs, sess, strict=True) if s in keep]
    return [r for r, _ in kept], [s for _, s in kept]


def import_mooncake(
    records: list[MooncakeRecord], opts: Options | None = None
) -> list[dict[str, Any]]:
    """Convert Mooncake records to fairq trace lines (dicts; one JSON object
    each), selected, tenant-assigned and scaled as the module docstring
    states. Raises ValueError for a bad option or an empty selection."""
    opts = opts or Options()
    opts.check()
    recs, sess = _select(records, opts)
    if not recs:
        raise ValueError("the selection holds no requests (check start/minutes/min_turns/requests)")
    tenant = tenant_of_sessions(max(sess) + 1, opts)
    block = max(1, round(MOONCAKE_BLOCK * opts.length_scale))
    t0 = recs[0].timestamp_ms / 1000.0
    out: list[dict[str, Any]] = []
    for i, (r, s) in enumerate(zip(recs, sess, strict=True)):
        client = tenant[s]
        dt = r.timestamp_ms / 1000.0 - t0
        if client == "flood":
            dt /= opts.flood_speedup
        n = -(-r.input_length * block // MOONCAKE_BLOCK)
        if opts.max_prompt_len is not None:
            n = min(n, opts.max_prompt_len)
        n_out = max(1, round(r.output_length * opts.length_scale))
        if opts.max_output_len is not None:
            n_out = min(n_out, opts.max_output_len)
        out.append(
            {
                "time": round(dt * opts.time_scale, 6),
                "client": client,
                "prompt_len": n,
                "hash_ids": list(r.hash_ids[: -(-n // block)]),
                "block_size": block,
                "output_len": n_out,
                "request_id": f"{client}/{i}",
            }
        )
    out.sort(key=lambda d: d["time"])  # the flood's compressed times interleave
    return out


def implied_hit_rate(lines: list[dict[str, Any]]) -> float:
    """The prompt-token hit rate that block sharing implies for an unbounded
    prefix cache, replayed in order: each prompt's longest token prefix in
    common with an earlier prompt (whole shared blocks, cut to either
    prompt's length), over all prompt tokens."""
    seen: dict[tuple[int, ...], int] = {}  # block-id prefix -> longest prompt through it
    hit = total = 0
    for d in lines:
        hids, bs, n = tuple(d["hash_ids"]), d["block_size"], d["prompt_len"]
        best = 0
        for k in range(len(hids), 0, -1):
            longest = seen.get(hids[:k])
            if longest is not None:
                best = min(longest, n, k * bs)
                break
        hit += best
        total += n
        for k in range(1, len(hids) + 1):
            key = hids[:k]
            seen[key] = max(seen.get(key, 0), min(n, k * bs))
    return hit / total if total else 0.0


# ---- built-in traces ---------------------------------------------------------


@dataclass(frozen=True)
class Builtin:
    """A committed cut (``fairq/sim/data/<file>``) and how it is converted."""

    file: str
    description: str
    options: Options = field(default_factory=Options)


#: ``--trace NAME`` for these names (when no file of that name exists).
BUILTIN: dict[str, Builtin] = {
    "mooncake": Builtin(
        "mooncake_conversation_10min.jsonl.gz",
        "Mooncake FAST'25 conversation trace, its first 10 minutes (1,750 requests, "
        "mean prompt 14k tokens), full lengths",
    ),
    "mooncake-synthetic": Builtin(
        "mooncake_synthetic_10min.jsonl.gz",
        "Mooncake FAST'25 synthetic trace (public long-document and multi-turn datasets, "
        "Poisson arrivals), its first 10 minutes (2,254 requests), full lengths",
    ),
    "mooncake-small": Builtin(
        "mooncake_conversation_10min.jsonl.gz",
        "the conversation cut for a one-minute GPU check: 48 requests of multi-turn "
        "sessions, lengths x 1/16 folded to 1,000 prompt / 32 "
        "output tokens, arrivals x 1/300 (a 2-second burst: a backlog on any engine)",
        Options(
            min_turns=2,
            requests=48,
            length_scale=1 / 16,
            max_prompt_len=1000,
            max_output_len=32,
            time_scale=1 / 300,
        ),
    ),
}


def builtin_of(trace: str | Path) -> Builtin | None:
    """The built-in trace ``trace`` names, or None: ``trace`` is a file (a
    file of that name wins over a built-in's name, wherever a trace is
    read)."""
    if Path(trace).exists():
        return None
    return BUILTIN.get(str(trace))


def builtin_lines(name: str, seed: int = 0) -> list[str]:
    """The JSONL lines of built-in trace ``name`` (seed: the tenant rule's).
    KeyError for an unknown name."""
    b = BUILTIN[name]
    recs = read_mooncake(open_text(DATA / b.file), b.file)
    opts = Options(**{**asdict(b.options), "seed": seed})
    return [json.dumps(d) for d in import_mooncake(recs, opts)]


def load(trace: str | Path, seed: int = 0) -> Workload:
    """A trace file (:func:`fairq.sim.workloads.load_trace`) or, where no
    file of that name exists, a built-in trace by its name (``seed`` also
    seeds its tenant rule): what ``--trace`` takes."""
    if builtin_of(trace) is not None:
        return parse_trace(builtin_lines(str(trace), seed), str(trace), seed)
    return load_trace(trace, seed)
