"""Several routers over the same workers, each seeing a stale shared view.

:class:`RouterFleet` stands where the simulator's one dispatcher stands
(``dispatch``, ``on_finish``, ``on_evict``). It holds ``routers``
dispatchers of the configured policy (the core's :class:`fairq.Dispatcher`:
each router's state is one such object, nothing else), assigns each
arriving request to one of them (:data:`ASSIGN`), and models the shared view
with its staleness:

- a router knows its own dispatches and its own requests' finishes exactly,
  at once (they pass through it);
- everything else reaches it ``staleness`` seconds late, through the shared
  view: the other routers' dispatches (``observe_dispatch``: the prefix they
  placed, the D2LPM charge, one more request in flight on that worker),
  their requests' finishes (``observe_finish``: the output charge, one fewer
  in flight) and the workers' eviction reports (``on_evict``).

The events go into one time-ordered log; before a router chooses a worker
it applies, in log order, every event of the others stamped at or before
``now - staleness`` that it has not applied. With ``staleness = 0`` each
router therefore holds what one global router would (its deficit rows may
lag by refill rounds it grants at its next dispatch of that client), and
the fleet dispatches exactly as one router does, for any number of routers
(``tests/test_sim_routers.py``). A constant lag ``T`` stands for any
publication scheme whose view is at most ``T`` old (a periodic publish every
``P`` seconds is at most ``P`` old): it is the worst case of that bound.

With ``hub_placement`` (D2LPM routers), a prompt that starts a new document
in the choosing router's view (:func:`fairq.dispatch.document_key`) is
dispatched by the router, then moved where one table shared by the routers
says (:class:`fairq.dispatch.FirstPlacement`), asked at no delay: the Ray
routers' hub (``fairq.ray.RouterOptions.hub_placement``) with its round
trip taken as free.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from fairq.dispatch import (
    PLACEMENTS,
    PREFIX_AWARE,
    FirstPlacement,
    document_key,
    move_dispatch,
    placement_kind,
    probe_placement,
)

__all__ = ["ASSIGN", "RouterFleet", "check_fleet", "routers_table"]

#: How arriving requests are assigned to routers: ``rr``: the k-th request to
#: router ``k mod N``; ``random``: uniformly (seeded); ``tenant``: every
#: request of a client to one router (clients in order of first arrival, the
#: i-th to router ``i mod N``), as a consistent-hash ingress does.
ASSIGN: tuple[str, ...] = ("rr", "random", "tenant")

_DISPATCH, _FINISH, _EVICT = 0, 1, 2


def check_fleet(routers: Any, staleness: Any, assign: Any) -> None:
    """Check a fleet's settings (``SimConfig``'s ``routers``,
    ``view_staleness``, ``router_assign``); a ``ValueError`` naming the
    field."""
    if isinstance(routers, bool) or not isinstance(routers, int) or routers < 1:
        raise ValueError(f"routers must be an int >= 1, got {routers!r}")
    if isinstance(staleness, bool) or not isinstance(staleness, (int, float)) or not staleness >= 0:
        raise ValueError(f"view_staleness must be a number >= 0 or inf, got {staleness!r}")
    if assign not in ASSIGN:
        raise ValueError(f"router_assign must be one of {', '.join(ASSIGN)}; got {assign!r}")


class RouterFleet:
    """``routers`` dispatchers over the same workers with a shared view
    ``staleness`` seconds old (see the module doc).

    Args:
        make: builds one router's dispatcher (all the same policy and workers).
        routers: how many (>= 1).
        staleness: the view's age in seconds (>= 0; ``inf``: no shared view,
            each router on its own dispatches, what separate routers did
            before the view).
        assign: one of :data:`ASSIGN`.
        clock: the simulated time now.
        seed: seeds ``assign="random"``.
        hub_placement: D2LPM routers place new documents by one shared
            :class:`fairq.dispatch.FirstPlacement` (other policies: ignored).
        hub_placement_slack: its ``slack`` (documents a worker may hold
            above the fewest and still take a new one its router chose).
    """

    def __init__(
        self,
        make: Callable[[], Any],
        routers: int,
        staleness: float,
        assign: str,
        clock: Callable[[], float],
        seed: int = 0,
        hub_placement: bool = False,
        hub_placement_slack: int = 0,
    ) -> None:
        check_fleet(routers, staleness, assign)
        self.routers = [make() for _ in range(routers)]
        self.staleness = float(staleness)
        self.assign = assign
        self.clock = clock
        self.policy: str = self.routers[0].policy
        self.num_workers: int = self.routers[0].num_workers
        self._rng = random.Random(seed)
        self._next = 0
        #: assign="tenant": each client's router
        self.client_router: dict[str, int] = {}
        #: rid -> (router, client, worker) while in flight
        self._owner: dict[Any, tuple[int, str, int]] = {}
        #: (time, source router or -1, kind, a, b, c)
        self._log: list[tuple[float, int, int, Any, Any, Any]] = []
        self._cursor = [0] * routers
        #: requests each router dispatched, and view events it applied
        self.dispatched = [0] * routers
        self.applied = [0] * routers
        #: dispatches by where they went against the prompt's longest prefix
        #: held in the choosing router's view (:func:`fairq.dispatch.placement_kind`;
        #: prefix-aware dispatchers only)
        self.placements = dict.fromkeys(PLACEMENTS, 0)
        self._probe = self.policy in PREFIX_AWARE
        #: the routers' agreed placement of new documents (hub_placement)
        self.documents = FirstPlacement() if hub_placement and self.policy == "D2LPM" else None
        self.hub_placement_slack = hub_placement_slack

    def router_for(self, client: str) -> int:
        """The router the next request of ``client`` goes to (advances the
        round-robin cursor / the random stream)."""
        n = len(self.routers)
        if self.assign == "rr":
            r = self._next
            self._next = (r + 1) % n
            return r
        if self.assign == "random":
            return self._rng.randrange(n)
        got = self.client_router.get(client)
        if got is None:
            got = self.client_router[client] = len(self.client_router) % n
        return got

    def catch_up(self, r: int, until: float) -> None:
        """Router ``r`` applies the view's events stamped at or before ``until``."""
        log = self._log
        i = self._cursor[r]
        d = self.routers[r]
        n = 0
        while i < len(log) and log[i][0] <= until:
            _, src, kind, a, b, c = log[i]
            i += 1
            if src == r:
                continue
            n += 1
            if kind == _DISPATCH:
                d.observe_dispatch(a, b, c)
            elif kind == _FINISH:
                d.observe_finish(a, b, c)
            else:
                d.on_evict(a, b, c)
        self._cursor[r] = i
        self.applied[r] += n

    def dispatch(self, request_id: Any, client: str, tokens: Any) -> int:
        """Assign the request to a router, bring that router's view up to
        ``now - staleness`` and let it choose a worker. An error (a duplicate
        id, the dispatcher's own) leaves the assignment as it was: the next
        request goes where this one would have."""
        if request_id in self._owner:
            raise ValueError(f"request_id {request_id!r} is already in flight")
        now = self.clock()
        cursor, new_client = self._next, client not in self.client_router
        rng = self._rng.getstate() if self.assign == "random" else None
        r = self.router_for(client)
        self.catch_up(r, now - self.staleness)
        d = self.routers[r]
        try:
            probe = None
            if self._probe:
                probe = probe_placement(d, client, tokens, range(self.num_workers))
            w: int = d.dispatch(request_id, client, tokens)
            docs = self.documents
            key = None if docs is None or probe is None else document_key(tokens, probe)
            if docs is not None and probe is not None and key is not None:
                # a new document: to the worker the routers agree on
                agreed = docs.place(key, range(self.num_workers), w, self.hub_placement_slack)
                if agreed != w:
                    w = move_dispatch(d, request_id, client, tokens, probe.held_len, agreed)
        except BaseException:
            self._next = cursor
            if rng is not None:
                self._rng.setstate(rng)
            if new_client:
                self.client_router.pop(client, None)
            raise
        self._owner[request_id] = (r, client, w)
        self._log.append((now, r, _DISPATCH, client, w, tokens))
        self.dispatched[r] += 1
        if probe is not None:
            self.placements[placement_kind(probe, w)] += 1
        return w

    def on_finish(self, request_id: Any, output_tokens: int) -> int:
        """The request finished: its router learns it now, the others
        through the view. An unknown id is a ``KeyError``; an error of the
        router's (a bad ``output_tokens``) leaves the request in flight."""
        r, client, w = self._owner[request_id]
        self.routers[r].on_finish(request_id, output_tokens)
        del self._owner[request_id]
        self._log.append((self.clock(), r, _FINISH, client, w, output_tokens))
        return w

    def on_evict(self, worker: int, tokens: Any, kept: int = 0) -> int:
        """A worker's eviction report: every router learns it through the view."""
        self._log.append((self.clock(), -1, _EVICT, worker, tokens, kept))
        return 0

    def __len__(self) -> int:
        return len(self._owner)

    def __contains__(self, request_id: Any) -> bool:
        return request_id in self._owner

    def _sum(self, attr: str) -> list[int]:
        total = [0] * self.num_workers
        for d in self.routers:
            for w, n in enumerate(getattr(d, attr)):
                total[w] += n
        return total

    @property
    def queue_sizes(self) -> list[int]:
        """Requests in flight per worker (all routers)."""
        return self._sum("queue_sizes")

    @property
    def dispatched_counts(self) -> list[int]:
        """Requests ever dispatched to each worker (all routers)."""
        return self._sum("dispatched_counts")

    def settle(self) -> list[Sequence[int]]:
        """Apply every event to every router (the view at rest); returns each
        router's external load, all zeros once nothing is in flight."""
        for r in range(len(self.routers)):
            self.catch_up(r, float("inf"))
        return [d.external_load for d in self.routers]


