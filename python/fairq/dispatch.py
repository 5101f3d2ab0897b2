"""Distributed dispatch across workers: D2LPM and the baseline routers.

Every dispatcher has the same methods:

- ``dispatch(request_id, client, tokens) -> worker``: choose a worker for a
  new request and record it as in flight there (duplicate id: ``ValueError``);
- ``on_finish(request_id, output_tokens) -> worker``: the request finished
  (unknown id: ``KeyError``);
- ``on_evict(worker, tokens, kept=0)``: asynchronous report that ``worker``
  no longer holds ``tokens[:kept + 1]`` (it keeps ``tokens[:kept]``).

The policies (all implemented in Rust, ``rust/dispatch/``):

- :class:`D2LPM` (the DLPM paper's Algorithm 2): a global radix tree records
  which workers hold each prefix; per (client, worker) deficits with worker
  quantum ``Q_w`` bound how long a client sticks to the workers holding its
  prefix before it spreads to the least-loaded others.
- :class:`RoundRobin`, :class:`LeastLoaded`, :class:`ClientRoundRobin`
  (per-client round-robin, the dispatcher VTC is paired with) and
  :class:`PrefixAffinity` (best prefix match unless the match ratio is below
  ``match_threshold``, with an optional load-imbalance escape).

:func:`make_dispatcher` names two configurations of :class:`PrefixAffinity`
for what they are: ``"affinity"`` (alias ``"sglang-router"``) is the SGLang
router's cache-aware rule (leave affinity for the least-loaded worker when
some worker has more than 32 requests in flight and 1.5x another's load);
``"preble"`` is Preble as the DLPM paper describes it (Section 6.1: the
worker with the longest prefix match whenever the match ratio reaches the
threshold, else explore the least-loaded worker; no load escape).

Example::

    d = fairq.D2LPM(num_workers=4, worker_quantum=20_000)
    w = d.dispatch("r1", "alice", prompt_ids)
    ...
    d.on_finish("r1", output_tokens=128)
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairq._core import (
    D2LPM,
    ClientRoundRobin,
    Dispatcher,
    LeastLoaded,
    PrefixAffinity,
    RoundRobin,
)

__all__ = [
    "D2LPM",
    "ClientRoundRobin",
    "Dispatcher",
    "LeastLoaded",
    "PrefixAffinity",
    "RoundRobin",
    "make_dispatcher",
    "DISPATCHERS",
    "LABELS",
    "NO_ESCAPE",
    "PLACEMENTS",
    "PREFIX_AWARE",
    "DOCUMENT_KEY_TOKENS",
    "FirstPlacement",
    "document_key",
    "move_dispatch",
    "placement_kind",
    "probe_placement",
]

#: Names accepted by :func:`make_dispatcher` (and ``fairq simulate --dispatch``).
DISPATCHERS: tuple[str, ...] = ("rr", "ll", "client-rr", "affinity", "preble", "d2lpm")

#: Each name's label in results (``affinity`` is the SGLang router's rule).
LABELS: dict[str, str] = {
    "rr": "RR",
    "ll": "LeastLoaded",
    "client-rr": "ClientRR",
    "affinity": "SGLangRouter",
    "preble": "Preble",
    "d2lpm": "D2LPM",
}

#: ``abs_threshold`` that turns the load escape off: no load gap exceeds it.
NO_ESCAPE = float(2**63)


def make_dispatcher(
    name: str,
    num_workers: int,
    *,
    worker_quantum: float = 20_000.0,
    w_e: float = 1.0,
    w_q: float = 2.0,
    placement_slack: int = 0,
    spread_by_credit: bool = False,
    abs_threshold: float = 32.0,
    rel_threshold: float = 1.5,
    match_threshold: float | None = None,
) -> Dispatcher:
    """Build a dispatcher by short name (see :data:`DISPATCHERS`).

    ``abs_threshold`` / ``rel_threshold`` / ``match_threshold`` configure
    ``"affinity"`` (the SGLang router's defaults: 32, 1.5, 0.5);
    ``"preble"`` takes ``match_threshold`` only (its load escape is off:
    ``abs_threshold`` = :data:`NO_ESCAPE`). ``worker_quantum``, ``w_e``,
    ``w_q``, ``placement_slack``, ``spread_by_credit`` and
    ``match_threshold`` configure ``"d2lpm"`` (its ``match_threshold``
    defaults to 0, the paper's rule; None: each dispatcher's default).

    >>> make_dispatcher("d2lpm", 4, worker_quantum=1000).policy
    'D2LPM'
    """
    if not isinstance(name, str):
        raise TypeError(f"dispatcher name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key in ("rr", "roundrobin", "round-robin"):
        return RoundRobin(num_workers)
    if key in ("ll", "leastloaded", "least-loaded"):
        return LeastLoaded(num_workers)
    if key in ("client-rr", "clientroundrobin", "client_rr"):
        return ClientRoundRobin(num_workers)
    affinity_match = 0.5 if match_threshold is None else match_threshold
    if key == "preble":
        return PrefixAffinity(
            num_workers,
            abs_threshold=NO_ESCAPE,
            rel_threshold=rel_threshold,
            match_threshold=affinity_match,
        )
    if key in ("affinity", "prefixaffinity", "sglang-router"):
        return PrefixAffinity(
            num_workers,
            abs_threshold=abs_threshold,
            rel_threshold=rel_threshold,
            match_threshold=affinity_match,
        )
    if key == "d2lpm":
        return D2LPM(
            num_workers,
            worker_quantum,
            w_e=w_e,
            w_q=w_q,
            placement_slack=placement_slack,
            match_threshold=match_threshold or 0.0,
            spread_by_credit=spread_by_credit,
        )
    raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}; got {name!r}")


# ---- where a dispatch went against the prompt's held prefix (diagnostics) ----

#: The kinds :func:`placement_kind` returns: ``new`` (every candidate worker,
#: or none, held the prompt's longest match: placed by load and credit
#: alone), ``held`` (to a worker holding its longest match), ``off_credit``
#: (away from the holders, none of which had the client's credit: D2LPM's
#: rule) and ``off_other`` (away from the holders for another reason: load,
#: or a holder was not a candidate).
PLACEMENTS: tuple[str, ...] = ("held", "off_credit", "off_other", "new")

#: The dispatchers (by ``Dispatcher.policy``) that keep a prefix tree: they
#: take workers' eviction reports, and their placements mean something.
PREFIX_AWARE: tuple[str, ...] = ("D2LPM", "PrefixAffinity")


@dataclass(frozen=True)
class Probe:
    """What a dispatcher knew of a prompt just before it dispatched it:
    the longest prefix some worker holds (0: it decides nothing), that
    prefix's holders among the candidates, and whether the client had
    credit on one of them (D2LPM's deficit; None for a dispatcher without
    credit). ``held_len`` is that prefix's length even when it decides
    nothing (every candidate holds it, as a shared system prompt): the
    prompt past it is what is new."""

    match_len: int
    holders: frozenset[int]
    credit: bool | None
    held_len: int = 0


def probe_placement(d: Any, client: str, tokens: Any, workers: Iterable[int]) -> Probe:
    """Call before ``d`` dispatches ``tokens`` among ``workers`` (its
    :meth:`Dispatcher.locality`, and D2LPM's deficits); then
    :func:`placement_kind` with the worker it chose."""
    slots = set(workers)
    held, holders, counts = d.locality(tokens)
    g = frozenset(holders).intersection(slots)
    # held everywhere (or nowhere), or not locality by the dispatcher's own
    # rule (too short a part of the prompt for D2LPM's match_threshold):
    # the prefix decides nothing
    n = 0 if g.issuperset(slots) or not counts else held
    deficit = getattr(d, "deficit", None)
    credit = None if deficit is None else any(deficit(client, w) > 0 for w in g)
    return Probe(n, g, credit, held)


def placement_kind(probe: Probe, worker: int) -> str:
    """One of :data:`PLACEMENTS` for a dispatch to ``worker``."""
    if probe.match_len == 0:
        return "new"
    if worker in probe.holders:
        return "held"
    return "off_credit" if probe.credit is False and probe.holders else "off_other"


# ---- an agreed first placement of new documents (many routers) ----

#: Prompt tokens past the longest held prefix that name a new document
#: (:func:`document_key`); a prompt with fewer tokens held nowhere is no
#: new document.
DOCUMENT_KEY_TOKENS = 256


def document_key(tokens: Any, probe: Probe) -> str | None:
    """The name of the new document a prompt starts: a digest of the
    prompt up to :data:`DOCUMENT_KEY_TOKENS` past its longest held prefix
    (``probe.held_len``), the same for every router whose tree holds that
    prefix (a shared system prompt, held on one worker or on all). None
    when fewer tokens than that are held nowhere: a document some worker
    holds, asked about again, is no new document."""
    if len(tokens) - probe.held_len < DOCUMENT_KEY_TOKENS:
        return None
    head = np.asarray(tokens[: probe.held_len + DOCUMENT_KEY_TOKENS], dtype=np.uint32)
    return hashlib.blake2b(head.tobytes(), digest_size=16).hexdigest()


def move_dispatch(d: Any, request_id: Any, client: str, tokens: Any, kept: int, worker: int) -> int:
    """Move an in-flight dispatch its worker never served to ``worker``:
    withdrawn (D2LPM refunds the charge), the prompt past its first
    ``kept`` tokens (what the old worker held before) forgotten there, so
    the tree does not believe the old worker holds a prompt it never got,
    then dispatched to ``worker``. Returns ``worker``."""
    old = d.withdraw(request_id)
    if len(tokens) > kept:
        d.on_evict(old, tokens, kept)
    return int(d.dispatch_among(request_id, client, tokens, [worker]))


class FirstPlacement:
    """Where new documents go, agreed by every router that asks this one
    table (the Ray routers' hub, :mod:`fairq.ray.hub`; the simulator's
    fleet): a document placed before goes where it went while that worker
    is a candidate; a new one goes where the asking router proposes unless
    that worker holds more than ``slack`` documents above the fewest, else
    to the candidate with the fewest documents placed on it (ties: the
    least id). The ``keep`` most recently placed documents are remembered.

    >>> t = FirstPlacement()
    >>> t.place("doc-a", [0, 1], 1), t.place("doc-b", [0, 1], 1), t.place("doc-a", [1, 0], 0)
    (1, 0, 1)
    """

    def __init__(self, keep: int = 65536) -> None:
        self._keep = keep
        #: document key -> the worker it was placed on (least recent first)
        self._placed: OrderedDict[str, Hashable] = OrderedDict()
        #: worker -> documents in ``_placed`` on it
        self._claims: dict[Any, int] = {}

    def place(self, key: str, workers: Sequence[Any], proposed: Any = None, slack: int = 0) -> Any:
        """The worker among ``workers`` (non-empty) that the document
        ``key`` goes to (see the class doc). A new document goes to
        ``proposed`` (the asking router's own choice) when that worker holds
        at most ``slack`` documents more than the fewest any of ``workers``
        holds; else to the one with the fewest."""
        if not workers:
            raise ValueError("place needs at least one candidate worker")
        placed, claims = self._placed, self._claims
        owner = placed.get(key)
        if owner is not None and owner in workers:
            placed.move_to_end(key)
            return owner
        if owner is not None:  # its worker is gone or not offered: placed again
            claims[owner] -= 1
        best = min(workers, key=lambda w: (claims.get(w, 0), w))
        if proposed is not None and claims.get(proposed, 0) <= claims.get(best, 0) + slack:
            best = proposed
        placed[key] = best
        placed.move_to_end(key)
        claims[best] = claims.get(best, 0) + 1
        if len(placed) > self._keep:
            _, w = placed.popitem(last=False)
            claims[w] -= 1
        return best

    def placements(self) -> dict[Any, int]:
        """Documents remembered per worker."""
        return {w: n for w, n in self._claims.items() if n}
