"""A small multi-client workload for the engine benchmark (pure Python).

Every client has its own shared prefixes (a "system prompt", or with
``docs_per_client`` > 1 several documents its requests cycle through)
followed by a per-request suffix; one misbehaving client sends
``flood_factor`` times as many requests as the others, all at time 0, so a
FIFO engine serves mostly it.
Request ids follow the ``"client/index"`` convention of ``ClientResolver``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EngineRequest:
    """One request to replay: ``add_request`` it at ``arrival`` seconds, or,
    when ``after`` names other requests, ``arrival`` seconds after the last of
    them finished (dependent calls: tree-of-thoughts, chat turns)."""

    request_id: str
    client: str
    arrival: float
    prompt: list[int]
    max_new_tokens: int
    after: tuple[str, ...] = ()


def from_sim_workload(
    workload: Any, vocab_size: int, max_new_tokens: int | None = None
) -> list[EngineRequest]:
    """Convert a simulator workload (``fairq.sim.workloads.Workload``) for the engine.

    Token ids are folded into ``[1, vocab_size)`` (equal ids stay equal, so
    shared prefixes stay shared); ``max_new_tokens`` caps output lengths;
    request ids become ``"client/rid"``. Raises ValueError on a dependency
    on an unknown request.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size must be an integer >= 2, got {vocab_size!r}")
    ids = {r.rid: f"{r.client}/{r.rid}" for r in workload.requests}
    out = []
    for r in workload.requests:
        missing = [d for d in r.after if d not in ids]
        if missing:
            raise ValueError(f"request {r.rid}: depends on unknown request(s) {missing}")
        n_out = (
            int(r.output_len) if max_new_tokens is None else min(int(r.output_len), max_new_tokens)
        )
        out.append(
            EngineRequest(
                ids[r.rid],
                str(r.client),
                float(r.arrival),
                [1 + int(t) % (vocab_size - 1) for t in r.tokens],
                max(1, n_out),
                tuple(ids[d] for d in r.after),
            )
        )
    out.sort(key=lambda e: (bool(e.after), e.arrival))
    return out


def multi_client_workload(
    n_clients: int = 3,
    requests_per_client: int = 4,
    flood_factor: int = 4,
    prefix_len: int = 32,
    suffix_len: int = 8,
    max_new_tokens: int = 8,
    vocab_size: int = 256,
    well_behaved_gap: float = 0.0,
    seed: int = 0,
    docs_per_client: int = 1,
    system_len: int = 0,
    flood_gap: float = 0.0,
    doc_order: str = "cycle",
) -> list[EngineRequest]:
    """Generate the workload, sorted by arrival (the flooding client first).

    Client ``"flood"`` sends ``requests_per_client * flood_factor`` requests,
    ``flood_gap`` seconds apart from time 0; clients
    ``"c1".."c{n_clients-1}"`` send ``requests_per_client``
    each, spaced ``well_behaved_gap`` seconds apart, interleaved. Every client
    has ``docs_per_client`` prefixes of ``prefix_len`` tokens (its documents);
    its ``i``-th request starts with document ``i % docs_per_client``, so in
    arrival order a client's consecutive requests share no prefix when
    ``docs_per_client`` > 1 (what a cache-aware order can regroup and a
    per-client FIFO cannot). ``system_len`` > 0 puts one system prompt of that
    many tokens before every document (a prefix shared by all clients).
    ``doc_order="shuffle"``: each client's sequence of documents (still each
    document equally often, up to one) is shuffled with ``seed`` instead of
    cycling, so seeds also differ in which request reads which document.
    Token ids are drawn from ``[1, vocab_size)`` (0 is left out: many models
    use it as pad).

    Raises:
        ValueError: a size below 1 (``n_clients`` below 2, lengths below 1,
            gaps below 0, ``vocab_size`` below 2, ``doc_order`` not
            ``cycle`` or ``shuffle``).
    """
    checks = {
        "n_clients": (n_clients, 2),
        "requests_per_client": (requests_per_client, 1),
        "flood_factor": (flood_factor, 1),
        "prefix_len": (prefix_len, 0),
        "suffix_len": (suffix_len, 1),
        "max_new_tokens": (max_new_tokens, 1),
        "vocab_size": (vocab_size, 2),
        "docs_per_client": (docs_per_client, 1),
        "system_len": (system_len, 0),
    }
    for field, (value, low) in checks.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{field} must be an integer >= {low}, got {value!r}")
    for name, gap in (("well_behaved_gap", well_behaved_gap), ("flood_gap", flood_gap)):
        if not gap >= 0:
            raise ValueError(f"{name} must be >= 0, got {gap!r}")
    if doc_order not in ("cycle", "shuffle"):
        raise ValueError(f"doc_order must be cycle or shuffle, got {doc_order!r}")
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, vocab_size) for _ in range(n)]

    clients = ["flood"] + [f"c{i}" for i in range(1, n_clients)]
    system = tokens(system_len)
    prefixes = {c: [system + tokens(prefix_len) for _ in range(docs_per_client)] for c in clients}

    counts = {c: requests_per_client * (flood_factor if c == "flood" else 1) for c in clients}
    order = {c: [i % docs_per_client for i in range(n)] for c, n in counts.items()}
    if doc_order == "shuffle":
        for c in clients:
            rng.shuffle(order[c])

    def prompt(client: str, i: int) -> list[int]:
        return prefixes[client][order[client][i]] + tokens(suffix_len)

    out: list[EngineRequest] = []
    for i in range(requests_per_client * flood_factor):
        out.append(
            EngineRequest(f"flood/{i}", "flood", i * flood_gap, prompt("flood", i), max_new_tokens)
        )
    for i in range(requests_per_client):
        for c in clients[1:]:
            out.append(
                EngineRequest(
                    f"{c}/{i}",
                    c,
                    i * well_behaved_gap,
                    prompt(c, i),
                    max_new_tokens,
                )
            )
    out.sort(key=lambda r: r.arrival)  # stable: the flood stays ahead at equal times
    return out
