"""``FairqD2LPMRouter``: D2LPM (ALGORITHMS.md section 7) as a Ray Serve request router.

Written and tested against Ray 2.60's ``ray.serve.request_router`` API
(``fairq[ray]`` pins ``ray[serve]>=2.60,<2.61``). The policy is the Rust
core's ``fairq.D2LPM``; this class only maps Ray's lifecycle onto it:

* replicas <-> dispatcher slots: a replica takes a free slot when it appears
  (``update_replicas``) and gives it back when it goes (scaled down, replaced,
  or ``on_replica_actor_died``): ``D2LPM.remove_worker`` drops it from the
  global prefix tree and resets every tenant's deficit there, so routing
  never waits on, or keeps affinity to, a replica that is gone;
* ``choose_replicas``: the tenant and prompt tokens come from the extractors
  (:mod:`fairq.ray.extract`); ``D2LPM.dispatch_among`` picks a
  replica among the live ones and records the dispatch at once (so requests
  routed in the same burst see each other's charges). The pick is rank 0;
  with ``spill`` the other replicas form rank 1, which Ray's selection uses
  only when the pick cannot take the request now (its queue is at
  ``max_ongoing_requests`` or it does not answer the probe);
* ``on_request_routed``: the replica accepted the request. If Ray sent it to
  another replica than the pick, the dispatch moves there
  (``withdraw`` + ``dispatch_among([that replica])``);
* ``on_request_completed``: ``on_finish(request, 0)`` frees the replica's queue
  slot; the output tokens arrive from the replica through the routing-stats
  hook (:mod:`fairq.ray.feedback`) and are charged with
  ``charge_output``; KV-cache evictions reported there go to ``on_evict``;
* a request cancelled before it was routed is withdrawn (its charge refunded);
* admission control (``limits``, :mod:`fairq.ledger.caps`): the first time
  ``choose_replicas`` sees a request, :meth:`AdmissionControl.offer` decides;
  a refused request's future fails with Serve's ``BackPressureError``
  (status 429 and ``Retry-After`` at Serve's HTTP proxy, 413 for a request
  no cap can hold) before it is dispatched, and an accepted one is held
  until its completion (or cancellation) is seen. The policy's account of
  each tenant is its D2LPM deficits summed over the live replicas, negated.

Every router instance (one per ``DeploymentHandle`` and per HTTP proxy) holds
its own D2LPM state and, with ``shared_view`` (the default), learns the
others' work from what the replicas publish (:mod:`fairq.ray.view`); see
docs/design/engines.md ("D2LPM on Ray Serve") for what separate state does to
the fairness bound and what the view gives back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from ray.serve.exceptions import BackPressureError
from ray.serve.request_router import (
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

import fairq
from fairq.dispatch import document_key, move_dispatch, placement_kind, probe_placement
from fairq.ledger.caps import AdmissionControl, Limits
from fairq.ray.extract import EMPTY, default_tenant, default_tokens, estimate_tokens
from fairq.ray.hub import HubLink, connect_ray, hub_name
from fairq.ray.options import RouterOptions
from fairq.ray.view import SharedView, seconds_summary

logger = logging.getLogger("ray.serve")

#: Seconds between two refreshes of admission control's accounts.
ACCOUNTS_INTERVAL_S = 1.0

#: Environment variable: a folder where each router writes what it saw
#: (:meth:`FairqD2LPMRouter.stats`, ``router-<pid>-<n>.json``, at most once
#: every ``ROUTER_STATS_INTERVAL_S``); the benchmark reads them.
ROUTER_STATS_DIR_ENV = "FAIRQ_RAY_ROUTER_STATS_DIR"

#: Seconds between two writes of a router's stats file.
ROUTER_STATS_INTERVAL_S = 1.0

#: Prompt token ids a hub post carries (as a replica's start event,
#: ``ReplicaFeedback.view_tokens``' default).
HUB_TOKENS = 2048

#: Ray releases this module was written and tested against.
SUPPORTED_RAY = ">=2.60,<2.61"


@dataclass
class _Request:
    """A request this router dispatched and has not seen complete."""

    tenant: str
    tokens: np.ndarray
    routed: bool = False
    completed_unrouted: bool = False  # a send completed before on_request_routed
    output_tokens: int = 0  # reported before completion (rare)
    watched_future: int = 0  # id() of the PendingRequest future we watch
    held: int = -1  # tokens admission control holds for it (-1: none)


class FairqD2LPMRouter(RequestRouter):
    """Ray Serve request router running D2LPM from fairq's Rust core.

    Configure it with :func:`fairq.ray.fairq_router_config`
    (which validates the options in the caller's process) or directly::

        RequestRouterConfig(
            request_router_class="fairq.ray:FairqD2LPMRouter",
            request_router_kwargs={"worker_quantum": 4096},
            request_routing_stats_period_s=1.0,
        )

    ``request_router_kwargs`` are :class:`RouterOptions` fields.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setup(RouterOptions())

    # --- configuration ----------------------------------------------------

    def initialize_state(self, **kwargs: Any) -> None:
        """Apply ``request_router_kwargs`` (validated; errors name the field)."""
        self._setup(RouterOptions(**kwargs))
        for replica_id in list(self._replica_id_set):
            self._add_replica(replica_id)

    def _setup(self, options: RouterOptions) -> None:
        self.options = options
        self._d: fairq.D2LPM = options.dispatcher()
        self._slot: dict[ReplicaID, int] = {}
        self._free: list[int] = list(range(options.max_replicas - 1, -1, -1))
        self._requests: dict[str, _Request] = {}
        self._recent: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._seen: dict[ReplicaID, tuple[Any, int]] = {}
        #: the shared view of the deployment's routers (fairq.ray.view)
        self.view = SharedView(
            self._d,
            enabled=options.shared_view,
            max_age_s=options.view_max_age_s,
            remember=options.recent_requests,
        )
        #: the faster channel to the other routers (fairq.ray.hub), or None
        self.hub: HubLink | None = None
        if options.view_hub:
            dep = self._deployment_id
            self.hub = HubLink(
                f"{os.getpid()}-{id(self):x}",
                connect_ray(hub_name(dep.app_name, dep.name)),
                options.view_hub_wait_s,
            )
        self._hub_task: asyncio.Task[None] | None = None
        #: Counters: requests dispatched, moved to another replica by Ray,
        #: withdrawn (cancelled before routing), finished; output charges and
        #: evictions applied; replicas removed; feedback events missed or
        #: malformed; extractor failures; replicas left without a slot.
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "dispatched",
                "moved",
                "withdrawn",
                "finished",
                "output_charged",
                "evictions",
                "replicas_removed",
                "feedback_lost",
                "feedback_errors",
                "extractor_errors",
                "unslotted",
                "refused",
            ),
            0,
        )
        #: with ROUTER_STATS_DIR_ENV: replica unique id -> tenant -> requests routed there
        self._routed: dict[str, dict[str, int]] = {}
        #: with ROUTER_STATS_DIR_ENV: dispatches by where they went against
        #: the longest held prefix (:func:`fairq.dispatch.placement_kind`)
        self._placements: dict[str, int] = {}
        self._stats_dir = os.environ.get(ROUTER_STATS_DIR_ENV, "").strip() or None
        self._stats_at = float("-inf")
        self.admission: AdmissionControl | None = None
        limits = options.limits
        if isinstance(limits, Limits) and limits.active:  # always a Limits once validated
            self.admission = AdmissionControl(limits, options.tenant_weights)
        self._accounts_at = float("-inf")

    @property
    def dispatcher(self) -> fairq.D2LPM:
        """The D2LPM state (read it; do not dispatch on it)."""
        return self._d

    def slot_of(self, replica_id: ReplicaID) -> int | None:
        """The dispatcher slot of a replica (None if it has none)."""
        return self._slot.get(replica_id)

    # --- replicas -----------------------------------------------------------

    def _add_replica(self, replica_id: ReplicaID) -> int | None:
        slot = self._slot.get(replica_id)
        if slot is not None:
            return slot
        if not self._free:
            self.counters["unslotted"] += 1
            logger.warning(
                "fairq D2LPM router: %s gets no slot (max_replicas=%d in use); it is offered "
                "only when the others cannot take a request",
                replica_id,
                self.options.max_replicas,
            )
            return None
        slot = self._free.pop()
        self._slot[replica_id] = slot
        # every router ranks a replica alike for the agreed placement,
        # whatever slot it took here
        self._d.set_worker_name(slot, str(replica_id.unique_id))
        return slot

    def _remove_replica(self, replica_id: ReplicaID) -> None:
        slot = self._slot.pop(replica_id, None)
        self._seen.pop(replica_id, None)
        if slot is None:
            return
        # Its in-flight requests leave the dispatcher; Ray fails or retries
        # them, and the retries are dispatched again among the live replicas.
        self._d.remove_worker(slot)
        self.view.forget(slot)
        self._free.append(slot)
        self.counters["replicas_removed"] += 1

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        """Ray's replica-set update (membership and routing stats)."""
        super().update_replicas(replicas)
        live = set(self._replica_id_set)
        for replica_id in [r for r in self._slot if r not in live]:
            self._remove_replica(replica_id)
        for r in replicas:
            self._add_replica(r.replica_id)
        for r in replicas:
            self._apply_feedback(r)
        self._start_hub()
        self._write_stats()

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """The replica died (seen by a probe or a request): forget it now."""
        super().on_replica_actor_died(replica_id)
        self._remove_replica(replica_id)

    # --- routing ------------------------------------------------------------

    def _extract(self, pr: PendingRequest) -> tuple[str, np.ndarray]:
        opts = self.options
        args, kwargs = pr.args, pr.kwargs
        tenant: Any
        if not callable(opts.tenant_extractor):
            tenant = default_tenant(
                args, kwargs, tenant_header=opts.tenant_header, default=opts.default_tenant
            )
        else:
            try:
                tenant = opts.tenant_extractor(args, kwargs)
            except Exception:
                tenant = None
            if not isinstance(tenant, str) or not tenant:
                self.counters["extractor_errors"] += 1
                tenant = opts.default_tenant
        if not callable(opts.tokens_extractor):
            tokens = default_tokens(args, kwargs)
        else:
            try:
                raw = np.asarray(opts.tokens_extractor(args, kwargs))
                if raw.ndim != 1 or (raw.size and raw.dtype.kind not in "iu"):
                    raise ValueError("not a 1-d array of ints")
                if raw.size and (raw.min() < 0 or raw.max() > 0xFFFFFFFF):
                    raise ValueError("token id out of range")
                tokens = raw.astype(np.uint32)
            except Exception:
                self.counters["extractor_errors"] += 1
                tokens = EMPTY
        return tenant, tokens

    def _watch(self, rid: str, req: _Request, pr: PendingRequest) -> None:
        """Withdraw the dispatch if the caller cancels before it is routed
        (Ray replaces the future on a retry: watch each one)."""
        fut = pr.future
        if req.watched_future != id(fut):
            req.watched_future = id(fut)
            fut.add_done_callback(partial(self._on_future_done, rid))

    def _on_future_done(self, rid: str, fut: Any) -> None:
        if not fut.cancelled():
            return
        req = self._requests.get(rid)
        if req is None or req.routed:
            return
        del self._requests[rid]
        self._release(req)
        if rid in self._d:
            self._d.withdraw(rid)
            self.counters["withdrawn"] += 1

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """Rank 0: D2LPM's pick among the live replicas; rank 1 (with
        ``spill``): the others."""
        if not candidate_replicas:
            return []
        if pending_request is None:
            return [list(candidate_replicas)]
        by_slot: dict[int, RunningReplica] = {}
        unslotted: list[RunningReplica] = []
        for r in candidate_replicas:
            s = self._slot.get(r.replica_id)
            if s is None:
                s = self._add_replica(r.replica_id)
            if s is None:
                unslotted.append(r)
            else:
                by_slot[s] = r
        if not by_slot:
            return [list(candidate_replicas)]
        rid = pending_request.metadata.internal_request_id
        req = self._requests.get(rid)
        if req is None:
            tenant, tokens = self._extract(pending_request)
            held = self._admit(tenant, tokens, pending_request)
            if held is None:  # refused: the future holds the error
                return [list(candidate_replicas)]
            req = self._requests[rid] = _Request(tenant, tokens, held=held)
        self._watch(rid, req, pending_request)
        # Chosen again: the send whose completion we saw was rejected.
        req.completed_unrouted = False
        if rid in self._d:
            # Chosen before (Ray retries after a rejection or a backoff): keep
            # the pick while its replica is live, else choose again.
            w = self._d.worker_of(rid)
            if w not in by_slot:
                self._d.withdraw(rid)
        if rid not in self._d:
            got = await self._dispatch(rid, req, by_slot)
            if got is None:  # cancelled, or its candidates gone, meanwhile
                return [list(candidate_replicas)]
            w = got
        pick = by_slot[w]
        if not self.options.spill:
            return [[pick]]
        rest = [r for s, r in by_slot.items() if s != w] + unslotted
        return [[pick], rest] if rest else [[pick]]

    async def _dispatch(
        self, rid: str, req: _Request, by_slot: dict[int, RunningReplica]
    ) -> int | None:
        """Dispatch ``rid`` among ``by_slot``'s replicas: D2LPM's choice,
        and with ``hub_placement`` a new document then moves to the replica
        the hub agrees on (:meth:`_agree`). None: cancelled, or every
        candidate gone, while the hub answered (nothing dispatched)."""
        slots = list(by_slot)
        probe = None
        if self._stats_dir is not None or self.options.hub_placement:
            probe = probe_placement(self._d, req.tenant, req.tokens, slots)
        self.view.expire()
        self.view.note_dispatch(slots)
        self.view.mine(rid)
        w = self._d.dispatch_among(rid, req.tenant, req.tokens, slots)
        if probe is not None and self.options.hub_placement and len(slots) > 1:
            key = document_key(req.tokens, probe)
            if key is not None:
                got = await self._agree(rid, req, key, w, probe.held_len, by_slot)
                if got is None:
                    return None
                w = got
        self.counters["dispatched"] += 1
        if probe is not None and self._stats_dir is not None:
            kind = placement_kind(probe, w)
            self._placements[kind] = self._placements.get(kind, 0) + 1
        if self.hub is not None:
            self._post(rid, req, by_slot[w])
        return w

    async def _agree(
        self,
        rid: str,
        req: _Request,
        key: str,
        w: int,
        kept: int,
        by_slot: dict[int, RunningReplica],
    ) -> int | None:
        """Ask the hub where the new document ``key``, dispatched to slot
        ``w``, goes (:meth:`fairq.ray.hub.ViewHub.place`, ``w`` proposed)
        and move the dispatch there (:func:`fairq.dispatch.move_dispatch`:
        ``w`` held the prompt's first ``kept`` tokens before). Meanwhile the request may have been
        cancelled (None: its withdrawal is done) or replicas may have gone
        (``by_slot`` loses them; None when none is left); with no answer
        it stays where D2LPM put it."""
        assert self.hub is not None
        uid = {s: str(r.replica_id.unique_id) for s, r in by_slot.items()}
        got = await self.hub.place(
            key, list(uid.values()), uid[w], self.options.hub_placement_slack
        )
        if self._requests.get(rid) is not req:
            return None
        for s in [s for s, r in by_slot.items() if self._slot.get(r.replica_id) != s]:
            del by_slot[s]
        if not by_slot:
            return None
        agreed = [s for s in by_slot if uid[s] == got]
        if rid not in self._d:  # its replica went meanwhile
            return self._d.dispatch_among(rid, req.tenant, req.tokens, agreed or list(by_slot))
        if agreed and agreed[0] != w:
            return move_dispatch(self._d, rid, req.tenant, req.tokens, kept, agreed[0])
        return w

    # --- the hub (fairq.ray.hub) ---------------------------------------------

    def _post(self, rid: str, req: _Request, replica: RunningReplica) -> None:
        """Post this dispatch to the hub (not waited for); the first one
        starts the pull loop if the first replica update did not."""
        assert self.hub is not None
        head = req.tokens[:HUB_TOKENS].tolist()
        uid = str(replica.replica_id.unique_id)
        self.hub.note((rid, req.tenant, head, len(req.tokens), uid, time.time()))
        self._start_hub()

    def _start_hub(self) -> None:
        """Start the hub loop on the running event loop, once (from the
        first replica update or dispatch: a router pulls before it routes)."""
        if self.hub is None or (self._hub_task is not None and not self._hub_task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the router's loop: next time
            return
        self._hub_task = loop.create_task(self._hub_loop())

    async def _hub_loop(self) -> None:
        """Sync with the hub for as long as the router lives."""
        assert self.hub is not None
        while True:
            await self._sync_hub()
            await asyncio.sleep(self.hub.pause_s())

    async def _sync_hub(self) -> None:
        """Post and pull (in the background of the router's loop); apply the
        other routers' dispatches to the shared view."""
        assert self.hub is not None
        new = await self.hub.sync()
        slots = {str(r.unique_id): s for r, s in self._slot.items()}
        for rid, tenant, head, n, replica, sent in new:
            slot = slots.get(replica)
            if slot is None:  # a replica this router has not seen (yet)
                continue
            try:
                self.view.on_hub_start(slot, str(rid), tenant, head, int(n), float(sent))
            except Exception:
                self.view.counters["view_errors"] += 1

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        """The replica accepted the request: make the dispatch record match."""
        rid = pending_request.metadata.internal_request_id
        req = self._requests.get(rid)
        if req is None:
            return
        req.routed = True
        if self._stats_dir is not None:
            per = self._routed.setdefault(replica_id.unique_id, {})
            per[req.tenant] = per.get(req.tenant, 0) + 1
        slot = self._slot.get(replica_id)
        if rid in self._d and self._d.worker_of(rid) != slot:
            self._d.withdraw(rid)
            if slot is not None:
                self.counters["moved"] += 1
        if slot is not None and rid not in self._d:
            self._d.dispatch_among(rid, req.tenant, req.tokens, [slot])
        req.tokens = EMPTY  # the tree has them; keep the memory small
        if req.completed_unrouted:
            # The response finished before Serve reported the acceptance (both
            # resolve on the router's loop; no re-choose came in between, so
            # that completion was this send's): finish now.
            self.on_request_completed(replica_id, rid)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """A send finished (served, failed, or rejected by the replica)."""
        rid = internal_request_id
        req = self._requests.get(rid)
        if req is None:
            return
        if not req.routed and self._use_replica_queue_len_cache:
            # Rejected (the replica's queue was full, or it died before
            # accepting): Serve retries the request and choose_replicas sees
            # it again. Or the response completed before Serve reported the
            # acceptance: on_request_routed follows without a re-choose and
            # finishes it. (Without the queue-length cache, e.g. under Ray
            # Client, replicas never reject and Serve does not call
            # on_request_routed: completion is the only report.)
            req.completed_unrouted = True
            return
        del self._requests[rid]
        self._release(req)
        if rid not in self._d:  # its replica was removed meanwhile
            return
        slot = self._d.on_finish(rid, req.output_tokens)
        # its finish may still come through the view: remembered as ours
        # from now on, not from its dispatch
        self.view.mine(rid)
        self.counters["finished"] += 1
        if req.output_tokens == 0:
            self._recent[rid] = (req.tenant, slot)
            while len(self._recent) > self.options.recent_requests:
                self._recent.popitem(last=False)

    # --- what this router saw -------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters, the shared view's counters and age at dispatch
        (:meth:`SharedView.ages`), how long the hub took to answer its
        placements (``hub_place``, the same summary), and, with
        ``ROUTER_STATS_DIR_ENV`` set,
        the requests routed per replica and tenant (``routed``) and where
        its dispatches went against the prompts' longest held prefixes
        (``placements``, :func:`fairq.dispatch.placement_kind`)."""
        return {
            "pid": os.getpid(),
            "time": time.time(),
            "shared_view": self.view.enabled,
            "counters": dict(self.counters),
            "view": dict(self.view.counters),
            "hub": None if self.hub is None else dict(self.hub.counters),
            "view_age": self.view.ages(),
            "hub_age": self.view.ages(hub=True),
            "hub_place": None if self.hub is None else seconds_summary(self.hub.place_s),
            "routed": {r: dict(t) for r, t in self._routed.items()},
            "placements": dict(self._placements),
        }

    def _write_stats(self) -> None:
        """Write :meth:`stats` to ``ROUTER_STATS_DIR_ENV`` (throttled; a
        failure to write is logged once and never stops routing)."""
        if self._stats_dir is None:
            return
        now = time.monotonic()
        if now - self._stats_at < ROUTER_STATS_INTERVAL_S:
            return
        self._stats_at = now
        path = os.path.join(self._stats_dir, f"router-{os.getpid()}-{id(self):x}.json")
        try:
            with open(path + ".tmp", "w") as f:
                json.dump(self.stats(), f)
            os.replace(path + ".tmp", path)
        except OSError as e:
            logger.warning("fairq D2LPM router: cannot write its stats to %s: %s", path, e)
            self._stats_dir = None

    # --- admission control ----------------------------------------------------

    def _admit(self, tenant: str, tokens: np.ndarray, pr: PendingRequest) -> int | None:
        """Offer the request to admission control: the tokens held for it
        (-1 without limits), or None when refused (its future then fails
        with ``BackPressureError``)."""
        if self.admission is None:
            return -1
        now = time.monotonic()
        if now - self._accounts_at >= ACCOUNTS_INTERVAL_S:
            self._accounts_at = now
            self.admission.set_accounts(self.share_leads())
        n = estimate_tokens(len(tokens), pr.args, pr.kwargs)
        refusal = self.admission.offer(tenant, n, now)
        if refusal is None:
            return n
        self.counters["refused"] += 1
        if not pr.future.done():
            pr.future.set_exception(
                BackPressureError(
                    num_queued_requests=self.admission.requests,
                    max_queued_requests=self.admission.limits.max_requests or -1,
                    status_code=refusal.status,
                    retry_after_s=refusal.retry_after_s,
                )
            )
        return None

    def _release(self, req: _Request) -> None:
        if self.admission is not None and req.held >= 0:
            self.admission.release(req.tenant, req.held)
            req.held = -1

    def share_leads(self) -> dict[str, float]:
        """Each tenant holding requests: how far over its share D2LPM says it
        is (minus its deficits summed over the live replicas)."""
        assert self.admission is not None
        slots = list(self._slot.values())
        return {
            t: -sum(self._d.deficit(t, w) for w in slots)
            for t, v in self.admission.stats().items()
            if v["held_requests"]
        }

    # --- replica feedback ---------------------------------------------------

    def _apply_feedback(self, replica: RunningReplica) -> None:
        try:
            stats = replica.routing_stats
        except Exception:  # a replica wrapper without routing stats
            return
        entry = stats.get(self.options.feedback_key) if isinstance(stats, Mapping) else None
        if not isinstance(entry, Mapping):
            return
        events = entry.get("events")
        if not isinstance(events, Sequence):
            self.counters["feedback_errors"] += 1
            return
        epoch = entry.get("epoch")
        last_epoch, seen = self._seen.get(replica.replica_id, (None, 0))
        if epoch != last_epoch:
            seen = 0
        slot = self._slot.get(replica.replica_id)
        for ev in events:
            try:
                seq = int(ev[0])
                if seq <= seen:
                    continue
                if seq > seen + 1:
                    self.counters["feedback_lost"] += seq - seen - 1
                seen = seq
                if slot is not None:
                    self._apply_event(slot, ev)
            except Exception:
                self.counters["feedback_errors"] += 1
        self._seen[replica.replica_id] = (epoch, seen)
        if slot is not None:
            try:
                self.view.on_snapshot(slot, entry)
            except Exception:
                self.view.counters["view_errors"] += 1

    def _apply_event(self, slot: int, ev: Sequence[Any]) -> None:
        kind = ev[1]
        if kind == "finish":
            rid, out = str(ev[2]), int(ev[3])
            req = self._requests.get(rid)
            if req is not None:  # reported before Ray's completion callback
                req.output_tokens = out
                return
            known = self._recent.pop(rid, None)
            if known is None:  # another router's request (the view), or long forgotten
                self.view.on_finish(slot, rid, out, ev[4] if len(ev) > 4 else None)
                return
            tenant, s = known
            if self._d.charge_output(tenant, s, out):
                self.counters["output_charged"] += 1
        elif kind == "start":
            self.view.on_start(slot, ev)
        elif kind == "evict":
            self._d.on_evict(slot, np.asarray(ev[2], dtype=np.uint32), int(ev[3]))
            self.counters["evictions"] += 1
        else:
            raise ValueError(f"unknown feedback event {kind!r}")
