"""Seeded, deterministic workloads after the DLPM paper's Tables 2 and 3.

A workload is a list of :class:`SimRequest` plus the client roles. Token ids
are synthetic (random ids from a seeded generator) but the *sharing
structure* follows the paper: what is a shared prefix, what depends on what,
and how long prompts and outputs are.

==================  ==========================  ===========  ===========
workload            paper dataset               avg prefix   avg output
==================  ==========================  ===========  ===========
``qa``              LooGLE long-context QA      21449        15
``tot``             Tree-of-Thoughts on GSM8K   546          256
``judge``           LLM-as-a-judge (BSM)        2701         256
``chat``            Chatbot Arena multi-turn    56           142
==================  ==========================  ===========  ===========

Misbehaving client types (Table 3): ``S1`` sends more requests (QA: a 4x
request rate; ToT: trees of 4 branches, 341 calls, vs 2 branches, 31 calls;
judge: 16 dimensions vs 2), ``S2`` sends longer prefixes (QA: documents 2x
longer; ToT: questions 10x longer; judge: 600 extra tokens before each
article). Arrivals of independent programs follow a Gamma process per client.

``scale`` shrinks lengths (prompts and outputs) so that the default
comparison runs in seconds; every length keeps its ratio to the others.

Trace replay (:func:`load_trace`): a JSONL file, one request per line::

    {"time": 0.0, "client": "a", "prompt": [1, 2, 3], "output_len": 16}
    {"time": 0.5, "client": "b", "prompt_len": 900, "prefix_id": "doc7",
     "prefix_len": 800, "output_len": 32}

    {"time": 0.9, "client": "c", "prompt_len": 1100, "hash_ids": [0, 7, 8],
     "block_size": 512, "output_len": 64}

``prompt`` (token ids) or ``prompt_len`` (with an optional shared prefix:
``prefix_id`` names it, ``prefix_len`` is its length, at most ``prompt_len``;
the same id always means the same tokens; neither goes with ``prompt``).
Or ``prompt_len`` with ``hash_ids`` and ``block_size`` (block-hashed traces
such as Mooncake's, see :mod:`fairq.sim.traces`): the prompt is its blocks
of ``block_size`` tokens one after the other, the last one cut to
``prompt_len`` (so ``len(hash_ids) == ceil(prompt_len / block_size)``); a
block's tokens depend only on its id, its position in the block and the
seed (:func:`block_tokens`), so equal ids are equal tokens and requests
whose ids agree on their first *k* blocks share a ``k * block_size``-token
prefix. Optional: ``request_id``.
A bad line raises :class:`TraceError` naming the file and line number.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 50_000


@dataclass(slots=True)
class SimRequest:
    """One LLM call in the simulation."""

    rid: int
    client: str
    tokens: np.ndarray  # uint32 prompt token ids
    output_len: int
    #: Absolute arrival time, or for a dependent call the delay after the
    #: last of ``after`` finishes.
    arrival: float = 0.0
    #: Request ids that must finish before this one starts (ToT children,
    #: judge merge, next chat turn).
    after: tuple[int, ...] = ()
    #: Program (ToT tree, judge run, conversation) this call belongs to.
    program: int = -1
    #: Token ids of the output, when a later prompt includes them (inserted
    #: into the prefix cache when the request finishes).
    output_ids: np.ndarray | None = None

    @property
    def input_len(self) -> int:
        return int(self.tokens.shape[0])


@dataclass
class Workload:
    """Requests plus who is who."""

    name: str
    requests: list[SimRequest]
    clients: list[str]
    misbehaving: list[str] = field(default_factory=list)
    description: str = ""

    @property
    def well_behaved(self) -> list[str]:
        return [c for c in self.clients if c not in self.misbehaving]

    def summary(self) -> dict[str, float]:
        n = len(self.requests)
        return {
            "requests": n,
            "avg_prompt": float(np.mean([r.input_len for r in self.requests])) if n else 0.0,
            "avg_output": float(np.mean([r.output_len for r in self.requests])) if n else 0.0,
        }


class _Gen:
    """Seeded helpers shared by the generators, and the requests they made."""

    def __init__(self, seed: int, scale: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.scale = scale
        self.next_rid = 0
        self.next_program = 0
        self.requests: list[SimRequest] = []

    def n(self, length: float) -> int:
        """A length scaled by ``scale`` (at least 1)."""
        return max(1, int(round(length * self.scale)))

    def around(self, mean: float, spread: float = 0.25) -> int:
        """A scaled length drawn uniformly within ``mean * (1 +- spread)``."""
        lo, hi = mean * (1 - spread), mean * (1 + spread)
        return self.n(self.rng.uniform(lo, hi))

    def toks(self, length: int) -> np.ndarray:
        return self.rng.integers(0, VOCAB, size=length, dtype=np.uint32)

    def program(self) -> int:
        self.next_program += 1
        return self.next_program - 1

    def add(
        self,
        client: str,
        tokens: np.ndarray,
        output_len: int,
        arrival: float = 0.0,
        after: tuple[int, ...] = (),
        program: int = -1,
        output_ids: np.ndarray | None = None,
    ) -> int:
        """Append the next request (the fields of :class:`SimRequest`, in its
        order; the ``rid`` is the request's index) and return its ``rid``."""
        rid = self.next_rid
        self.next_rid += 1
        self.requests.append(
            SimRequest(rid, client, tokens, output_len, arrival, after, program, output_ids)
        )
        return rid

    def gamma_arrivals(self, rate: float, duration: float, cv: float) -> list[float]:
        """Arrival times of a Gamma renewal process (mean rate, coefficient of
        variation ``cv``; cv = 1 is Poisson) on ``[0, duration)``."""
        shape = 1.0 / (cv * cv)
        scale = 1.0 / (rate * shape)
        out: list[float] = []
        t = float(self.rng.gamma(shape, scale))
        while t < duration:
            out.append(t)
            t += float(self.rng.gamma(shape, scale))
        return out


def _clients(n: int) -> list[str]:
    return [f"client{i}" for i in range(n)]


def _one_misbehaving(
    num_clients: int, misbehave: str | None, seed: int, scale: float
) -> tuple[_Gen, list[str], str | None]:
    """The generator, the clients and the misbehaving one (the first client
    when ``misbehave`` names a type, else None)."""
    clients = _clients(num_clients)
    return _Gen(seed, scale), clients, clients[0] if misbehave else None


def _workload(
    name: str, what: str, g: _Gen, clients: list[str], bad: str | None, misbehave: str | None
) -> Workload:
    """The workload of ``g``'s requests with at most one misbehaving client."""
    label = f"{what}, {misbehave or 'no'} misbehaving client"
    return Workload(name, g.requests, clients, [bad] if bad else [], label)


def long_context_qa(
    *,
    num_clients: int = 4,
    misbehave: str | None = "S1",
    rate: float = 0.25,
    duration: float = 120.0,
    docs_per_client: int = 6,
    bad_docs: int | None = None,
    cv: float = 1.0,
    scale: float = 0.25,
    seed: int = 0,
) -> Workload:
    """LooGLE-style QA: questions about long documents (avg 21449 tokens),
    short answers (avg 15). Each client asks about its own documents.
    ``bad_docs``: how many documents the misbehaving client asks about
    (default ``docs_per_client``); with S1's 4x rate, ``4 * docs_per_client``
    makes its extra requests real cost (cache misses) instead of cache hits."""
    if bad_docs is not None and bad_docs < 1:
        raise ValueError(f"bad_docs must be >= 1, got {bad_docs!r}")
    g, clients, bad = _one_misbehaving(num_clients, misbehave, seed, scale)
    for c in clients:
        doc_len = 21449 * (2 if (c == bad and misbehave == "S2") else 1)
        n_docs = bad_docs if (c == bad and bad_docs is not None) else docs_per_client
        docs = [g.toks(g.around(doc_len)) for _ in range(n_docs)]
        r = rate * (4 if (c == bad and misbehave == "S1") else 1)
        for t in g.gamma_arrivals(r, duration, cv):
            doc = docs[int(g.rng.integers(0, n_docs))]
            q = g.toks(g.around(40))
            prompt = np.concatenate([doc, q])
            g.add(c, prompt, g.around(15, 0.5), arrival=t, program=g.program())
    return _workload("qa", "long-context QA", g, clients, bad, misbehave)


def tree_of_thoughts(
    *,
    num_clients: int = 4,
    misbehave: str | None = "S2",
    rate: float = 0.05,
    duration: float = 120.0,
    height: int = 4,
    branches: int = 2,
    shared_prefix: bool = False,
    cv: float = 1.0,
    scale: float = 0.25,
    seed: int = 0,
) -> Workload:
    """Tree-of-Thoughts on GSM8K: a tree of dependent calls of height 4; every
    call extends its parent's prompt with the parent's output (256 tokens)
    and a short instruction. Prompt = few-shot prefix + question (avg 546
    tokens together). Children start when the parent finishes.
    ``shared_prefix``: every client uses the same few-shot prefix (one GSM8K
    prompt template for all, as in the paper's Figure 9) instead of its own."""
    g, clients, bad = _one_misbehaving(num_clients, misbehave, seed, scale)
    common = g.toks(g.n(400)) if shared_prefix else None
    for c in clients:
        fewshot = common if common is not None else g.toks(g.n(400))
        qlen = 146 * (10 if (c == bad and misbehave == "S2") else 1)
        b = 4 if (c == bad and misbehave == "S1") else branches
        for t in g.gamma_arrivals(rate, duration, cv):
            prog = g.program()
            question = g.toks(g.around(qlen))
            root_prompt = np.concatenate([fewshot, question])
            level: list[tuple[np.ndarray, int | None]] = [(root_prompt, None)]  # (prompt, parent)
            for depth in range(height + 1):
                nxt: list[tuple[np.ndarray, int | None]] = []
                for prompt, parent in level:
                    out_len = g.around(256)
                    out_ids = g.toks(out_len) if depth < height else None
                    arrival, after = (t, ()) if parent is None else (0.0, (parent,))
                    rid = g.add(c, prompt, out_len, arrival, after, prog, out_ids)
                    if out_ids is not None:
                        for _ in range(b):
                            instr = g.toks(g.around(20))
                            nxt.append((np.concatenate([prompt, out_ids, instr]), rid))
                level = nxt
    return _workload("tot", "Tree-of-Thoughts", g, clients, bad, misbehave)


def llm_judge(
    *,
    num_clients: int = 4,
    misbehave: str | None = "S1",
    rate: float = 0.1,
    duration: float = 120.0,
    dimensions: int = 2,
    shared_prefix: bool = False,
    cv: float = 1.0,
    scale: float = 0.25,
    seed: int = 0,
) -> Workload:
    """LLM-as-a-judge with branch-solve-merge over one article (avg 2701
    tokens): a branch call, one solve call per evaluation dimension (run in
    parallel, all sharing the article), then a merge call over the article and
    every solve output. Outputs avg 256 tokens. ``shared_prefix``: every
    client uses the same system prompt instead of its own."""
    g, clients, bad = _one_misbehaving(num_clients, misbehave, seed, scale)
    common = g.toks(g.n(100)) if shared_prefix else None
    for c in clients:
        system = common if common is not None else g.toks(g.n(100))
        dims = 16 if (c == bad and misbehave == "S1") else dimensions
        extra = g.toks(g.n(600)) if (c == bad and misbehave == "S2") else None
        for t in g.gamma_arrivals(rate, duration, cv):
            prog = g.program()
            article = g.toks(g.around(2600))
            head = np.concatenate(
                [system, extra, article] if extra is not None else [system, article]
            )
            branch_prompt = np.concatenate([head, g.toks(g.n(30))])
            branch = g.add(c, branch_prompt, g.around(128), arrival=t, program=prog)
            solves = []
            outs = []
            for _ in range(dims):
                out_len = g.around(256)
                out_ids = g.toks(out_len)
                prompt = np.concatenate([head, g.toks(g.n(40))])
                rid = g.add(c, prompt, out_len, after=(branch,), program=prog, output_ids=out_ids)
                solves.append(rid)
                outs.append(out_ids)
            merge_prompt = np.concatenate([head, *outs, g.toks(g.n(30))])
            g.add(c, merge_prompt, g.around(256), after=tuple(solves), program=prog)
    return _workload("judge", "LLM-as-a-judge", g, clients, bad, misbehave)


def multi_turn_chat(
    *,
    num_clients: int = 4,
    heavy_clients: int = 2,
    rate: float = 0.5,
    heavy_factor: float = 4.0,
    duration: float = 120.0,
    max_turns: int = 5,
    think_time: float = 2.0,
    cv: float = 1.0,
    scale: float = 1.0,
    seed: int = 0,
) -> Workload:
    """Chatbot-Arena-style conversations (avg 56 prompt / 142 output tokens
    per turn); each turn's prompt is the whole history plus a new message and
    arrives ``think_time`` after the previous turn finished. The last
    ``heavy_clients`` clients start conversations ``heavy_factor`` times more
    often (the paper's Figure 8: clients 2 and 3 send much more)."""
    g = _Gen(seed, scale)
    clients = _clients(num_clients)
    heavy = clients[num_clients - heavy_clients :] if heavy_clients else []
    for c in clients:
        system = g.toks(g.n(40))
        r = rate * (heavy_factor if c in heavy else 1.0)
        for t in g.gamma_arrivals(r, duration, cv):
            prog = g.program()
            history = system
            prev = None
            for _ in range(int(g.rng.integers(1, max_turns + 1))):
                msg = g.toks(g.around(56, 0.5))
                prompt = np.concatenate([history, msg])
                out_len = g.around(142, 0.5)
                out_ids = g.toks(out_len)
                arrival, after = (t, ()) if prev is None else (think_time, (prev,))
                prev = g.add(c, prompt, out_len, arrival, after, prog, out_ids)
                history = np.concatenate([prompt, out_ids])
    return Workload("chat", g.requests, clients, heavy, "multi-turn chat, 2 heavy clients")


WORKLOADS = {
    "qa": long_context_qa,
    "tot": tree_of_thoughts,
    "judge": llm_judge,
    "chat": multi_turn_chat,
}


def make_workload(name: str, **kwargs: object) -> Workload:
    """Build a named workload (``qa``, ``tot``, ``judge``, ``chat``);
    ``kwargs`` go to its generator (``misbehave``, ``seed``, ``scale`` ...)."""
    try:
        fn = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}; got {name!r}") from None
    if name == "chat":
        kwargs.pop("misbehave", None)
    return fn(**kwargs)  # type: ignore[operator]