def routers_table(results: Sequence[dict[str, Any]]) -> str:
    """Markdown: per (workload, workers, assignment), one row per number of
    routers, one column per view staleness; each cell ``Jain (cost) / cache
    hit / service`` with the service rate as a ratio of the one-router run's
    (``fairq simulate --routers ... --view-staleness ...`` prints it under its
    table)."""
    out: list[str] = []
    groups = sorted({(r["workload"], r["workers"]) for r in results if r["workers"] > 1})
    for wl, w in groups:
        mine = [r for r in results if r["workload"] == wl and r["workers"] == w]
        base = next((r for r in mine if r["routers"] == 1 and r["view_staleness"] == 0), None)
        ref = base["service_tok_s"] if base else float("nan")

        def cell(r: dict[str, Any], ref: float = ref) -> str:
            vals = (r.get("jain_cost"), r.get("cache_hit"), r["service_tok_s"] / ref)
            return " / ".join("-" if v is None or v != v else f"{v:.2f}" for v in vals)

        for a in sorted({r["router_assign"] for r in mine if r["routers"] > 1}):
            rows = [r for r in mine if r["router_assign"] == a and r["routers"] > 1]
            ts = sorted({r["view_staleness"] for r in rows})
            heads = [f"T={t:g}s" if t < float("inf") else "no view" for t in ts]
            out.append(
                f"\n{wl}, {w} workers, assignment {a}: Jain (cost) / cache hit / service "
                "tok/s over one router's" + (f"; one router: {cell(base)}" if base else "")
            )
            out.append("\n| routers | " + " | ".join(heads) + " |")
            out.append("|---" * (len(ts) + 1) + "|")
            for n in sorted({r["routers"] for r in rows}):
                by_t = {r["view_staleness"]: r for r in rows if r["routers"] == n}
                cells = [cell(by_t[t]) if t in by_t else "" for t in ts]
                out.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(out)
