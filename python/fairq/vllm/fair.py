"""VTC, LPM and DLPM inside vLLM's scheduler (``FAIRQ_VLLM_POLICY=vtc|lpm|dlpm``).

vLLM's scheduling loop stays vLLM's: each step it peeks the head of
``scheduler.waiting``, holds back what it must (KV transfers, grammars, LoRA
slots: it pops those and puts them back at the end of the step), stops when
the KV cache or the token budget is full, and pops what it schedules. fairq
decides only which request is at the head.

* :class:`FairWaitingQueue` replaces ``scheduler.waiting``. Its head is the
  policy's next request: ``peek_request`` admits the next few in a fairq
  local scheduler (``schedule(max_requests=k)``; DLPM: one that may refill,
  then ``schedule_within_credit``), each charged a provisional estimate at
  once, so the next choice in the same step already sees it.
  ``prepend_request(s)`` of a request popped in this step (vLLM held it
  back) undoes that admission and puts it back in its place
  (``requeue(refund=True)``); a preempted request goes back in its place
  with its charges kept (``requeue(refund=False)``). Admitted requests vLLM
  did not take (no room) go back the same way at the end of the step.
* :class:`FairState` charges what vLLM really did, once per step:
  extend tokens per chunk as scheduled (``SchedulerOutput``), after vLLM's
  own prefix match, each prompt position once (recomputation after a
  preemption is free: the high-water mark rule); output tokens as
  ``update_from_output`` appends them (async placeholders are not tokens);
  finishes and aborts leave fairq at once.
* With vLLM's ``--scheduling-policy priority``, requests are split by
  ``request.priority`` into tiers, each with its own fair scheduler: strict
  priority between tiers (lower value first), fairness within one.
* LPM and DLPM match requests against :class:`fairq.vllm.mirror.PrefixCacheMirror`,
  vLLM's prefix cache followed through its KV events.

Nothing here raises inside vLLM's step for a well-formed request; options
are validated when the scheduler is built (:mod:`fairq.vllm.tenants`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from fairq.sched import make_scheduler
from fairq.vllm._base import RequestQueue
from fairq.vllm.mirror import PrefixCacheMirror, request_namespace
from fairq.vllm.tenants import FairOptions

__all__ = ["FairState", "FairWaitingQueue"]

#: Token budget of a one-request admission (vLLM checks the real budget).
_UNBOUNDED = 1 << 62


class FairState:
    """fairq's side of one vLLM scheduler: the policy, the tenants, the charges.

    ``options``: :class:`fairq.vllm.tenants.FairOptions`. ``block_size``:
    vLLM's (the mirror's page). ``tiers``: split requests by priority.
    """

    def __init__(self, options: FairOptions, block_size: int, tiers: bool = False) -> None:
        self.options = options
        self.tiers = tiers
        needs_tree = options.policy in ("lpm", "dlpm")
        self.mirror = PrefixCacheMirror(block_size) if needs_tree else None
        self._scheds: dict[int, Any] = {}
        #: per request: tenant, tier, tokens it was added with
        self.tenant_of: dict[str, str] = {}
        self._tier_of: dict[str, int] = {}
        #: waiting in fairq (request objects, arrival order)
        self.waiting: dict[str, Any] = {}
        #: admitted in fairq (running, or held back by vLLM), request objects
        self.running: dict[str, Any] = {}
        #: admitted in fairq during the current step
        self._admitted_now: set[str] = set()
        #: prompt positions charged (high-water mark) and extend charged
        self._high: dict[str, int] = {}
        self._extend: dict[str, int] = {}
        #: output tokens that arrived while the request was waiting again
        self._pending_output: dict[str, int] = {}
        #: admitted in fairq, not yet popped by vLLM, in the policy's order
        #: (the head is ``ready[0]``)
        self.ready: deque[Any] = deque()
        #: how many to admit per refill of ``ready`` (adapts to what vLLM
        #: takes per step, see :meth:`peek`)
        self._batch = 4
        self._popped = 0
        #: DLPM refills credit: only the first admission of a batch may
        #: trigger a refill (``schedule_within_credit`` for the rest)
        self._refills = options.policy == "dlpm"

    # -- schedulers -------------------------------------------------------
    def _sched(self, tier: int) -> Any:
        s = self._scheds.get(tier)
        if s is None:
            s = self._new_sched()
            self._install(tier, s)
        return s

    def _new_sched(self) -> Any:
        tree = self.mirror.tree if self.mirror is not None else None
        return make_scheduler(self.options.policy, tree, **self.options.policy_options)

    def _install(self, tier: int, s: Any) -> None:
        """``s`` becomes tier ``tier``'s scheduler, with the configured
        tenant weights (which win over restored ones; a tenant not
        configured has weight 1)."""
        weights = self.options.tenant_weights
        for t in s.clients():
            if t not in weights and s.weight(t) != 1.0:
                s.set_weight(t, 1.0)
        for t, w in weights.items():
            s.set_weight(t, w)
        self._scheds[tier] = s
        from fairq.metrics import publish

        publish(s, f"vllm-{self.options.policy}-tier{tier}")

    def schedulers(self) -> dict[int, Any]:
        """The fairq local scheduler of each priority tier (0 without tiers)."""
        return dict(self._scheds)

    def _tokens(self, request: Any, resumed: bool) -> list[int]:
        toks = request.all_token_ids if resumed else request.prompt_token_ids
        return list(toks) if toks is not None else [0] * int(request.num_prompt_tokens)

    # -- the queue's operations ------------------------------------------
    def add(self, request: Any) -> None:
        rid = request.request_id
        if rid in self.running:  # back from vLLM's kv-holding or streaming paths
            self.requeue(request)
            return
        tenant = self.options.tenant(request)
        tier = int(getattr(request, "priority", 0) or 0) if self.tiers else 0
        ns = request_namespace(request)
        toks = self._tokens(request, resumed=False)
        if ns is False:  # the mirror cannot match it: its own namespace
            ns = f"unmatched:{rid}"
        self._sched(tier).add(rid, tenant, toks, request, namespace=ns)
        self.tenant_of[rid] = tenant
        self._tier_of[rid] = tier
        self.waiting[rid] = request

    def peek(self) -> Any:
        """The policy's next request. Admits a few at a time
        (``k`` following how many vLLM takes per step), each charged an
        estimate as it is chosen: the same choices as ``k`` one-request
        calls. The ones vLLM does not take go back at the end of the step
        with their admission undone exactly. DLPM: only the first of the
        ``k`` may trigger a refill (every client's deficit += Q_u, which no
        refund undoes); the rest are admitted within the credit left
        (``schedule_within_credit``), so no refill is ever made on behalf of
        a request vLLM then does not take."""
        if self.ready:
            return self.ready[0]
        if self.mirror is not None:
            self.mirror.sync()
        for tier in sorted(self._scheds):
            sched = self._scheds[tier]
            if self._refills:
                adm = sched.schedule(_UNBOUNDED, 1)
                if adm and self._batch > 1:
                    adm += sched.schedule_within_credit(_UNBOUNDED, self._batch - 1)
            else:
                adm = sched.schedule(_UNBOUNDED, self._batch)
            if adm:
                for a in adm:
                    request = a.item
                    rid = request.request_id
                    self.waiting.pop(rid, None)
                    self.running[rid] = request
                    self._admitted_now.add(rid)
                    self.ready.append(request)
                self._batch = min(2 * self._batch, 1024)
                return self.ready[0]
        raise IndexError("peek from an empty queue")

    def pop(self) -> Any:
        request = self.peek()
        self.ready.popleft()
        self._popped += 1
        return request

    def requeue(self, request: Any) -> None:
        """An admitted request back to waiting, in its place. One that vLLM
        never ran (no prompt token scheduled yet) has its admission undone;
        one that ran (a preemption, or held back after running) keeps its
        charges and its next admission charges nothing."""
        rid = request.request_id
        sched = self._sched(self._tier_of[rid])
        ran = rid in self._high
        self._admitted_now.discard(rid)
        sched.requeue(rid, self._tokens(request, resumed=ran), request, refund=not ran)
        self.running.pop(rid, None)
        self.waiting[rid] = request
        if request in self.ready:
            self.ready.remove(request)

    def prepend(self, request: Any) -> None:
        rid = request.request_id
        if rid in self.waiting:
            return
        if rid in self.running:  # held back by vLLM, or preempted
            self.requeue(request)
        else:
            self.add(request)

    def remove(self, request: Any) -> bool:
        rid = request.request_id
        if rid in self.waiting:
            del self.waiting[rid]
            self._sched(self._tier_of[rid]).remove(rid)
            self._forget(rid)
            return True
        if any(r is request for r in self.ready):
            self.requeue(request)
            return self.remove(request)
        return False

    def __len__(self) -> int:
        return len(self.waiting) + len(self.ready)

    def __iter__(self) -> Iterator[Any]:
        yield from list(self.ready)
        yield from list(self.waiting.values())

    def __contains__(self, request: Any) -> bool:
        rid = getattr(request, "request_id", None)
        return (rid in self.waiting and self.waiting[rid] is request) or any(
            r is request for r in self.ready
        )

    # -- accounting -------------------------------------------------------
    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """End of vLLM's ``schedule()``: charge what it scheduled."""
        # admitted, not taken (no room left, or the loop ended): back in place
        while self.ready:
            self.requeue(self.ready[-1])
        self._batch = max(4, self._popped + 1)
        self._popped = 0
        scheduled = output.num_scheduled_tokens
        changed = self._admitted_now
        running = self.running
        high_of = self._high
        for rid, n in scheduled.items():
            request = running.get(rid)
            if request is None:
                continue
            before = request.num_computed_tokens - n
            prompt = request.num_prompt_tokens
            if before >= prompt:
                continue  # decoding: output is charged in after_update
            end = min(before + n, prompt)
            high = high_of.get(rid, 0)
            new = end - max(before, high)
            if new > 0:
                self._extend[rid] = self._extend.get(rid, 0) + new
                changed.add(rid)
            if end > high:
                high_of[rid] = end
        for rid in changed:
            if rid in running:
                sched = self._sched(self._tier_of[rid])
                # at most the prompt length: positions past it are output
                sched.recharge_extend(rid, self._extend.get(rid, 0))
                pending = self._pending_output.pop(rid, 0)
                if pending:
                    sched.charge_output(rid, pending)
        self._admitted_now = set()

    def output_snapshot(
        self, scheduler_output: Any, requests: dict[str, Any]
    ) -> list[tuple[str, Any, int]]:
        """Before ``update_from_output``: output counts of the requests that ran."""
        out = []
        for rid in scheduler_output.num_scheduled_tokens:
            if rid in self.tenant_of:
                r = requests.get(rid)
                if r is not None:
                    out.append((rid, r, r.num_output_tokens))
        return out

    def after_update(self, snapshot: list[tuple[str, Any, int]]) -> None:
        """After ``update_from_output``: charge new output tokens, drop finished."""
        for rid, request, before in snapshot:
            new = request.num_output_tokens - before
            if new > 0:
                if rid in self.running:
                    self._sched(self._tier_of[rid]).charge_output(rid, new)
                elif rid in self.tenant_of:
                    self._pending_output[rid] = self._pending_output.get(rid, 0) + new
            if request.is_finished():
                self.finished(rid)

    def after_finish(self, before: dict[str, Any]) -> None:
        """After ``finish_requests`` (aborts): ``before`` maps each id to its
        request as it was before the call (None if unknown to vLLM)."""
        for rid, request in before.items():
            if request is None or request.is_finished():
                self.finished(rid)

    def finished(self, rid: str) -> None:
        """vLLM is done with ``rid`` (finished, aborted): it leaves fairq."""
        if rid in self.running:
            del self.running[rid]
            self._sched(self._tier_of[rid]).finish(rid)
            self._forget(rid)
        elif rid in self.waiting:
            self.remove(self.waiting[rid])

    def _forget(self, rid: str) -> None:
        self.tenant_of.pop(rid, None)
        self._tier_of.pop(rid, None)
        self._high.pop(rid, None)
        self._extend.pop(rid, None)
        self._pending_output.pop(rid, None)
        self._admitted_now.discard(rid)

    # -- saved state (fairq.vllm.persist) -----------------------------------
    def persisted_options(self) -> dict[str, Any]:
        """The options a saved state depends on: the policy, its own options
        (a restore would replace them) and whether requests are split into
        priority tiers. Tenant weights and the tenant resolver are not among
        them: the configured weights are applied over a restored state."""
        return {
            "policy": self.options.policy,
            "policy_options": dict(sorted(self.options.policy_options.items())),
            "tiers": self.tiers,
        }

    def persisted(self) -> dict[str, Any]:
        """Each tier's local scheduler's ``state_dict()`` (counters or
        deficits, service, weights, refills, waiting counts; the admitted
        requests, which :meth:`restore` finishes)."""
        return {"tiers": {str(t): s.state_dict() for t, s in sorted(self._scheds.items())}}

    def restore(self, saved: Any) -> None:
        """Load :meth:`persisted`'s output into this (fresh) state: each tier's
        scheduler is ``load_state_dict``-ed, then the requests it had admitted
        are finished (they did not survive the restart). Validates every
        tier before installing any; raises (changing nothing) if one is not
        valid (the core's errors name the field)."""
        if self._scheds or self.tenant_of:
            raise RuntimeError("restore needs a FairState with no requests")
        tiers = saved.get("tiers") if isinstance(saved, dict) else None
        if not isinstance(tiers, dict):
            raise ValueError(f"state.tiers must be a mapping of tier -> state, got {tiers!r}")
        built: dict[int, Any] = {}
        for key, doc in tiers.items():
            try:
                tier = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"state.tiers: {key!r} is not a tier number") from None
            if tier != 0 and not self.tiers:
                raise ValueError(f"state.tiers: tier {tier} without priority tiers")
            s = self._new_sched()
            try:
                s.load_state_dict(doc)
            except (TypeError, ValueError) as e:
                raise type(e)(f"state.tiers[{key!r}]: {e}") from None
            for r in doc["running"]:
                s.finish(r["request_id"])
            built[tier] = s
        for tier, s in sorted(built.items()):
            self._install(tier, s)

    # -- introspection ------------------------------------------------------
    def service(self, tenant: str) -> float:
        """Weighted tokens served to ``tenant`` (summed over tiers)."""
        return sum(s.service(tenant) for s in self._scheds.values())


class FairWaitingQueue(RequestQueue):
    """``scheduler.waiting`` under a fair policy (see the module doc).

    Iteration yields the admitted requests vLLM has not taken yet, then the waiting requests
    in arrival order, not in the policy's order (which depends on the
    admissions that have not happened yet).
    """

    __slots__ = ("state",)

    def __init__(self, state: FairState) -> None:
        self.state = state

    def add_request(self, request: Any) -> None:
        self.state.add(request)

    def pop_request(self) -> Any:
        return self.state.pop()

    def peek_request(self) -> Any:
        return self.state.peek()

    def prepend_request(self, request: Any) -> None:
        self.state.prepend(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        for r in list(requests):
            self.state.prepend(r)

    def remove_request(self, request: Any) -> None:
        if not self.state.remove(request):
            raise ValueError(f"{request!r} is not in the queue")

    def remove_requests(self, requests: Iterable[Any]) -> None:
        for r in list(requests):
            self.state.remove(r)

    def __bool__(self) -> bool:
        return len(self.state) > 0

    def __len__(self) -> int:
        return len(self.state)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.state)

    def __contains__(self, request: object) -> bool:
        return request in self.state