# ---- trace replay ------------------------------------------------------------


class TraceError(ValueError):
    """A bad line in a JSONL trace (message names the file and line)."""


def _int_field(obj: dict, key: str, where: str, minimum: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceError(f"{where}: {key!r} must be an int, got {v!r}")
    if v < minimum:
        raise TraceError(f"{where}: {key!r} must be >= {minimum}, got {v}")
    return v


def json_objects(lines: Iterable[str], source: str) -> Iterator[tuple[str, dict]]:
    """(``source:line``, object) for each non-blank JSONL line; a line that
    is not a JSON object is a :class:`TraceError` naming it."""
    for lineno, line in enumerate(lines, start=1):
        where = f"{source}:{lineno}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield where, obj


def id_list(obj: dict, key: str, where: str, high: int, what: str) -> list[int]:
    """``obj[key]``, a non-empty list of ints in ``[0, high)``; a
    :class:`TraceError` naming the field (and the bad element) otherwise."""
    ids = obj[key]
    if not isinstance(ids, list) or not ids:
        raise TraceError(f"{where}: {key!r} must be a non-empty list of {what}s")
    for i, x in enumerate(ids):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < high:
            raise TraceError(f"{where}: {key!r}[{i}] = {x!r} is not a {what}")
    return ids


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def block_tokens(hash_ids: np.ndarray, block_size: int, length: int, seed: int = 0) -> np.ndarray:
    """The prompt of a block-hashed trace line: ``block_size`` tokens per id
    of ``hash_ids``, cut to ``length`` (uint32 ids in ``[0, VOCAB)``).

    A deterministic function of (id, position in the block, ``seed``): equal
    ids give equal tokens wherever they appear. A block's first token is
    ``(id + seed) % VOCAB``, so blocks whose ids differ below ``VOCAB`` differ
    at their first token (a cached prefix never runs into a different
    block); the others are a SplitMix64 hash of (id, position, seed)."""
    ids = np.asarray(hash_ids, dtype=np.uint64)
    pos = np.arange(block_size, dtype=np.uint64)
    x = ids[:, None] * _GOLDEN + (pos[None, :] + np.uint64(seed) * np.uint64(1_000_003))
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    x[:, 0] = (ids + np.uint64(seed)) % np.uint64(VOCAB)
    return (x % np.uint64(VOCAB)).astype(np.uint32).ravel()[:length]


def _hashed_prompt(obj: dict, n: int, where: str, seed: int) -> np.ndarray:
    """The tokens of a ``hash_ids`` + ``block_size`` line (module docstring)."""
    for key in ("prefix_id", "prefix_len"):
        if key in obj:
            raise TraceError(f"{where}: {key!r} does not go with 'hash_ids' (the ids share)")
    bs = _int_field(obj, "block_size", where, 1)
    hids = id_list(obj, "hash_ids", where, 2**63, "block id")
    need = -(-n // bs)
    if len(hids) != need:
        raise TraceError(
            f"{where}: 'hash_ids' has {len(hids)} blocks; 'prompt_len' {n} in blocks of "
            f"'block_size' {bs} needs {need}"
        )
    return block_tokens(np.asarray(hids, dtype=np.uint64), bs, n, seed)


def parse_trace(lines: Iterable[str], source: str = "<trace>", seed: int = 0) -> Workload:
    """Parse JSONL trace lines into a workload (see the module docstring)."""
    rng = np.random.default_rng(seed)
    prefixes: dict[str, np.ndarray] = {}
    reqs: list[SimRequest] = []
    clients: list[str] = []
    seen_ids: set[object] = set()
    for where, obj in json_objects(lines, source):
        t = obj.get("time")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0:
            raise TraceError(f"{where}: 'time' must be a finite number >= 0, got {t!r}")
        client = obj.get("client")
        if not isinstance(client, str) or not client:
            raise TraceError(f"{where}: 'client' must be a non-empty string, got {client!r}")
        out = _int_field(obj, "output_len", where, 1)
        if "prompt" in obj:
            p = id_list(obj, "prompt", where, 2**32, "token id")
            for key in ("prefix_id", "prefix_len", "hash_ids", "block_size"):
                if key in obj:  # the tokens already hold any shared prefix
                    raise TraceError(
                        f"{where}: {key!r} goes with 'prompt_len', not with 'prompt' "
                        "(the token ids already share their prefixes)"
                    )
            if "prompt_len" in obj and _int_field(obj, "prompt_len", where, 1) != len(p):
                raise TraceError(
                    f"{where}: 'prompt_len' ({obj['prompt_len']}) must equal the length of "
                    f"'prompt' ({len(p)})"
                )
            tokens = np.asarray(p, dtype=np.uint32)
        elif "prompt_len" in obj and "hash_ids" in obj:
            tokens = _hashed_prompt(obj, _int_field(obj, "prompt_len", where, 1), where, seed)
        elif "prompt_len" in obj:
            if "block_size" in obj:
                raise TraceError(f"{where}: 'block_size' goes with 'hash_ids'")
            n = _int_field(obj, "prompt_len", where, 1)
            pid = obj.get("prefix_id")
            plen = _int_field(obj, "prefix_len", where, 1) if "prefix_len" in obj else n
            if plen > n:
                raise TraceError(f"{where}: 'prefix_len' ({plen}) must be <= 'prompt_len' ({n})")
            if pid is None:
                if "prefix_len" in obj:
                    raise TraceError(
                        f"{where}: 'prefix_len' needs 'prefix_id' (the shared prefix it is "
                        "the length of)"
                    )
                tokens = rng.integers(0, VOCAB, size=n, dtype=np.uint32)
            else:
                if not isinstance(pid, (str, int)) or isinstance(pid, bool):
                    raise TraceError(f"{where}: 'prefix_id' must be a string or int, got {pid!r}")
                key = str(pid)
                have = prefixes.get(key)
                if have is None or have.shape[0] < plen:
                    ext = rng.integers(0, VOCAB, size=plen - (0 if have is None else len(have)))
                    have = (
                        np.concatenate([have, ext]).astype(np.uint32)
                        if have is not None
                        else (ext.astype(np.uint32))
                    )
                    prefixes[key] = have
                tokens = np.concatenate(
                    [have[:plen], rng.integers(0, VOCAB, size=n - plen, dtype=np.uint32)]
                )
        else:
            what = " (with 'hash_ids')" if "hash_ids" in obj else ""
            raise TraceError(f"{where}: needs 'prompt' (token ids) or 'prompt_len'{what}")
        rid_raw = obj.get("request_id", len(reqs))
        if rid_raw in seen_ids:
            raise TraceError(f"{where}: duplicate request_id {rid_raw!r}")
        seen_ids.add(rid_raw)
        if client not in clients:
            clients.append(client)
        reqs.append(SimRequest(len(reqs), client, tokens, out, arrival=float(t), program=len(reqs)))
    if not reqs:
        raise TraceError(f"{source}: the trace holds no requests")
    return Workload(f"trace:{Path(source).name}", reqs, clients, [], f"trace {source}")


def open_text(path: str | Path) -> Iterator[str]:
    """The lines of a text file, gunzipped when its name ends in ``.gz``."""
    p = Path(path)
    opener: Any = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        yield from f


def load_trace(path: str | Path, seed: int = 0) -> Workload:
    """Read a JSONL trace file (see :func:`parse_trace`; gunzipped when its
    name ends in ``.gz``). :func:`fairq.sim.traces.load` also takes the
    name of a built-in trace."""
    return parse_trace(open_text(path), str(path), seed)
