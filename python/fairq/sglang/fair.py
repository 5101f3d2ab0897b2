"""fairq's policies inside SGLang's scheduler, on the engine-neutral
:class:`fairq.ledger.Ledger` (this module translates SGLang's events: its
journal, its adder's admissions and its list's order).

SGLang's prefill step (``Scheduler._get_new_batch_prefill_raw``, 0.5.23)
calls ``self.policy.calc_priority(waiting_queue, running_batch)`` to order
its waiting list in place, then walks the list, calling
``PrefillAdder.add_one_req(req)`` for each until the adder's budget is spent
(``budget_state()``) or a request does not fit; what the adder took
(``can_run_list``) leaves the list. fairq decides the order and which
requests the walk may take; SGLang keeps everything else (memory, chunking,
LoRA slots, retraction).

* :class:`FairSchedulePolicy` is SGLang's ``SchedulePolicy`` with
  ``calc_priority`` replaced: it brings fairq up to date with what happened
  since the last call (:meth:`FairState.sync`), admits the policy's next
  ``k`` requests in the ledger (:meth:`fairq.ledger.Ledger.admit`, its one
  admission shape: each charged an estimate as it is chosen, so the next
  choice already sees it; DLPM: one refill at most per decision, the rest
  within the credit left), and moves them, in that order, to the head of
  SGLang's list.
* :func:`fair_adder_class` makes a ``PrefillAdder`` subclass whose walk
  takes only those admitted requests (``budget_state()`` ends the walk once
  none is left; a request fairq did not admit is refused) and which charges
  what the adder really admitted: the positions ``[prefix_len, extend_end)``
  of each admission or chunk (``add_one_req``, ``add_chunked_req``) that lie
  in the prompt and were not charged before (a high-water mark:
  recomputation after a retraction is free). Admitted requests the walk did
  not take go back to their place with the admission undone exactly
  (``requeue(refund=True)``).
* Output tokens: before every scheduling decision, each running request is
  charged the tokens SGLang appended to its ``output_ids`` since the last
  one; a finished (or aborted) request leaves fairq; a retracted request
  (back in SGLang's waiting list) goes back to its place with its charges
  kept (``requeue(refund=False)``, re-admission charges nothing); a waiting
  request that left SGLang's list without being taken (aborted) is removed;
  one retracted and aborted before the decision is finished.
  Every request fairq saw leaves it exactly once.
* What changed is read from the journal of SGLang's list
  (:mod:`fairq.sglang.queue`: arrivals, aborts, retractions, admissions
  since the last decision), so a decision costs Python work proportional
  to those changes and to the running requests, not to the waiting list;
  the whole list is read on the first decision, when the journal was lost,
  or for a list that is not journaled (a plain ``list``). The admitted
  requests are moved to the head by binary search on the order fairq saw
  the list in (each found checked by identity; else one pass over it).

The saved state (options ``state_file``, ``state_interval_s``): as vLLM's
(:mod:`fairq.ledger.persist`, envelope format ``fairq.sglang.state``),
loaded when the policy is built, saved every ``state_interval_s`` from the
decisions, at once when nothing is left, and by a background
:class:`~fairq.ledger.Flusher` (which also charges the output and the
finishes SGLang makes while its waiting list is empty: it makes no decision
then). With data parallelism each rank keeps ``<state_file>.dp<rank>``; of
the tensor-parallel ranks, rank 0 saves.

Charging rules against vLLM's (``docs/ALGORITHMS.md`` section 9): the same
rules (extend per chunk after the engine's prefix match, each prompt
position once; output per token; finishes and aborts leave at once), with
two differences of timing, not amount: output tokens are charged at the
next scheduling decision rather than as the step's output is processed
(SGLang's ``calc_priority`` is the one call fairq gets between steps), and
a finish is seen there too.

Priority tiers: with SGLang's ``--enable-priority-scheduling`` each
request's ``priority`` is a tier with its own fair scheduler, strict
priority between tiers (lower values first with
``--schedule-low-priority-values-first``, else higher), fairness within one;
SGLang's own priority preemption retracts running requests, which fairq
requeues with their charges kept.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import filterfalse
from typing import Any, Literal

from fairq.engineopts import FairOptions
from fairq.ledger import Flusher, Ledger, LedgerView, Persistence
from fairq.sched import policy_info
from fairq.sglang.mirror import RadixCacheMirror, namespace_of
from fairq.sglang.queue import Journal, WaitingList

__all__ = ["FairState", "fair_adder_class", "fair_schedule_policy_class"]

#: Most admitted requests moved to the head one by one (more: one pass).
_MAX_MOVES = 64


#: The saved state's envelope format (:mod:`fairq.ledger.persist`).
STATE_FORMAT = "fairq.sglang.state"


def _serves_multiprocess_metrics() -> bool:
    """SGLang serves multiprocess metrics (``--enable-metrics`` sets
    ``$PROMETHEUS_MULTIPROC_DIR``) and ``prometheus_client`` is here."""
    from fairq.ledger.promsync import multiprocess_dir

    if multiprocess_dir() is None:
        return False
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def _tokens(req: Any, ran: bool) -> list[int]:
    """The tokens a requeue gives: the prompt, or (it ran) prompt and output."""
    return req.origin_input_ids if not ran else req.origin_input_ids + req.output_ids


class FairState(LedgerView):
    """SGLang's events translated into :class:`fairq.ledger.Ledger` calls
    (one SGLang scheduler's fairness; the book, the charges, admission and
    the saved state are the ledger's; reading SGLang's journal and
    reordering its list are this class's).

    ``options``: :class:`fairq.engineopts.FairOptions` (built by
    :func:`fairq.sglang.tenants.make_options`). ``tree_cache``: SGLang's
    prefix cache; a policy that needs a prefix tree follows it through a
    :class:`~fairq.sglang.mirror.RadixCacheMirror`.
    """

    def __init__(
        self,
        options: FairOptions,
        tree_cache: Any = None,
        *,
        tiers: bool = False,
        low_first: bool = False,
    ) -> None:
        self.options = options
        needs_tree = policy_info(options.policy).needs_tree
        self.mirror = RadixCacheMirror.attach(tree_cache) if needs_tree else None
        tree = self.mirror.tree if self.mirror is not None else None
        self.ledger = Ledger(options, tree=tree, tiers=tiers, name="sglang")
        #: the tier of a priority value: the value (lower first) or its negation
        self._sign = 1 if low_first else -1
        #: output tokens charged (per running request)
        self._out: dict[str, int] = {}
        self._taken = 0
        self._refused = False
        #: taken by SGLang's adder since the last sync (still in SGLang's list
        #: until SGLang removes them)
        self._taken_now: set[str] = set()
        #: the journal of SGLang's list fairq follows (None: none yet)
        self._journal: Journal | None = None
        #: syncs that read the whole list / only the journal (diagnostics)
        self.full_reads = 0
        self.journal_reads = 0
        #: position keys of the requests in SGLang's list, in its order
        #: (arrivals count up, fairq's heads count down), for moving the
        #: admitted ones to the head without a pass over the list
        self._seq: dict[str, int] = {}
        self._hi = 0
        self._lo = 0
        #: decisions whose move to the head fell back to a pass (diagnostics)
        self.slow_orders = 0
        #: the saved state (:meth:`persist_to`) and its background flusher
        self.persistence: Persistence | None = None
        self.flusher: Flusher | None = None

    # -- the ledger's book, by the names SGLang's side used ------------------
    @property
    def sched(self) -> Any:
        """The fairq local scheduler of tier 0 (the only one without tiers)."""
        return self.ledger.scheduler(0)

    @property
    def admitted(self) -> dict[str, Any]:
        """Admitted in fairq this step, not taken by SGLang's adder yet (in order)."""
        return self.ledger.admitted

    @property
    def running(self) -> dict[str, Any]:
        """Taken by SGLang's adder (running, chunked, or finished unseen)."""
        return self.ledger.running

    @property
    def added(self) -> int:
        """Requests that entered fairq (one aborted between two decisions never does)."""
        return self.ledger.added

    @property
    def left(self) -> int:
        """Requests that left fairq (finished, aborted)."""
        return self.ledger.left

    # -- each step -------------------------------------------------------
    def sync(self, waiting_queue: Iterable[Any]) -> None:
        """Bring fairq up to date with SGLang (see the module doc).

        ``waiting_queue`` a :class:`~fairq.sglang.queue.WaitingList` whose
        journal fairq has read before: only what changed since is read
        (arrivals, aborts, retractions, admissions); anything else (a plain
        list, a lost journal): the whole list is read once."""
        led = self.ledger
        changes = self._changes(waiting_queue)
        led.release(_tokens)  # admitted, not taken: back, refunded unless it ran
        if changes is None:
            back, gone, new = self._read_all(waiting_queue)
            self._reseq(waiting_queue)
        else:
            back, gone, new = changes
        gone_set = set(gone)
        for rid, req in list(led.running.items()):
            n = len(req.output_ids) - self._out.get(rid, 0)
            if n > 0:
                led.charge_output(rid, n)
                self._out[rid] = len(req.output_ids)
            if req.finished() or (rid in gone_set):
                led.finish(rid)
                self._forget(rid)
            elif rid in back:  # retracted: back to waiting, charges kept
                led.requeue(rid, _tokens(req, True), refund=False)
        for rid in gone:  # left SGLang's list without being taken: aborted
            if led.remove(rid):
                self._forget(rid)
        for rid, req in new:
            if rid not in led.waiting and rid not in led.running:
                ns = namespace_of(req.extra_key, req.cache_salt)
                led.add(rid, req, req.origin_input_ids, namespace=ns, tier=self._tier(req))
        self._taken_now.clear()
        led.end_step(self._taken, wanted_more=self._refused)
        self._taken = 0
        self._refused = False

    def _read_all(
        self, waiting_queue: Iterable[Any]
    ) -> tuple[set[str], list[str], list[tuple[str, Any]]]:
        """What changed, from the whole list (O(waiting))."""
        present = {r.rid: r for r in waiting_queue}
        back = {rid for rid, req in self.running.items() if present.get(rid) is req}
        gone = [rid for rid in self.waiting if rid not in present]
        new = [(rid, r) for rid, r in present.items() if rid not in self.waiting]
        self.full_reads += 1
        return back, gone, new

    def _changes(
        self, waiting_queue: Iterable[Any]
    ) -> tuple[set[str], list[str], list[tuple[str, Any]]] | None:
        """What changed, from the list's journal (O(changes)); None: read
        the whole list (no journal, a lost one, one fairq has not followed
        from its start, or one that does not add up)."""
        journal = waiting_queue.journal if isinstance(waiting_queue, WaitingList) else None
        if journal is None:
            self._journal = None
            return None
        events = journal.take()
        if events is None or journal is not self._journal:
            self._journal = journal
            return None
        net: dict[int, list[Any]] = {}  # id -> [req, net change, re-entered]
        for sign, req in events:
            e = net.get(id(req))
            if e is None:
                net[id(req)] = [req, sign, sign > 0]
            else:
                e[1] += sign
                e[2] = e[2] or sign > 0
        back: set[str] = set()
        gone: list[str] = []
        new: list[tuple[str, Any]] = []
        waiting, admitted, running = self.waiting, self.admitted, self.running
        for req, d, entered in net.values():
            rid = req.rid
            is_running = running.get(rid) is req
            was = (
                waiting.get(rid) is req
                or admitted.get(rid) is req
                or (is_running and rid in self._taken_now)
            )
            now = int(was) + d
            if now == 1:
                if is_running:
                    back.add(rid)
                elif not was:
                    new.append((rid, req))
            elif now == 0:
                if was and not is_running:
                    gone.append(rid)
                elif is_running and entered:
                    # back in the list (retracted) and out again before this
                    # decision: SGLang aborted it while it waited (its
                    # abort_request pops it and sets no finish reason)
                    gone.append(rid)
            else:  # the journal and fairq disagree: read everything
                return None
        if new or back:  # their place in fairq's order: where they entered
            entering = back.union(rid for rid, _ in new)
            seq, hi = self._seq, self._hi
            for sign, req in events:
                if sign > 0 and req.rid in entering:
                    seq[req.rid] = hi
                    hi += 1
            self._hi = hi
        self.journal_reads += 1
        return back, gone, new

    def order(self, waiting_queue: list[Any]) -> None:
        """Admit the policy's next requests in fairq and put them, in order,
        at the head of ``waiting_queue`` (in place); the rest keep their order.
        Under the ledger's lock; the saved state is saved when due, and
        when nothing is left (the engine goes idle) the flusher is woken to
        save it and publish the metrics at once."""
        with self.ledger.lock:
            self._order(waiting_queue)
            p = self.persistence
            if len(self.ledger):
                if p is not None:
                    p.tick()
            elif self.flusher is not None:
                self.flusher.wake()  # idle: save and publish, out of SGLang's step

    def _order(self, waiting_queue: list[Any]) -> None:
        self.sync(waiting_queue)
        if not self.ledger.waiting:
            return
        # the ledger's one admission shape (:meth:`fairq.ledger.Ledger.admit`)
        head = self.ledger.admit()
        if not head:
            return
        wl = waiting_queue if isinstance(waiting_queue, WaitingList) else None
        if not (wl is not None and len(head) <= _MAX_MOVES and self._move_to_head(wl, head)):
            chosen = set(head)  # Req objects: identity
            items = head + list(filterfalse(chosen.__contains__, waiting_queue))
            if wl is not None:
                wl.reorder(items)
            else:
                waiting_queue[:] = items
        seq = self._seq
        lo = self._lo
        for req in reversed(head):
            lo -= 1
            seq[req.rid] = lo
        self._lo = lo
        if wl is not None:
            wl.head = len(head)

    def _move_to_head(self, waiting_queue: WaitingList, head: list[Any]) -> bool:
        """Move ``head`` (in SGLang's list) to the front of it in place,
        finding each by binary search on the order fairq saw the list in
        (``_seq``: arrival order, fairq's heads first) and checking it is
        there; False (nothing moved) if one is not where expected."""
        seq = self._seq
        missing = -(1 << 62)

        def key(r: Any) -> int:
            return seq.get(r.rid, missing)

        at = []
        n = len(waiting_queue)
        for req in head:
            s = seq.get(req.rid)
            if s is None:
                break
            i = bisect_left(waiting_queue, s, key=key)
            if i >= n or waiting_queue[i] is not req:
                break
            at.append(i)
        else:
            for i in sorted(at, reverse=True):
                list.__delitem__(waiting_queue, i)
            list.__setitem__(waiting_queue, slice(0, 0), head)
            return True
        self.slow_orders += 1
        self._reseq(waiting_queue)
        return False

    def _reseq(self, waiting_queue: Iterable[Any]) -> None:
        """fairq's order of SGLang's list from the list itself (O(waiting))."""
        self._seq = {r.rid: i for i, r in enumerate(waiting_queue)}
        self._hi = len(self._seq)
        self._lo = 0

    # -- the adder's calls -----------------------------------------------
    def may_take(self, req: Any) -> bool:
        """Whether SGLang's adder may take ``req`` (fairq admitted it)."""
        if req.rid in self.admitted:
            return True
        self._refused = True
        return False

    def any_admitted(self) -> bool:
        """Whether admitted requests are left for SGLang's adder to take."""
        return bool(self.admitted)

    def had_room(self) -> None:
        """SGLang's adder had room for more than fairq admitted: admit twice
        as many next step."""
        self._refused = True

    def taken(self, req: Any) -> None:
        """SGLang's adder admitted ``req`` (or its next chunk): charge the
        prompt positions of ``[prefix_len, extend_end)`` not charged yet."""
        with self.ledger.lock:
            self._taken_one(req)

    def _taken_one(self, req: Any) -> None:
        rid = req.rid
        led = self.ledger
        if led.take(rid):
            self._taken_now.add(rid)
            self._taken += 1
        elif rid not in led.running:
            return  # not fairq's (nothing to charge)
        end = req.extend_end
        if end is None:
            return
        led.charge_prompt(rid, int(req.prefix_len), int(end), len(req.origin_input_ids))
        led.settle()

    def settle_running(self) -> None:
        """Charge the output tokens SGLang appended to the running requests
        since the last decision, and let the finished ones leave (what the
        next decision would do; SGLang makes none while its waiting list is
        empty, so the background flusher calls this). Call under the
        ledger's lock."""
        led = self.ledger
        for rid, req in list(led.running.items()):
            n = len(req.output_ids) - self._out.get(rid, 0)
            if n > 0:
                led.charge_output(rid, n)
                self._out[rid] = len(req.output_ids)
            if req.finished():
                led.finish(rid)
                self._forget(rid)

    # -- saved state (fairq.ledger.persist) -----------------------------------
    def persist_to(self, path: str, interval_s: float, saves: bool = True) -> Persistence:
        """Keep the fairness state in ``path`` (:mod:`fairq.ledger.persist`,
        format :data:`STATE_FORMAT`): load it now (before any request; an
        unusable file is logged, moved aside and the start is fresh), then
        save it every ``interval_s`` from the decisions, at once when the
        engine goes idle, and from a background :class:`~fairq.ledger.Flusher`
        (which also charges what finished while SGLang made no decision).
        ``saves``: False for a replica that only loads (SGLang's tensor
        parallel ranks other than 0 make the same decisions)."""

        p = Persistence(self, path, self.options.policy, interval_s, format=STATE_FORMAT)
        p.start(save_fresh=saves)
        if saves:
            self.persistence = p
            self.start_flusher(min(1.0, interval_s))
        return p

    def start_flusher(self, interval_s: float = 1.0) -> Flusher:
        """The background :class:`~fairq.ledger.Flusher` (started once;
        ``interval_s`` at least 0.05): every round, under the ledger's lock,
        :meth:`settle_running`, the saved state if due, and the metrics."""
        if self.flusher is None:
            interval = max(interval_s, 0.05)
            self.flusher = Flusher(self.ledger.lock, interval, [Flusher.weak_job(self, "_flush")])
            self.flusher.start()
        return self.flusher

    def _flush(self) -> None:
        """The background flusher's round (under the ledger's lock)."""
        self.settle_running()
        if self.persistence is not None:
            self.persistence.flush(due_only=bool(len(self.ledger)))
        self.publish_metrics()

    # -- metrics on SGLang's /metrics -----------------------------------------
    def export_metrics(self, mirror: Any = None) -> None:
        """Write fairq's per-tenant metrics (:class:`fairq.metrics.FairqCollector`
        of each tier's scheduler, ``name="sglang-<policy>-tier<t>"``) into
        prometheus gauges at most every second, from the background flusher:
        by default where SGLang's ``/metrics`` reads them (its multiprocess
        files; SGLang started with ``--enable-metrics`` sets
        ``$PROMETHEUS_MULTIPROC_DIR``), or into ``mirror``
        (:class:`fairq.ledger.promsync.GaugeMirror`)."""
        from fairq.ledger.promsync import GaugeMirror

        self._gauges = GaugeMirror() if mirror is None else mirror
        self._collectors: dict[int, Any] = {}
        self.start_flusher()

    def publish_metrics(self) -> int:
        """Write the metrics now (see :meth:`export_metrics`; nothing if not
        exported). Returns how many samples. Call under the ledger's lock."""
        gauges = getattr(self, "_gauges", None)
        if gauges is None:
            return 0
        from fairq.metrics import FairqCollector

        families = []
        for name, sched in self.ledger.metric_objects():
            c = self._collectors.get(id(sched))
            if c is None or c.obj is not sched:
                c = self._collectors[id(sched)] = FairqCollector(sched, name)
            families += list(c.collect())
        return int(gauges.write(families))

    # -- helpers ------------------------------------------------------------
    def _tier(self, req: Any) -> int:
        """``req``'s tier with priority scheduling (lower tiers first)."""
        if not self.ledger.tiers:
            return 0
        p = getattr(req, "priority", None)
        return self._sign * p if isinstance(p, int) else 0

    def _forget(self, rid: str) -> None:
        """What this class kept of ``rid`` (the ledger forgot the rest)."""
        self._seq.pop(rid, None)
        self._out.pop(rid, None)

    # -- introspection ------------------------------------------------------
    def __len__(self) -> int:
        """Requests fairq holds (waiting, admitted or running)."""
        return len(self.ledger)


def fair_schedule_policy_class(base: type) -> type:
    """A subclass of SGLang's ``SchedulePolicy`` (``base``) running fairq.

    Built as SGLang builds its policy, with the same positional arguments,
    plus ``options=`` (:class:`~fairq.engineopts.FairOptions`) and, for the
    saved state (``options.state_file``), ``state_path=`` (the file of this
    scheduler, default ``options.state_file``; False: none) and ``saves=``
    (False: load only), which :func:`fairq.sglang._install.build_policy`
    derives from the scheduler's data- and tensor-parallel ranks.
    """

    class FairSchedulePolicy(base):
        """SGLang's ``SchedulePolicy`` with fairq's order (``fairq.sglang.fair``)."""

        def __init__(
            self,
            policy: str,
            tree_cache: Any,
            enable_hierarchical_cache: bool,
            enable_priority_scheduling: bool,
            schedule_low_priority_values_first: bool,
            *,
            options: FairOptions,
            state_path: str | Literal[False] | None = None,
            saves: bool = True,
        ) -> None:
            super().__init__(
                "fcfs",
                tree_cache,
                enable_hierarchical_cache,
                enable_priority_scheduling,
                schedule_low_priority_values_first,
            )
            self.fairq = FairState(
                options,
                tree_cache,
                tiers=enable_priority_scheduling,
                low_first=schedule_low_priority_values_first,
            )
            path = options.state_file if state_path is None else state_path
            if isinstance(path, str):  # the saved state (``state_path=False``: none)
                self.fairq.persist_to(path, options.state_interval_s, saves=saves)
            if saves and _serves_multiprocess_metrics():
                self.fairq.export_metrics()
            self.fairq_policy = f"fairq-{options.policy}"

        def calc_priority(
            self,
            waiting_queue: list[Any],
            running_batch: Any = None,
            processed_tokens: int = 0,
        ) -> None:
            self.fairq.order(waiting_queue)

    FairSchedulePolicy.__qualname__ = FairSchedulePolicy.__name__ = "FairSchedulePolicy"
    return FairSchedulePolicy


def fair_adder_class(base: type, add_result: Any) -> type:
    """A subclass of SGLang's ``PrefillAdder`` (``base``) that reports to a
    :class:`FairState` (set as ``adder.fairq`` right after construction; an
    adder without one behaves as ``base``). ``add_result``: SGLang's
    ``AddReqResult`` enum."""
    other = add_result.OTHER
    cont = add_result.CONTINUE

    class FairPrefillAdder(base):
        """SGLang's ``PrefillAdder`` taking only what fairq admitted."""

        fairq: FairState | None = None

        def budget_state(self) -> Any:
            res = super().budget_state()
            state = self.fairq
            if res == cont and state is not None and not state.any_admitted():
                state.had_room()
                return other  # the walk ends: nothing fairq admitted is left
            return res

        def add_one_req(self, req: Any, *args: Any, **kwargs: Any) -> Any:
            state = self.fairq
            if state is not None and not state.may_take(req):
                return other
            res = super().add_one_req(req, *args, **kwargs)
            if state is not None and self.can_run_list and self.can_run_list[-1] is req:
                state.taken(req)
            return res

        def add_chunked_req(self, req: Any) -> Any:
            out = super().add_chunked_req(req)
            state = self.fairq
            if state is not None and any(r is req for r in self.can_run_list):
                state.taken(req)
            return out

    FairPrefillAdder.__qualname__ = FairPrefillAdder.__name__ = "FairPrefillAdder"
    return FairPrefillAdder
