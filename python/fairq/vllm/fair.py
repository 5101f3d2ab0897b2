"""fairq's fair policies inside vLLM's scheduler (``FAIRQ_VLLM_POLICY=vtc|lpm|dlpm``,
every policy of :data:`fairq.vllm.tenants.FAIR_POLICIES`).

This module translates vLLM's events into calls of the engine-neutral
:class:`fairq.ledger.Ledger`, which keeps the book, the charges, admission,
the tiers and the saved state.

vLLM's scheduling loop stays vLLM's: each step it peeks the head of
``scheduler.waiting``, holds back what it must (KV transfers, grammars, LoRA
slots: it pops those and puts them back at the end of the step), stops when
the KV cache or the token budget is full, and pops what it schedules. fairq
decides only which request is at the head.

* :class:`FairWaitingQueue` replaces ``scheduler.waiting``. Its head is the
  policy's next request: ``peek_request`` admits the next few in the
  ledger (:meth:`fairq.ledger.Ledger.admit`), each charged a provisional
  estimate at once, so the next choice in the same step already sees it.
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

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from fairq.ledger import Ledger, LedgerView, StepHook
from fairq.sched import policy_info
from fairq.vllm._base import RequestQueue
from fairq.vllm.mirror import PrefixCacheMirror, request_namespace
from fairq.vllm.tenants import FairOptions

__all__ = ["FairState", "FairWaitingQueue"]


class FairState(LedgerView, StepHook):
    """vLLM's events translated into :class:`fairq.ledger.Ledger` calls
    (one vLLM scheduler's fairness; the book, the charges, admission and
    the saved state are the ledger's, exposed through
    :class:`~fairq.ledger.LedgerView`: ``tenant_of``, ``waiting``,
    ``schedulers()``, ``service()``, the saved state's source methods).

    ``options``: :class:`fairq.vllm.tenants.FairOptions`. ``block_size``:
    vLLM's (the mirror's page). ``tiers``: split requests by priority.
    """

    def __init__(self, options: FairOptions, block_size: int, tiers: bool = False) -> None:
        self.options = options
        self.tiers = tiers
        needs_tree = policy_info(options.policy).needs_tree
        self.mirror = PrefixCacheMirror(block_size) if needs_tree else None
        tree = self.mirror.tree if self.mirror is not None else None
        self.ledger = Ledger(options, tree=tree, tiers=tiers, name="vllm")
        #: admitted in the ledger and popped by vLLM during this step
        self._popped = 0

    # -- the ledger's book, by vLLM's names ----------------------------------
    @property
    def running(self) -> dict[str, Any]:
        """Admitted in fairq: popped by vLLM (running, or held back), or
        not yet popped (:attr:`ready`)."""
        return {**self.ledger.running, **self.ledger.admitted}

    @property
    def ready(self) -> list[Any]:
        """Admitted, not yet popped by vLLM, in the policy's order."""
        return list(self.ledger.admitted.values())

    @staticmethod
    def _tokens(request: Any, resumed: bool) -> list[int]:
        toks = request.all_token_ids if resumed else request.prompt_token_ids
        return list(toks) if toks is not None else [0] * int(request.num_prompt_tokens)

    # -- the queue's operations ------------------------------------------
    def add(self, request: Any) -> None:
        rid = request.request_id
        led = self.ledger
        if rid in led.running or rid in led.admitted:  # back from kv-holding paths
            self.requeue(request)
            return
        tier = int(getattr(request, "priority", 0) or 0) if self.tiers else 0
        ns = request_namespace(request)
        if ns is False:  # the mirror cannot match it: its own namespace
            ns = f"unmatched:{rid}"
        led.add(rid, request, self._tokens(request, resumed=False), tier=tier, namespace=ns)

    def peek(self) -> Any:
        """The policy's next request. Admits :attr:`Ledger.batch` at a time
        (:meth:`fairq.ledger.Ledger.admit`), each charged an estimate as it
        is chosen; the batch doubles with each refill within a step and
        follows what vLLM took at its end. The ones vLLM does not take go
        back at the end of the step with their admission undone exactly."""
        led = self.ledger
        if led.admitted:
            return led.head()
        if self.mirror is not None:
            self.mirror.sync()
        if led.admit():
            led.grow()
            return led.head()
        raise IndexError("peek from an empty queue")

    def pop(self) -> Any:
        request = self.peek()
        self.ledger.take(request.request_id)
        self._popped += 1
        return request

    def requeue(self, request: Any) -> None:
        """An admitted request back to waiting, in its place. One that vLLM
        never ran (no prompt token scheduled yet) has its admission undone;
        one that ran (a preemption, or held back after running) keeps its
        charges and its next admission charges nothing."""
        rid = request.request_id
        ran = self.ledger.ran(rid)
        self.ledger.requeue(rid, self._tokens(request, resumed=ran), refund=not ran)

    def prepend(self, request: Any) -> None:
        rid = request.request_id
        led = self.ledger
        if rid in led.waiting:
            return
        if rid in led.running or rid in led.admitted:  # held back, or preempted
            self.requeue(request)
        else:
            self.add(request)

    def remove(self, request: Any) -> bool:
        rid = request.request_id
        led = self.ledger
        if rid in led.waiting:
            return led.remove(rid)
        if led.admitted.get(rid) is request:
            self.requeue(request)
            return led.remove(rid)
        return False

    def __len__(self) -> int:
        return len(self.ledger.waiting) + len(self.ledger.admitted)

    def __iter__(self) -> Iterator[Any]:
        yield from list(self.ledger.admitted.values())
        yield from list(self.ledger.waiting.values())

    def __contains__(self, request: Any) -> bool:
        rid: Any = getattr(request, "request_id", None)
        led = self.ledger
        return led.waiting.get(rid) is request or led.admitted.get(rid) is request

    # -- accounting -------------------------------------------------------
    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """End of vLLM's ``schedule()``: charge what it scheduled."""
        led = self.ledger
        # admitted, not taken (no room left, or the loop ended): back in place
        led.release(self._tokens)
        led.end_step(self._popped)
        self._popped = 0
        running = led.running
        for rid, n in output.num_scheduled_tokens.items():
            request = running.get(rid)
            if request is None:
                continue
            before = request.num_computed_tokens - n
            prompt = request.num_prompt_tokens
            if before < prompt:  # decoding: output is charged in after_update
                led.charge_prompt(rid, before, before + n, prompt)
        led.settle()

    def output_snapshot(
        self, scheduler_output: Any, requests: Mapping[str, Any]
    ) -> list[tuple[str, Any, int]]:
        """Before ``update_from_output``: output counts of the requests that ran."""
        out = []
        tenant_of = self.ledger.tenant_of
        for rid in scheduler_output.num_scheduled_tokens:
            if rid in tenant_of:
                r = requests.get(rid)
                if r is not None:
                    out.append((rid, r, r.num_output_tokens))
        return out

    def after_update(self, snapshot: list[tuple[str, Any, int]]) -> None:
        """After ``update_from_output``: charge new output tokens, drop finished."""
        led = self.ledger
        for rid, request, before in snapshot:
            led.charge_output(rid, request.num_output_tokens - before)
            if request.is_finished():
                led.finish(rid)

    def after_finish(self, before: Mapping[str, Any]) -> None:
        """After ``finish_requests`` (aborts): ``before`` maps each id to its
        request as it was before the call (None if unknown to vLLM)."""
        for rid, request in before.items():
            if request is None or request.is_finished():
                self.ledger.finish(rid)

    def finished(self, rid: str) -> None:
        """vLLM is done with ``rid`` (finished, aborted): it leaves fairq."""
        self.ledger.finish(rid)


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
