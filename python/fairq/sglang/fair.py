"""fairq's FCFS, LPM, VTC and DLPM inside SGLang's scheduler.

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
  ``k`` requests in fairq (each charged an estimate as it is chosen, so the
  next choice already sees it; DLPM: only the first may refill credit, the
  rest are admitted within the credit left), and moves them, in that order,
  to the head of SGLang's list.
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

Charging rules against vLLM's (``docs/ALGORITHMS.md`` section 9): the same
rules (extend per chunk after the engine's prefix match, each prompt
position once; output per token; finishes and aborts leave at once), with
two differences of timing, not amount: output tokens are charged at the
next scheduling decision rather than as the step's output is processed
(SGLang's ``calc_priority`` is the one call fairq gets between steps), and
a finish is seen there too. SGLang's priority scheduling has no fair
counterpart here (one tier).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import filterfalse
from typing import Any

from fairq.engineopts import FairOptions
from fairq.sched import make_scheduler
from fairq.sglang.mirror import RadixCacheMirror, namespace_of
from fairq.sglang.queue import Journal, WaitingList

__all__ = ["FairState", "fair_adder_class", "fair_schedule_policy_class"]

#: Token budget of an admission in fairq (SGLang's adder checks the real one).
_UNBOUNDED = 1 << 62
#: Most requests admitted in fairq per step.
_MAX_BATCH = 1024
#: Most admitted requests moved to the head one by one (more: one pass).
_MAX_MOVES = 64


class FairState:
    """fairq's side of one SGLang scheduler: the policy, tenants and charges.

    ``options``: :class:`fairq.engineopts.FairOptions` (built by
    :func:`fairq.sglang.tenants.make_options`). ``tree_cache``: SGLang's
    prefix cache; LPM and DLPM follow it through a
    :class:`~fairq.sglang.mirror.RadixCacheMirror`.
    """

    def __init__(self, options: FairOptions, tree_cache: Any = None) -> None:
        self.options = options
        needs_tree = options.policy in ("lpm", "dlpm")
        self.mirror = RadixCacheMirror.attach(tree_cache) if needs_tree else None
        tree = self.mirror.tree if self.mirror is not None else None
        self.sched: Any = make_scheduler(options.policy, tree, **options.policy_options)
        for t, w in options.tenant_weights.items():
            self.sched.set_weight(t, w)
        #: tenant of each request fairq holds
        self.tenant_of: dict[str, str] = {}
        #: waiting in fairq
        self.waiting: dict[str, Any] = {}
        #: admitted in fairq this step, not taken by SGLang's adder yet (in order)
        self.admitted: dict[str, Any] = {}
        #: taken by SGLang's adder (running, chunked, or finished unseen)
        self.running: dict[str, Any] = {}
        #: prompt positions charged (high-water mark), extend tokens charged,
        #: output tokens charged
        self._high: dict[str, int] = {}
        self._extend: dict[str, int] = {}
        self._out: dict[str, int] = {}
        self._batch = 4
        self._taken = 0
        self._refused = False
        self._refills = options.policy == "dlpm"
        #: requests that entered / left fairq (finished, aborted), for tests
        #: and stats (a request that arrived and was aborted between two
        #: decisions never enters)
        self.added = 0
        self.left = 0
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

    # -- each step -------------------------------------------------------
    def sync(self, waiting_queue: Iterable[Any]) -> None:
        """Bring fairq up to date with SGLang (see the module doc).

        ``waiting_queue`` a :class:`~fairq.sglang.queue.WaitingList` whose
        journal fairq has read before: only what changed since is read
        (arrivals, aborts, retractions, admissions); anything else (a plain
        list, a lost journal): the whole list is read once."""
        sched = self.sched
        changes = self._changes(waiting_queue)
        for rid, req in list(self.admitted.items()):  # admitted, not taken
            self._requeue(rid, req, refund=rid not in self._high)
        if changes is None:
            back, gone, new = self._read_all(waiting_queue)
            self._reseq(waiting_queue)
        else:
            back, gone, new = changes
        gone_set = set(gone)
        for rid, req in list(self.running.items()):
            n = len(req.output_ids) - self._out.get(rid, 0)
            if n > 0:
                sched.charge_output(rid, n)
                self._out[rid] = len(req.output_ids)
            if req.finished() or (rid in gone_set):
                del self.running[rid]
                sched.finish(rid)
                self._forget(rid)
            elif rid in back:  # retracted: back to waiting
                self._requeue(rid, req, refund=False)
        for rid in gone:  # left SGLang's list without being taken: aborted
            if rid in self.waiting:
                del self.waiting[rid]
                sched.remove(rid)
                self._forget(rid)
        for rid, req in new:
            if rid not in self.waiting and rid not in self.running:
                self._add(rid, req)
        self._taken_now.clear()
        self._batch = min(2 * self._batch, _MAX_BATCH) if self._refused else max(4, self._taken + 1)
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
        at the head of ``waiting_queue`` (in place); the rest keep their order."""
        self.sync(waiting_queue)
        if not self.waiting:
            return
        sched = self.sched
        k = self._batch
        if self._refills:
            # Algorithm 1 until k are admitted, as its walk fills a batch:
            # one admission that may refill, the rest within the credit
            # left, again while short. What SGLang's adder then does not
            # take is requeued with its charge refunded; a refill made for
            # it stays (Algorithm 1 made it to fill the batch).
            adm: list[Any] = []
            while len(adm) < k:
                first = sched.schedule(_UNBOUNDED, 1)
                if not first:
                    break
                adm += first
                if len(adm) < k:
                    adm += sched.schedule_within_credit(_UNBOUNDED, k - len(adm))
        else:
            adm = sched.schedule(_UNBOUNDED, k)
        head = []
        for a in adm:
            rid = a.request_id
            req = self.waiting.pop(rid)
            self.admitted[rid] = req
            head.append(req)
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
        rid = req.rid
        if rid in self.admitted:
            del self.admitted[rid]
            self.running[rid] = req
            self._taken_now.add(rid)
            self._taken += 1
        elif rid not in self.running:
            return  # not fairq's (nothing to charge)
        end = req.extend_end
        if end is None:
            return
        end = min(int(end), len(req.origin_input_ids))
        high = self._high.get(rid, 0)
        new = end - max(int(req.prefix_len), high)
        if new > 0:
            self._extend[rid] = self._extend.get(rid, 0) + new
        if end > high:
            self._high[rid] = end
        self.sched.recharge_extend(rid, self._extend.get(rid, 0))

    # -- helpers ------------------------------------------------------------
    def _add(self, rid: str, req: Any) -> None:
        tenant = self.options.tenant(req)
        ns = namespace_of(req.extra_key, req.cache_salt)
        self.sched.add(rid, tenant, req.origin_input_ids, req, namespace=ns)
        self.tenant_of[rid] = tenant
        self.waiting[rid] = req
        self.added += 1

    def _requeue(self, rid: str, req: Any, *, refund: bool) -> None:
        self.admitted.pop(rid, None)
        self.running.pop(rid, None)
        toks = req.origin_input_ids if refund else req.origin_input_ids + req.output_ids
        self.sched.requeue(rid, toks, req, refund=refund)
        self.waiting[rid] = req

    def _forget(self, rid: str) -> None:
        self.tenant_of.pop(rid, None)
        self._seq.pop(rid, None)
        self._high.pop(rid, None)
        self._extend.pop(rid, None)
        self._out.pop(rid, None)
        self.left += 1

    # -- introspection ------------------------------------------------------
    def service(self, tenant: str) -> float:
        """Weighted tokens served to ``tenant`` (the scheduler's ``service``)."""
        return float(self.sched.service(tenant))

    def __len__(self) -> int:
        """Requests fairq holds (waiting, admitted or running)."""
        return len(self.waiting) + len(self.admitted) + len(self.running)


def fair_schedule_policy_class(base: type) -> type:
    """A subclass of SGLang's ``SchedulePolicy`` (``base``) running fairq.

    Built as SGLang builds its policy, with the same positional arguments,
    plus ``options=`` (:class:`~fairq.engineopts.FairOptions`).
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
        ) -> None:
            if enable_priority_scheduling:
                raise ValueError(
                    "enable_priority_scheduling: fairq's policies in SGLang have one tier; "
                    "turn SGLang's priority scheduling off"
                )
            super().__init__(
                "fcfs",
                tree_cache,
                enable_hierarchical_cache,
                enable_priority_scheduling,
                schedule_low_priority_values_first,
            )
            self.fairq = FairState(options, tree_cache)
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
