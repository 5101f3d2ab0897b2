"""The ledger: one engine-neutral record of who waits, who runs and what each
tenant has been charged, over fairq's local schedulers (pure Python; no
engine is imported).

An engine integration translates its events into the calls below; the
ledger owns everything else (the rules are ``docs/ALGORITHMS.md`` section 9):

* **The book**, keyed by request id: ``waiting`` (in fairq, not admitted),
  ``admitted`` (admitted in fairq, not yet taken by the engine; in the
  policy's order, the head first) and ``running`` (taken by the engine).
  Every request added leaves exactly once (:meth:`Ledger.finish`,
  :meth:`Ledger.remove`), and everything the ledger kept about it is then
  forgotten.
* **Tenants**: the options' resolver (:class:`fairq.engineopts.FairOptions`,
  a :class:`fairq.tenancy.SourceOrder`) names each request's tenant at
  :meth:`Ledger.add`; the configured tenant weights are applied to every
  scheduler the ledger builds or restores.
* **Priority tiers**: with ``tiers=True`` each request's tier (an int, lower
  first) has its own fair scheduler; :meth:`Ledger.admit` serves the lowest
  tier with something admissible (strict priority between tiers, fairness
  within one). Without, everything is tier 0.
* **Charging**: :meth:`Ledger.charge_prompt` records the prompt positions
  an engine computed in one chunk, after its own prefix match, each
  position charged once (a high-water mark: recomputation after a
  preemption or retraction is free); :meth:`Ledger.settle` replaces the
  admission's estimate by what was really computed
  (``recharge_extend``). :meth:`Ledger.charge_output` charges output
  tokens as they arrive; those that arrive while the request waits again
  are kept pending and charged when it runs again.
* **Admission** (:meth:`Ledger.admit`), the **adaptive batch size**
  (:attr:`Ledger.batch`, :meth:`Ledger.end_step`), **requeue** with the
  admission refunded (never ran) or kept (preempted, retracted:
  :meth:`Ledger.requeue`, :meth:`Ledger.release`).
* **The saved state**: :meth:`Ledger.persisted_options`,
  :meth:`Ledger.persisted`, :meth:`Ledger.restore` are what
  :class:`fairq.ledger.persist.Persistence` saves and loads.

Which policy needs a prefix tree and which refills credit comes from
:func:`fairq.sched.policy_info`; no policy name is written here.

Threads: the Rust objects must not be read while they change. Every call
that changes the ledger is made under :attr:`Ledger.lock` (an ``RLock``)
by the engine's scheduler, and the background flusher
(:class:`fairq.ledger.flush.Flusher`) takes the same lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from fairq.engineopts import FairOptions
from fairq.sched import make_scheduler, policy_info

__all__ = ["Ledger", "MAX_BATCH", "MIN_BATCH", "UNBOUNDED"]

#: Token budget of an admission in fairq (the engine checks the real one).
UNBOUNDED = 1 << 62
#: Fewest / most requests admitted per refill of the engine's head.
MIN_BATCH = 4
MAX_BATCH = 1024


class Ledger:
    """fairq's side of one engine scheduler (see the module doc).

    ``options``: the validated :class:`fairq.engineopts.FairOptions` (an
    engine's subclass). ``tree``: the :class:`fairq.RadixTree` the engine's
    prefix-cache mirror keeps (used when the policy needs one, see
    :attr:`needs_tree`; none given: an empty tree of the ledger's own).
    ``tiers``: one scheduler per priority tier.
    ``name``: the metric name prefix (``"vllm"`` gives
    ``"vllm-<policy>-tier<t>"``, :meth:`metric_objects`).
    ``on_new_scheduler(name, scheduler)``: called for each scheduler the
    ledger installs (default: :func:`fairq.metrics.publish`).
    """

    def __init__(
        self,
        options: FairOptions,
        *,
        tree: Any = None,
        tiers: bool = False,
        name: str = "engine",
        on_new_scheduler: Callable[[Any, str], Any] | None = None,
    ) -> None:
        info = policy_info(options.policy)
        self.options = options
        self.policy = info.name
        #: the policy orders by prefix match: the engine mirrors its cache
        self.needs_tree = info.needs_tree
        #: the policy refills credit (see :meth:`admit`)
        self.refills = info.refills
        if info.needs_tree and tree is None:
            from fairq._core import RadixTree

            tree = RadixTree()  # no engine cache followed: nothing matches
        self.tree = tree if info.needs_tree else None
        self.tiers = tiers
        self.name = name
        if on_new_scheduler is None:
            from fairq.metrics import publish

            on_new_scheduler = publish
        self._on_new = on_new_scheduler
        #: guards every call that reads or changes the Rust objects
        self.lock = threading.RLock()
        self._scheds: dict[int, Any] = {}
        #: the tenant and tier of each request the ledger holds
        self.tenant_of: dict[str, str] = {}
        self.tier_of: dict[str, int] = {}
        #: the book (see the module doc)
        self.waiting: dict[str, Any] = {}
        self.admitted: OrderedDict[str, Any] = OrderedDict()
        self.running: dict[str, Any] = {}
        #: taken since the last settle / with newly charged prompt positions
        self._fresh: set[str] = set()
        self._changed: set[str] = set()
        #: prompt positions charged (high-water mark), extend charged
        self._high: dict[str, int] = {}
        self._extend: dict[str, int] = {}
        #: output tokens that arrived while the request was waiting again
        self._pending: dict[str, int] = {}
        #: how many to admit per call of :meth:`admit` (adapts to what the
        #: engine takes per step)
        self.batch = MIN_BATCH
        #: requests that entered / left the ledger (diagnostics, tests)
        self.added = 0
        self.left = 0
        #: bumped by every change (a flusher compares it)
        self.version = 0

    # -- schedulers ---------------------------------------------------------
    def scheduler(self, tier: int = 0) -> Any:
        """Tier ``tier``'s local scheduler (built on first use)."""
        s = self._scheds.get(tier)
        if s is None:
            s = self._new_scheduler()
            self._install(tier, s)
        return s

    def schedulers(self) -> dict[int, Any]:
        """The local scheduler of each priority tier built so far."""
        return dict(self._scheds)

    def metric_objects(self) -> list[tuple[str, Any]]:
        """``(metric name, scheduler)`` of each tier, in tier order."""
        return [(self._metric_name(t), s) for t, s in sorted(self._scheds.items())]

    def _metric_name(self, tier: int) -> str:
        return f"{self.name}-{self.policy}-tier{tier}"

    def _new_scheduler(self) -> Any:
        return make_scheduler(self.policy, self.tree, **self.options.policy_options)

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
        self._on_new(s, self._metric_name(tier))

    # -- the book -----------------------------------------------------------
    def add(
        self,
        rid: str,
        item: Any,
        tokens: Sequence[int],
        *,
        tenant: str | None = None,
        tier: int = 0,
        namespace: Any = None,
    ) -> str:
        """A new request waits. ``item`` is the engine's request object
        (what :meth:`admit` returns), ``tokens`` its prompt, ``tenant``
        its tenant (default: the options' resolver applied to ``item``),
        ``namespace`` its prefix-cache namespace. Returns the tenant. A
        duplicate id raises ``ValueError`` (nothing changes)."""
        if rid in self.tenant_of:
            raise ValueError(f"request {rid!r} is already in the ledger")
        if tenant is None:
            tenant = self.options.tenant(item)
        tier = tier if self.tiers else 0
        self.scheduler(tier).add(rid, tenant, tokens, item, namespace=namespace)
        self.tenant_of[rid] = tenant
        self.tier_of[rid] = tier
        self.waiting[rid] = item
        self.added += 1
        self.version += 1
        return tenant

    def admit(
        self,
        k: int | None = None,
        *,
        token_budget: int = UNBOUNDED,
        oversize_budget: int | None = None,
    ) -> list[Any]:
        """Admit the policy's next ``k`` requests (default :attr:`batch`)
        of the lowest tier that has one admissible; returns their items in
        order (also appended to :attr:`admitted`). Each is charged an
        estimate at once, so the next choice already sees it.

        ``token_budget``: the extend tokens the admissions may take in all
        (default unbounded: the engine checks its own); ``oversize_budget``:
        the core's oversize rule for the first admission (``None``: any
        size; 0: off), see :func:`fairq.sched.admit`. An engine that admits
        only what fits its step (transformers) passes both.

        One loop shape for every engine, demand-driven. A policy that
        refills credit (DLPM) makes one admission that may refill
        (``schedule(1)``), then admits the rest within the credit left
        (``schedule_within_credit(k - 1)``): at most one refill per call,
        and only when the engine asks for more and no waiting tenant has
        credit. An engine that wants more calls again (vLLM peeks again
        when its head runs out; SGLang's next decision comes with a doubled
        :attr:`batch`, :meth:`end_step`). Why not "again while fewer than
        ``k``" (SGLang's earlier shape): each refill adds ``quantum`` to
        every tenant and no refund of an admission the engine does not
        take undoes it, so refills made to fill a batch the engine then
        does not take pile up credit for everyone, and DLPM drifts towards
        LPM: under vLLM (``tests/test_vllm_fair.py``, greedy workload,
        quantum 256) the service gap between backlogged tenants reached
        4,728 tokens against the bound ``2 (U + Q) = 1,664`` that the
        demand-driven shape keeps. Other policies:
        ``schedule(max_requests=k)``.
        """
        k = self.batch if k is None else k
        if k <= 0:
            return []
        for tier in sorted(self._scheds):
            sched = self._scheds[tier]
            first = 1 if self.refills else k
            adm = list(sched.schedule(token_budget, first, oversize_budget=oversize_budget))
            if adm and self.refills and k > 1:
                left = max(token_budget - sum(a.extend_len for a in adm), 0)
                adm += sched.schedule_within_credit(left, k - 1, oversize_budget=0)
            if adm:
                items = []
                for a in adm:
                    rid = a.request_id
                    item = self.waiting.pop(rid)
                    self.admitted[rid] = item
                    items.append(item)
                self.version += 1
                return items
        return []

    def head(self) -> Any:
        """The first admitted request not taken yet (``IndexError`` if none)."""
        for item in self.admitted.values():
            return item
        raise IndexError("no admitted request")

    def take(self, rid: str) -> bool:
        """The engine took admitted request ``rid`` (it will run now):
        admitted -> running. False (nothing changes) if ``rid`` is running
        already (a next chunk) or not the ledger's."""
        item = self.admitted.pop(rid, None)
        if item is None:
            return False
        self.running[rid] = item
        self._fresh.add(rid)
        self.version += 1
        return True

    def ran(self, rid: str) -> bool:
        """Whether some prompt position of ``rid`` was charged (it ran)."""
        return rid in self._high

    def requeue(self, rid: str, tokens: Sequence[int], *, refund: bool) -> None:
        """Admitted or running ``rid`` back to waiting, in its place.
        ``refund``: the admission is undone exactly (a request the engine
        never ran); else its charges are kept and its next admission
        charges nothing (preempted, retracted: ``tokens`` are then all its
        tokens, prompt and output, as the engine recomputes them)."""
        item = self.admitted.pop(rid, None)
        if item is None:
            item = self.running.pop(rid)
        self._fresh.discard(rid)
        self.scheduler(self.tier_of[rid]).requeue(rid, tokens, item, refund=refund)
        self.waiting[rid] = item
        self.version += 1

    def release(self, tokens_of: Callable[[Any, bool], Sequence[int]]) -> int:
        """Every admitted request the engine did not take goes back to its
        place (:meth:`requeue`; refunded unless it ran before:
        ``tokens_of(item, ran)`` gives the tokens). Returns how many."""
        n = 0
        while self.admitted:
            rid, item = next(reversed(self.admitted.items()))
            ran = self.ran(rid)
            self.requeue(rid, tokens_of(item, ran), refund=not ran)
            n += 1
        return n

    def end_step(self, taken: int, wanted_more: bool = False) -> None:
        """The engine's step is over: it took ``taken`` admitted requests.
        The next batch is ``taken + 1`` (at least :data:`MIN_BATCH`), or
        twice the last (at most :data:`MAX_BATCH`) if the engine had room
        for more than it was given (``wanted_more``)."""
        if wanted_more:
            self.grow()
        else:
            self.batch = max(MIN_BATCH, taken + 1)

    def grow(self) -> None:
        """Admit twice as many per call from now on (at most :data:`MAX_BATCH`)."""
        self.batch = min(2 * self.batch, MAX_BATCH)

    def remove(self, rid: str) -> bool:
        """A waiting request leaves (aborted before it was admitted).
        False if ``rid`` is not waiting (nothing changes)."""
        if rid not in self.waiting:
            return False
        del self.waiting[rid]
        self.scheduler(self.tier_of[rid]).remove(rid)
        self._forget(rid)
        return True

    def finish(self, rid: str) -> bool:
        """The engine is done with ``rid`` (finished or aborted, in any
        state): it leaves the ledger. False if it was not the ledger's."""
        if rid in self.running or rid in self.admitted:
            self.running.pop(rid, None)
            self.admitted.pop(rid, None)
            self.scheduler(self.tier_of[rid]).finish(rid)
            self._forget(rid)
            return True
        return self.remove(rid)

    def _forget(self, rid: str) -> None:
        self.tenant_of.pop(rid, None)
        self.tier_of.pop(rid, None)
        self._high.pop(rid, None)
        self._extend.pop(rid, None)
        self._pending.pop(rid, None)
        self._fresh.discard(rid)
        self._changed.discard(rid)
        self.left += 1
        self.version += 1

    def __contains__(self, rid: object) -> bool:
        return rid in self.tenant_of

    def __len__(self) -> int:
        """Requests the ledger holds (waiting, admitted or running)."""
        return len(self.tenant_of)

    # -- charging -----------------------------------------------------------
    def charge_prompt(self, rid: str, start: int, end: int, prompt_len: int) -> int:
        """The engine computed positions ``[start, end)`` of ``rid`` (one
        chunk; ``start`` is past its own prefix-cache hit). The positions
        in the prompt not charged before are added to its extend charge
        (applied by :meth:`settle`). Returns how many were new."""
        end = min(end, prompt_len)
        high = self._high.get(rid, 0)
        new = end - max(start, high)
        if new > 0:
            self._extend[rid] = self._extend.get(rid, 0) + new
            self._changed.add(rid)
        if end > high:
            self._high[rid] = end
        return max(new, 0)

    def settle(self) -> None:
        """Apply the charges recorded since the last call: each running
        request taken or charged prompt positions since then has its
        admission's estimate replaced by the positions really computed
        (``recharge_extend``; at most the prompt), and output tokens kept
        pending while it waited are charged."""
        touched = self._fresh | self._changed
        self._fresh = set()
        self._changed = set()
        for rid in touched:
            if rid in self.running:
                sched = self.scheduler(self.tier_of[rid])
                sched.recharge_extend(rid, self._extend.get(rid, 0))
                pending = self._pending.pop(rid, 0)
                if pending:
                    sched.charge_output(rid, pending)
        if touched:
            self.version += 1

    def charge_output(self, rid: str, n: int) -> None:
        """``n`` output tokens of ``rid`` arrived: charged now if it runs,
        kept pending (charged when it runs again) if it waits again;
        nothing for a request not the ledger's."""
        if n <= 0:
            return
        if rid in self.running:
            self.scheduler(self.tier_of[rid]).charge_output(rid, n)
        elif rid in self.tenant_of:
            self._pending[rid] = self._pending.get(rid, 0) + n
        else:
            return
        self.version += 1

    # -- introspection --------------------------------------------------------
    def service(self, tenant: str) -> float:
        """Weighted tokens served to ``tenant`` (summed over tiers)."""
        return float(sum(s.service(tenant) for s in self._scheds.values()))

    def share_leads(self) -> dict[str, float]:
        """Each tenant's ``share_lead`` (how far over its fair share by the
        policy's own account, larger = further; the largest over tiers): what
        :meth:`fairq.ledger.caps.AdmissionControl.set_accounts` takes."""
        out: dict[str, float] = {}
        for s in self._scheds.values():
            for t in s.clients():
                v = s.share_lead(t)
                out[t] = max(out.get(t, v), v)
        return out

    # -- saved state (fairq.ledger.persist) -----------------------------------
    def persisted_options(self) -> dict[str, Any]:
        """The options a saved state depends on: the policy, its own options
        (a restore would replace them) and whether requests are split into
        priority tiers. Tenant weights and the tenant resolver are not among
        them: the configured weights are applied over a restored state."""
        return {
            "policy": self.policy,
            "policy_options": dict(sorted(self.options.policy_options.items())),
            "tiers": self.tiers,
        }

    def persisted(self) -> dict[str, Any]:
        """Each tier's local scheduler's ``state_dict()`` (counters or
        deficits, service, weights, refills, waiting counts; the admitted
        requests, which :meth:`restore` finishes)."""
        return {"tiers": {str(t): s.state_dict() for t, s in sorted(self._scheds.items())}}

    def restore(self, saved: Any) -> None:
        """Load :meth:`persisted`'s output into this (fresh) ledger: each
        tier's scheduler is ``load_state_dict``-ed, then the requests it had
        admitted are finished (they did not survive the restart). Validates
        every tier before installing any; raises (changing nothing) if one
        is not valid (the core's errors name the field)."""
        if self._scheds or self.tenant_of:
            raise RuntimeError("restore needs a ledger with no requests")
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
            s = self._new_scheduler()
            try:
                s.load_state_dict(doc)
            except (TypeError, ValueError) as e:
                raise type(e)(f"state.tiers[{key!r}]: {e}") from None
            for r in doc["running"]:
                s.finish(r["request_id"])
            built[tier] = s
        for tier, s in sorted(built.items()):
            self._install(tier, s)
        self.version += 1
