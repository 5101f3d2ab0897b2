"""The shared view of the D2LPM routers of one deployment (no Ray import).

Every handle and every HTTP proxy runs its own :class:`FairqD2LPMRouter`,
each with its own D2LPM state. Alone, a router counts only its own
dispatches: its per-replica load ``s_w`` misses the others' requests and its
per-tenant deficits the others' charges, so it places tenants on a replica
another router has filled (docs/results/ray_vllm.md, "Two ingress routers").
The shared view gives every router what the replicas saw:

- **What carries it:** each replica's routing stats (the same channel as
  the finish and eviction feedback, :mod:`fairq.ray.feedback`). Serve's
  controller calls ``record_routing_stats()`` every
  ``request_routing_stats_period_s`` and broadcasts the result to every
  router of the deployment. We chose it over a named actor or the GCS
  key-value store because it adds no process and no single point of failure:
  it is the path the routers already read, each replica publishes only
  itself, and a router reads what has arrived without waiting on anything.
  A named actor is available as a shortcut on top of it (the hub, below),
  never in its place.
- **What a replica publishes** (``ReplicaFeedback``): a ``start`` event per
  request it takes (request id, tenant, the prompt's first ``view_tokens``
  token ids and its length), the tenant in every ``finish`` event, the ids
  of the requests it holds now (``inflight``) and a publication stamp.
- **What a router does with it** (:class:`SharedView`): a ``start`` of a
  request it did not route is ``observe_dispatch``: the prefix goes into its
  tree (the cache summary), the tenant is charged ``w_e * prompt length`` on
  that replica; a ``finish`` of such a request is ``observe_finish`` (the
  output charge); ``inflight`` less its own requests is the replica's
  ``external_load``, which the core adds to the router's own ``s_w`` when it
  chooses. Its own requests it knows exactly, at once.
- **Staleness:** a router's view of a replica is as old as that replica's
  last routing stats: at most one period plus the controller's broadcast.
  ``docs/results/routers.md`` measures what staleness costs.
- **Failure:** nothing waits on the view. If a replica's stats stop coming
  (the controller or the replica is gone), its external load is dropped
  after ``view_max_age_s`` and the router routes on its own dispatches, as
  without the view; the charges already applied stay (they are history).
  A router that dies takes only its own requests with it. Malformed view
  entries are counted (``view_errors``) and skipped.

- **A faster channel** (``view_hub=True``, :mod:`fairq.ray.hub`): the
  routers also post their dispatches to one named actor and keep a pull
  waiting there for the others'; a dispatch is applied once, from
  whichever channel brings it first.

Counters (``FairqD2LPMRouter.view.counters``): ``view_dispatches`` (from
the routing stats), ``hub_dispatches`` (from the hub) and
``view_finishes`` applied, ``view_snapshots`` (new ``inflight`` lists
applied), ``view_expired`` (replicas whose view aged out), ``view_errors``.
:meth:`SharedView.ages` summarizes how old the view was when the router
used it (seconds from a replica's publication stamp to a dispatch).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import fairq

__all__ = ["SharedView", "seconds_summary"]


def seconds_summary(kept: Iterable[float]) -> dict[str, float | int | None]:
    """``n`` and the 50th, 90th percentile and largest of some durations in
    seconds (None when there are none)."""
    a = np.sort(np.fromiter(kept, dtype=float))
    if not len(a):
        return {"n": 0, "p50_s": None, "p90_s": None, "max_s": None}
    return {
        "n": len(a),
        "p50_s": float(np.percentile(a, 50)),
        "p90_s": float(np.percentile(a, 90)),
        "max_s": float(a[-1]),
    }


class SharedView:
    """One router's use of the replicas' published view (see the module doc).

    Args:
        dispatcher: the router's D2LPM state.
        enabled: apply the view (False: today's per-router state only).
        max_age_s: a replica's external load is dropped when nothing new has
            come from it for this long.
        remember: own request ids kept to tell them from the others' (> 0).
        clock: monotonic seconds (tests pass their own).
        wall: wall-clock seconds, the replicas' publication stamps' clock
            (for :meth:`ages`).
    """

    #: dispatches whose view age :meth:`ages` keeps (the most recent)
    AGES_KEPT = 8192

    def __init__(
        self,
        dispatcher: fairq.D2LPM,
        *,
        enabled: bool = True,
        max_age_s: float = 30.0,
        remember: int = 65536,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._d = dispatcher
        self.enabled = enabled
        self.max_age_s = max_age_s
        self._remember = remember
        self._clock = clock
        self._wall = wall
        self._ages: deque[float] = deque(maxlen=self.AGES_KEPT)
        self._hub_ages: deque[float] = deque(maxlen=self.AGES_KEPT)
        self._mine: OrderedDict[str, None] = OrderedDict()
        #: the other routers' requests applied (from the hub or the stats)
        self._theirs: OrderedDict[str, None] = OrderedDict()
        #: slot -> requests the hub brought that no snapshot listed yet
        #: (id -> local time applied): they count in the replica's load
        self._pending: dict[int, dict[str, float]] = {}
        #: the other routers' requests whose finish came before their start
        #: (the hub may bring a start late): not counted as load when it comes
        self._finished_first: OrderedDict[str, None] = OrderedDict()
        #: slot -> local time the last view input from that replica came
        self._fresh: dict[int, float] = {}
        #: slot -> the stamp of the last ``inflight`` list applied
        self._stamp: dict[int, Any] = {}
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "view_dispatches",
                "hub_dispatches",
                "view_finishes",
                "view_snapshots",
                "view_expired",
                "view_errors",
            ),
            0,
        )

    # --- this router's own requests ---------------------------------------

    def mine(self, rid: str) -> None:
        """``rid`` is dispatched by this router (its start and finish in the
        view are not news)."""
        self._mine[rid] = None
        self._mine.move_to_end(rid)
        if len(self._mine) > self._remember:
            self._mine.popitem(last=False)

    def is_mine(self, rid: str) -> bool:
        """Dispatched by this router: in flight here (however long ago it
        was dispatched), or among the ``remember`` most recently dispatched
        or finished here (its finish may reach the view after this router
        saw it complete)."""
        return rid in self._mine or rid in self._d

    # --- what the replicas publish ------------------------------------------

    def on_start(self, slot: int, ev: Sequence[Any]) -> None:
        """A ``["start", rid, tenant, tokens, input_len]`` event (after its number)."""
        if not self.enabled:
            return
        if self._apply_start(slot, str(ev[2]), ev[3], ev[4], int(ev[5])):
            self.counters["view_dispatches"] += 1
            self._fresh[slot] = self._clock()

    def on_hub_start(
        self, slot: int, rid: str, tenant: Any, tokens: Any, n: int, sent: float | None = None
    ) -> None:
        """Another router's dispatch to the replica in ``slot``, from the hub
        (:mod:`fairq.ray.hub`), made at wall-clock time ``sent``: applied as
        its start event is, once."""
        if self.enabled and self._apply_start(slot, rid, tenant, tokens, n):
            self.counters["hub_dispatches"] += 1
            if sent is not None:
                self._hub_ages.append(max(0.0, self._wall() - sent))
            if rid in self._finished_first:  # history: not in flight
                del self._finished_first[rid]
            else:
                self._pending.setdefault(slot, {})[rid] = self._clock()

    def _apply_start(self, slot: int, rid: str, tenant: Any, tokens: Any, n: int) -> bool:
        """Apply another router's request once (the hub and the replica's
        stats may both bring it); False if it is ours or already applied."""
        if self.is_mine(rid) or rid in self._theirs:
            return False
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"start event {rid!r}: tenant must be a non-empty str")
        self._d.observe_dispatch(tenant, slot, np.asarray(tokens, dtype=np.uint32), n)
        self._theirs[rid] = None
        if len(self._theirs) > self._remember:
            self._theirs.popitem(last=False)
        return True

    def on_finish(self, slot: int, rid: str, output_tokens: int, tenant: Any) -> None:
        """A finish of a request this router may not have routed."""
        if not self.enabled or self.is_mine(rid) or not isinstance(tenant, str) or not tenant:
            return
        self._pending.get(slot, {}).pop(rid, None)
        if rid not in self._theirs:  # its start may still come, from the hub
            self._finished_first[rid] = None
            if len(self._finished_first) > self._remember:
                self._finished_first.popitem(last=False)
        self._d.observe_finish(tenant, slot, output_tokens)
        self.counters["view_finishes"] += 1
        self._fresh[slot] = self._clock()

    def on_snapshot(self, slot: int, entry: Mapping[str, Any]) -> None:
        """The replica's ``inflight`` ids: the ones not ours are its external load."""
        inflight = entry.get("inflight")
        if not self.enabled or inflight is None:
            return
        stamp = entry.get("time")
        if stamp is not None and stamp == self._stamp.get(slot):
            return  # the same publication again
        if not isinstance(inflight, Sequence) or isinstance(inflight, str):
            self.counters["view_errors"] += 1
            return
        ids = {str(rid) for rid in inflight}
        others = sum(1 for rid in ids if not self.is_mine(rid))
        # the hub's requests this publication does not list yet still count
        pending = self._pending.get(slot)
        if pending:
            old = self._clock() - self.max_age_s
            for rid in [r for r, t in pending.items() if r in ids or t < old]:
                del pending[rid]
            others += len(pending)
        self._set_external(slot, others)
        self._stamp[slot] = stamp
        self._fresh[slot] = self._clock()
        self.counters["view_snapshots"] += 1

    # --- staleness -------------------------------------------------------------

    def note_dispatch(self, slots: Sequence[int]) -> None:
        """A dispatch among ``slots``: remember how old the view of them is
        (the oldest of their last publications; none applied: not counted)."""
        if not self.enabled:
            return
        stamps = [self._stamp.get(s) for s in slots]
        known = [t for t in stamps if isinstance(t, (int, float))]
        if known:
            self._ages.append(max(0.0, self._wall() - min(known)))

    def ages(self, hub: bool = False) -> dict[str, float | int | None]:
        """The view's age at this router's recent dispatches (``AGES_KEPT``):
        ``n`` and the 50th, 90th percentile and largest, in seconds (None
        when no dispatch saw a view). ``hub``: instead, the age of the other
        routers' dispatches the hub brought when they were applied (from
        their dispatch to their application here)."""
        return seconds_summary(self._hub_ages if hub else self._ages)

    def expire(self) -> None:
        """Drop the external load of every replica whose view is older than
        ``max_age_s`` (the router then counts its own dispatches there)."""
        if not self._fresh:
            return
        now = self._clock()
        for slot, t in list(self._fresh.items()):
            if now - t > self.max_age_s:
                del self._fresh[slot]
                self._stamp.pop(slot, None)
                self._pending.pop(slot, None)
                self._set_external(slot, 0)
                self.counters["view_expired"] += 1

    def forget(self, slot: int) -> None:
        """The replica left its slot (the core already zeroed its load)."""
        self._pending.pop(slot, None)
        self._fresh.pop(slot, None)
        self._stamp.pop(slot, None)

    def _set_external(self, slot: int, n: int) -> None:
        loads = self._d.external_load
        if loads[slot] != n:
            loads[slot] = n
            self._d.external_load = loads
