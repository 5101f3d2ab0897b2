"""fairq policies as transformers continuous-batching schedulers.

transformers (5.17 .. 5.23) looks the scheduler class up by name in
``transformers.generation.continuous_batching.scheduler.SCHEDULER_MAPPING``
(``ContinuousBatchingConfig(scheduler_type=...)``) and builds it with
``cls(cache=..., safety_margin=..., max_requests_per_batch=...)``. Each step the
engine calls ``schedule_batch(token_budget, cache_budget)``.

``FairqScheduler`` keeps the engine's own mechanics and changes one decision:
which waiting requests enter the batch and in what order. Its fairness is
the engine-neutral ledger's (:class:`fairq.ledger.Ledger`, as vLLM's and
SGLang's): the scheduler translates the engine's events into ledger calls.

* Decoding requests are scheduled first and prefill chunks of admitted requests
  next, exactly as transformers' FIFO scheduler does.
* New requests are admitted by the fairq policy (every local policy of
  :data:`fairq.sched.POLICY_INFO`) in its order, once per step, within the
  token budget left after running requests (``Ledger.admit``: DLPM refills
  at most once per admission, then admits within credit). An admitted
  request the engine cannot place yet (cache full, safety margin) is *held*:
  it keeps its place ahead of any new admission, and nothing new is admitted
  while one is held.
* The engine's ``_process_candidates`` (shared by all its schedulers) still
  decides what fits the token, KV-read and cache budgets, splits long prompts
  into chunks, and performs the prefix match on the engine's page hashes.
* Service is charged from the engine's real progress. At admission fairq
  charges the extend tokens it predicts (LPM, DLPM: from the integration's
  ``fairq.RadixTree`` mirror of the engine's page cache; the policies need
  match lengths before the engine sees the request). Each prompt chunk the
  engine then schedules, after its own prefix match, is charged to the
  ledger, each prompt position once (``charge_prompt``), and replaces the
  estimate (``recharge_extend``), so service, DLPM deficits and the next
  admissions follow what the engine really computes. Output tokens are
  charged as the engine generates them (read from ``state.generated_tokens``
  at every step and at finish).
* The mirror tree gets a request's prompt inserted and locked when its prefill
  completes and its full sequence inserted and unlocked when it finishes. The
  prediction error is kept as a diagnostic (``stats.mirror_error_tokens()``);
  if the engine matched less than the mirror predicted, the engine evicted
  cached pages and the mirror drops its unlocked entries too.
* Options are every engine's :class:`~fairq.transformers.tenants.FairOptions`
  (:func:`scheduler_class`, :func:`register`): the policy's own,
  ``tenant_weights``, ``tenant`` (request id -> tenant), ``state_file`` and
  ``state_interval_s``. With ``state_file`` the fairness state survives a
  restart (:mod:`fairq.ledger.persist`, format ``fairq.transformers.state``):
  loaded when the engine builds (or resets) the scheduler, saved every
  ``state_interval_s`` while it steps, when it goes idle and at a reset.
* With ``$FAIRQ_METRICS`` set, each scheduler's collector
  (``name="transformers-<policy>"``, :mod:`fairq.metrics`) and its per-tenant
  tally (``fairq_transformers_requests_total``...) are registered with
  ``prometheus_client``'s default registry.
* transformers' requests carry no priority, so there are no priority tiers.

Requests the engine offloads (``finish_request`` then ``add_waiting_request``
with the same id) stay running in the ledger and are re-placed before anything else.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fairq.extras import missing

try:
    import transformers
    from transformers.generation.continuous_batching.requests import RequestStatus
    from transformers.generation.continuous_batching.scheduler import (
        SCHEDULER_MAPPING,
        FIFOScheduler,
        Scheduler,
    )
except ImportError as e:  # torch or transformers: the engine extra
    raise missing("engine", "fairq.transformers' scheduler classes", e) from e

import fairq
from fairq.engineopts import POLICIES, check_policy
from fairq.ledger import Hooks, Ledger, Persistence, PersistHook, TenantTally
from fairq.metrics import publish
from fairq.transformers.clients import ClientResolver
from fairq.transformers.fit import StepSample
from fairq.transformers.model import SUPPORTED_TRANSFORMERS
from fairq.transformers.stats import publish_tally
from fairq.transformers.tenants import FAIR_POLICIES, FairOptions, make_options

_REQUIRED = ("_process_candidates", "_cleanup_waiting_queue", "add_waiting_request", "reset")
_missing = [name for name in _REQUIRED if not hasattr(Scheduler, name)]
if _missing:  # pragma: no cover - depends on the installed transformers
    raise ImportError(
        f"transformers {transformers.__version__} has a continuous-batching Scheduler without "
        f"{', '.join(_missing)}; fairq's integration supports transformers{SUPPORTED_TRANSFORMERS}"
    )

logger = logging.getLogger(__name__)

#: The most recently built scheduler instances (newest last; the benchmark reads
#: the measurements from here after the engine stopped).
LAST_SCHEDULER: list[Any] = []
DEFAULT_SAFETY_MARGIN = 0.15  # transformers' FIFO default


def engine_page_size(cache: Any) -> int:
    """Tokens per KV page of the engine's cache (5.17: ``block_size``; later: per allocator)."""
    size = getattr(cache, "block_size", None)
    if isinstance(size, int) and size > 0:
        return size
    allocators = getattr(cache, "cache_allocators", None)
    if allocators:
        return int(min(a.tokens_per_page for a in allocators.values()))
    return 1


@dataclass
class RequestRecord:
    """What the scheduler saw of one request (for reports and tests).

    Attributes:
        request_id: engine request id.
        client: fairq client.
        prompt_len: prompt tokens.
        engine_cached: prompt tokens the engine's prefix match served from
            cache when the request was first placed (None until placed).
        predicted_cached: the mirror tree's prediction at admission (fairq
            policies that keep a mirror, LPM and DLPM; else None).
        charged_extend: extend tokens fairq charges for the request: the
            admission's estimate (``prompt_len - predicted_cached``) until
            the engine places it, then the prompt positions it has computed
            (``prompt_len - engine_cached`` once prefilled) (fairq policies
            only; None for the FIFO observer).
        output_tokens: tokens generated so far (charged to fairq).
        placed_step: step index at which the engine first placed it.
    """

    request_id: str
    client: str
    prompt_len: int
    engine_cached: int | None = None
    predicted_cached: int | None = None
    charged_extend: int | None = None
    output_tokens: int = 0
    placed_step: int | None = None


@dataclass
class EngineStats:
    """Measurements shared by the fairq schedulers and the FIFO observer."""

    steps: list[StepSample] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    n_steps: int = 0
    mirror_resyncs: int = 0
    requeued: int = 0
    schedule_s: float = 0.0  # time spent inside schedule_batch (the policy's overhead)

    def mirror_error_tokens(self) -> int:
        """Sum over placed requests of |mirror-predicted - engine-matched| cached
        tokens: how far the mirror's predictions (used for the admission order
        and the provisional charge) were off. The charges themselves are
        corrected to the engine's match (``recharge_extend``)."""
        return sum(
            abs(r.predicted_cached - r.engine_cached)
            for r in self.requests.values()
            if r.predicted_cached is not None and r.engine_cached is not None
        )

    def prefix_hit_rate(self) -> float:
        """Prompt tokens served by the engine's prefix cache / prompt tokens (placed requests)."""
        placed = [r for r in self.requests.values() if r.engine_cached is not None]
        total = sum(r.prompt_len for r in placed)
        return sum(r.engine_cached or 0 for r in placed) / total if total else 0.0


class _Observer:
    """Step timing and placement bookkeeping, mixed into both scheduler kinds."""

    client_of: ClassVar[Callable[[object], str]] = ClientResolver()
    stats: EngineStats
    active_requests: dict[str, Any]
    waiting_requests: dict[str, Any]

    def _observer_reset(self) -> None:
        self.stats = EngineStats()
        del LAST_SCHEDULER[:-3]
        LAST_SCHEDULER.append(self)
        self._open_step: tuple[float, int, int, int] | None = None
        self._went_idle = False

    def _begin_step(self) -> None:
        now = time.perf_counter()
        if self._open_step is not None and not self._went_idle:
            start, prefill, batch, kv = self._open_step
            self.stats.steps.append(StepSample(now - start, prefill, batch, kv))
        self._open_step = None
        self._went_idle = False
        self._step_started = now

    def _end_step(
        self, scheduled: Iterable[Any] | None, decoding_before: set[str], kv: int
    ) -> None:
        if not scheduled:
            return
        batch = 0
        prefill = 0
        for fs in scheduled:
            batch += 1
            if fs.state.request_id not in decoding_before:
                prefill += int(fs.query_length)
        self.stats.n_steps += 1
        self._open_step = (self._step_started, prefill, batch, int(kv))

    def _schedule_done(self) -> None:
        self.stats.schedule_s += time.perf_counter() - self._step_started

    def _record(self, state: Any) -> RequestRecord:
        rid = state.request_id
        rec = self.stats.requests.get(rid)
        if rec is None:
            rec = RequestRecord(rid, type(self).client_of(rid), len(state.initial_tokens))
            self.stats.requests[rid] = rec
        return rec

    def _note_placed(self, state: Any, offset_before: int) -> RequestRecord:
        rec = self._record(state)
        if rec.engine_cached is None:
            rec.engine_cached = max(0, int(state.position_offset) - offset_before)
            rec.placed_step = self.stats.n_steps
        return rec

    def _mark_idle_if_done(self) -> None:
        if not (self.active_requests or self.waiting_requests):
            self._went_idle = True


class ObservedFIFOScheduler(_Observer, FIFOScheduler):
    """transformers' FIFO scheduler, unchanged, plus the same measurements as
    the fairq schedulers (registered as ``"fifo-observed"``) so the benchmark
    compares like with like."""

    def reset(self) -> None:
        """Reset the engine state and the measurements."""
        super().reset()
        self._observer_reset()

    def schedule_batch(self, token_budget: int, cache_budget: int) -> Any:
        """FIFO scheduling, timed, recording the engine's prefix match per request."""
        self._begin_step()
        offsets = {rid: s.position_offset for rid, s in self.waiting_requests.items()}
        decoding = {
            rid for rid, s in self.active_requests.items() if s.status == RequestStatus.DECODING
        }
        result = super().schedule_batch(token_budget, cache_budget)
        for rid, before in offsets.items():
            state = self.active_requests.get(rid)
            if state is not None:
                self._note_placed(state, before)
        scheduled, _, _, kv = result
        self._end_step(scheduled, decoding, kv)
        self._schedule_done()
        return result

    def finish_request(self, request_id: str) -> None:
        """Record the output length, then let the engine free the request."""
        state = self.active_requests.get(request_id)
        if state is not None:
            self._record(state).output_tokens = len(state.generated_tokens)
        super().finish_request(request_id)
        self._mark_idle_if_done()


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a scheduler method under its lock (the ledger's: the per-tenant
    tally's collector and any other reader of the ledger take it too)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


@dataclass
class _Entry:
    """What the scheduler keeps of one request fairq holds (the ledger keeps
    its tenant, its place in the book and its charges)."""

    prompt: list[int]
    output_charged: int = 0
    gen_offset: int = 0
    locked: list[int] | None = None
    finishing: bool = False
    final_tokens: list[int] | None = None
    finished_state: Any = None


#: The saved state's envelope ``format`` (:mod:`fairq.ledger.persist`).
STATE_FORMAT = "fairq.transformers.state"


class FairqScheduler(_Observer, Scheduler):
    """A transformers ``Scheduler`` whose admission order is a fairq policy,
    translating the engine's events into a :class:`fairq.ledger.Ledger`.

    Do not instantiate directly: the engine builds it from
    ``SCHEDULER_MAPPING``. Use :func:`scheduler_class` / :func:`register` to
    make a subclass bound to a policy and its
    :class:`~fairq.transformers.tenants.FairOptions`.

    The events, in ledger calls: a new request -> ``add`` (tenant from the
    options' resolver, applied to the request id); admission ->
    ``admit(slots, token_budget=..., oversize_budget=...)`` (what fits the
    step's budget left); the engine places an admitted request -> ``take``;
    each prompt chunk the engine runs -> ``charge_prompt`` (after its own
    prefix match; each position once) then ``settle``; generated tokens ->
    ``charge_output``; finished or cancelled -> ``finish`` (forgotten). An
    admitted request the engine cannot place yet (*held*) stays admitted
    ahead of any new admission; an offloaded request (``finish_request`` then
    ``add_waiting_request`` with the same id) stays running in the ledger,
    keeps its charges (recomputation is free) and is re-placed first.
    transformers' requests carry no priority, so there is one tier.

    Attributes (after construction):
        ledger: the :class:`fairq.ledger.Ledger`.
        fq: the ledger's fairq policy object (``fairq.DLPM`` ...).
        tree: the ``fairq.RadixTree`` mirror of the engine's page cache
            (policies that order by prefix match; else None).
        persist: the saved state (:class:`fairq.ledger.Persistence`) with
            the option ``state_file``, else None.
        tally: per-tenant requests, prompt tokens and engine prefix hits
            (:class:`fairq.ledger.TenantTally`).
        stats: :class:`EngineStats`.
    """

    policy: ClassVar[str] = "fcfs"
    #: the validated options (``scheduler_class`` sets them)
    fair_options: ClassVar[FairOptions] = FairOptions("fcfs")
    #: the policy's own options and the tenant weights (read-only views)
    policy_opts: ClassVar[dict[str, float]] = {}
    client_weights: ClassVar[dict[str, float]] = {}

    def __init__(
        self,
        cache: Any,
        safety_margin: float | None = None,
        max_requests_per_batch: int = 1 << 30,
    ) -> None:
        check_policy(self.policy)
        if safety_margin is None:
            safety_margin = DEFAULT_SAFETY_MARGIN
        self.page_size = engine_page_size(cache)
        self._lock = threading.RLock()
        super().__init__(cache, safety_margin, max_requests_per_batch)

    # ----------------------------------------------------------------- state
    @_locked
    def reset(self) -> None:
        """Fresh engine queues, ledger, mirror tree and measurements. The
        previous ledger's state is saved first (a manager restarted), and
        the new one loads the state file (when the option is set)."""
        hooks = getattr(self, "fairq_hooks", None)
        if hooks is not None:
            _never_raise(hooks.shutdown)
        super().reset()
        self._observer_reset()
        options = self.fair_options
        policy = self.policy
        self.tree = fairq.RadixTree(page_size=self.page_size) if _needs_tree(policy) else None
        self.ledger = Ledger(
            options,
            tree=self.tree,
            name="transformers",
            on_new_scheduler=lambda s, _name: publish(s, f"transformers-{policy}"),
        )
        self.ledger.lock = self._lock
        self.persist = _persistence(self.ledger, options)
        self.tally = TenantTally(options.tenant)
        publish_tally(self.tally, f"transformers-{policy}", self._lock)
        self.fairq_hooks = Hooks([PersistHook(self.persist)] if self.persist else [])
        self._entries: dict[str, _Entry] = {}
        self._requeued: deque[str] = deque()
        self._finishing: list[str] = []

    @property
    def fq(self) -> Any:
        """The fairq policy object (the ledger's one tier)."""
        return self.ledger.scheduler(0)

    @_locked
    def service(self, client: str) -> float:
        """fairq's service counter of ``client`` (``w_e*extend + w_q*output``)."""
        return self.ledger.service(client)

    @_locked
    def flush(self) -> None:
        """Apply pending finishes and output charges to fairq (done
        automatically every step), and, once the engine has no request,
        what going idle does (the state file saved if it changed)."""
        self._finalize_finished()
        self._charge_progress()
        if not super().has_pending_requests():
            self.fairq_hooks.idle()

    # ------------------------------------------------------- engine hooks
    def has_pending_requests(self) -> bool:
        """The engine's check; with no request left (the engine goes idle,
        and polls this while it waits) the finishes are applied and the
        hooks' ``idle()`` runs: the state file is saved if it changed."""
        pending = super().has_pending_requests()
        if not pending:
            _never_raise(self.flush)
        return pending

    @_locked
    def add_waiting_request(self, state: Any) -> None:
        """Queue a new request in fairq (or re-place an offloaded one first)."""
        rid = state.request_id
        entry = self._entries.get(rid)
        if entry is not None and entry.finishing and not self._is_requeue(entry, state):
            # A finished request's id submitted again: close the old one first.
            self._finalize(rid)
            entry = None
        if entry is not None and entry.finishing:
            # The engine offloaded a request it ran and queues it again: it
            # stays running in the ledger (its charges kept) and is re-placed first.
            entry.finishing = False
            self._finishing.remove(rid)
            entry.gen_offset = entry.output_charged - len(state.generated_tokens)
            self.stats.requeued += 1
            super().add_waiting_request(state)
            self._requeued.append(rid)
            return
        if entry is not None:
            raise ValueError(f"request_id {rid!r} is already waiting or running")
        client = type(self).client_of(rid)
        tokens = [int(t) for t in state.initial_tokens]
        # validates first; the engine fails the request on error
        self.ledger.add(rid, state, tokens, tenant=client)
        self._entries[rid] = _Entry(prompt=tokens)
        self._record(state).client = client
        super().add_waiting_request(state)

    @_locked
    def finish_request(self, request_id: str) -> None:
        """Charge the last outputs; the fairq finish is applied at the next step
        (an offload re-queues the same id right after this call)."""
        state = self.active_requests.get(request_id)
        entry = self._entries.get(request_id)
        if entry is not None and self._admitted(request_id) and not entry.finishing:
            if state is not None:
                self._charge_state(request_id, entry, state)
                entry.final_tokens = list(state.initial_tokens) + list(state.generated_tokens)
            entry.finished_state = state
            entry.finishing = True
            self._finishing.append(request_id)
        super().finish_request(request_id)
        self._mark_idle_if_done()

    @_locked
    def clear_cancelled_requests(self) -> Any:
        """Cancelled requests leave fairq too, in whatever state they were."""
        cancelled = super().clear_cancelled_requests()
        for state in cancelled or ():
            rid = state.request_id
            entry = self._entries.pop(rid, None)
            if entry is None:
                continue
            if entry.finishing:
                self._finishing.remove(rid)
            if rid in self._requeued:
                self._requeued.remove(rid)
            self.ledger.finish(rid)
            self._unlock(entry)
        return cancelled

    @_locked
    def schedule_batch(self, token_budget: int, cache_budget: int) -> Any:
        """Running requests first (engine order), then fairq's admissions."""
        self._begin_step()
        self._finalize_finished()
        self._charge_progress()

        decoding: list[Any] = []
        prefilling: list[Any] = []
        for state in self.active_requests.values():
            if state.status == RequestStatus.DECODING:
                decoding.append(state)
            elif state.status == RequestStatus.PREFILLING:
                prefilling.append(state)

        waiting: list[Any] = []
        if not self.block_new_requests:
            used = len(decoding) + sum(len(s.remaining_prefill_tokens) for s in prefilling)
            slots = self.max_requests_per_batch - len(decoding) - len(prefilling)
            self._admit(token_budget - used, slots, chunk_running=bool(prefilling))
            for rid in [*self._requeued, *self.ledger.admitted]:
                state = self.waiting_requests.get(rid)
                if state is not None:
                    waiting.append(state)

        offsets = {s.request_id: int(s.position_offset) for s in waiting}
        decoding_ids = {s.request_id for s in decoding}
        to_remove: set[str] = set()
        self._match_prefixes(waiting, to_remove)
        scheduled, one_allocation_failed, fast_path, num_q_tokens, max_kv_read = (
            self._process_candidates(
                decoding + prefilling + waiting, token_budget, cache_budget, to_remove
            )
        )
        self._placed(offsets)
        self._charge_chunks(scheduled)
        self._cleanup_waiting_queue(to_remove)
        _never_raise(lambda: self.fairq_hooks.after_schedule(self, scheduled))

        if not scheduled and one_allocation_failed:
            self._schedule_done()
            return None, fast_path, 0, 0
        self._end_step(scheduled, decoding_ids, max_kv_read)
        self._schedule_done()
        return scheduled, fast_path, num_q_tokens, max_kv_read

    # ------------------------------------------------------------ helpers
    def _admitted(self, rid: str) -> bool:
        led = self.ledger
        return rid in led.running or rid in led.admitted

    def _admit(self, token_budget: int, slots: int, chunk_running: bool) -> None:
        """Admit what fits the step's budget left, unless a request is held
        or re-placed. The policy's head does not fit one batch and no other
        prefill runs: it is admitted anyway and prefilled in chunks (as the
        engine does for FIFO); with another prefill under way it waits."""
        led = self.ledger
        if not led.waiting or led.admitted or self._requeued or slots <= 0:
            return
        if chunk_running and token_budget <= 0:
            return
        oversize = 0 if chunk_running else None
        items = led.admit(slots, token_budget=max(token_budget, 0), oversize_budget=oversize)
        fq = self.fq
        for state in items:
            rid = state.request_id
            rec = self.stats.requests[rid]
            rec.charged_extend = int(fq.charged_extend(rid))
            if self.tree is not None:
                rec.predicted_cached = rec.prompt_len - rec.charged_extend

    def _match_prefixes(self, waiting: Iterable[Any], to_remove: set[str]) -> None:
        """Run the engine's prefix match (``_infer_request_tokens``) on every
        admitted request still waiting, before the engine's candidate loop.

        The engine matches a waiting request only when its candidate loop
        reaches it, and that loop stops at the first prefill candidate once
        the cache is under the safety margin, which evicts every cached page
        of finished requests. FIFO passes every waiting request through that
        loop, so a request whose document another running request holds is
        matched (and its pages shared) as soon as the loop sees it, even when
        it cannot be scheduled yet. fairq passes only its admitted requests: a
        held one would be matched only once the margin is met again, by which
        time the request sharing its prefix has finished and its pages are
        evicted (no hit at all for policies without a mirror tree). Matching
        the admitted requests here keeps the policy's choice and order (only
        requests fairq admitted are matched) and gets the engine's own match,
        as FIFO does. A matched request becomes active (prefilling) and is
        taken by ``_placed``."""
        infer = getattr(self, "_infer_request_tokens", None)
        if infer is None or not getattr(self.cache, "use_prefix_sharing", False):
            return
        for state in waiting:
            if state.status == RequestStatus.PENDING:
                infer(state, to_remove)

    def _placed(self, offsets: Mapping[str, int]) -> None:
        """The candidates the engine placed (now active) are taken; the
        first placement records the engine's prefix match."""
        for rid, before in offsets.items():
            state = self.active_requests.get(rid)
            if state is None:
                continue  # still waiting: stays held for the next step
            if rid in self._requeued:
                self._requeued.remove(rid)
            self.ledger.take(rid)
            first = self._record(state).engine_cached is None
            rec = self._note_placed(state, before)
            if first and rec.engine_cached is not None:
                rec.charged_extend = 0  # now: the positions the engine computes
                tenant = self.ledger.tenant_of.get(rid, rec.client)
                self.tally.record(rid, tenant, rec.prompt_len, rec.engine_cached)
                self._check_mirror(rec)

    def _charge_chunks(self, scheduled: Iterable[Any] | None) -> None:
        """Charge the prompt positions each scheduled chunk computes, after
        the engine's prefix match (each once: recomputation after an offload
        is free), then settle the ledger."""
        led = self.ledger
        for fs in scheduled or ():
            state = fs.state
            rid = state.request_id
            entry = self._entries.get(rid)
            if entry is None or rid not in led.running:
                continue
            start = int(state.position_offset)
            new = led.charge_prompt(rid, start, start + int(fs.query_length), len(entry.prompt))
            if new:
                rec = self.stats.requests[rid]
                rec.charged_extend = (rec.charged_extend or 0) + new
        led.settle()

    def _charge_state(self, rid: str, entry: _Entry, state: Any) -> None:
        produced = entry.gen_offset + len(state.generated_tokens)
        n = produced - entry.output_charged
        if n > 0:
            self.ledger.charge_output(rid, n)
            entry.output_charged = produced
            self.stats.requests[rid].output_tokens = produced

    def _charge_progress(self) -> None:
        for rid, state in self.active_requests.items():
            entry = self._entries.get(rid)
            if entry is None or entry.finishing or not self._admitted(rid):
                continue
            self._charge_state(rid, entry, state)
            if self.tree is not None and entry.locked is None and state.generated_tokens:
                # Prefill is complete: the engine now holds the prompt's pages.
                self.tree.insert(entry.prompt)
                self.tree.lock(entry.prompt)
                entry.locked = entry.prompt

    @staticmethod
    def _is_requeue(entry: _Entry, state: Any) -> bool:
        # Offloading re-queues the same state object (CPU offload) or a soft
        # reset copy that remembers the original prompt length.
        return state is entry.finished_state or bool(getattr(state, "_true_initial_tokens", 0))

    def _finalize(self, rid: str) -> None:
        entry = self._entries.pop(rid)
        self._finishing.remove(rid)
        self.ledger.finish(rid)
        if self.tree is not None and entry.final_tokens:
            self.tree.insert(entry.final_tokens)
        self._unlock(entry)

    def _finalize_finished(self) -> None:
        for rid in list(self._finishing):
            self._finalize(rid)
        self.tally.forget_finished(self._entries)

    def _unlock(self, entry: _Entry) -> None:
        if self.tree is not None and entry.locked is not None:
            self.tree.unlock(entry.locked)
        entry.locked = None

    def _check_mirror(self, rec: RequestRecord) -> None:
        predicted = rec.predicted_cached
        if self.tree is None or predicted is None or rec.engine_cached is None:
            return
        # The engine never matches the last prompt token and matches whole pages only.
        reachable = min(predicted, rec.prompt_len - 1)
        reachable -= reachable % self.page_size
        if rec.engine_cached < reachable:
            self.tree.evict(self.tree.evictable_size)
            self.stats.mirror_resyncs += 1


def _needs_tree(policy: str) -> bool:
    from fairq.sched import policy_info

    return policy_info(policy).needs_tree


def _never_raise(call: Callable[[], Any]) -> None:
    """Run ``call``; an error is logged, never raised inside the engine's step."""
    try:
        call()
    except Exception:  # noqa: BLE001 (never stop the engine)
        logger.warning("fairq: %r failed", call, exc_info=True)


def _persistence(ledger: Ledger, options: FairOptions) -> Persistence | None:
    """The saved state of ``ledger`` when ``state_file`` is set (None
    otherwise), loaded now (a fresh start saves once, so a bad path is
    reported at once). Never raises for the file's contents."""
    if options.state_file is None:
        return None
    p = Persistence(
        ledger, options.state_file, ledger.policy, options.state_interval_s, format=STATE_FORMAT
    )
    p.start()
    return p


def scheduler_class(
    policy: str,
    *,
    options: Mapping[str, Any] | FairOptions | None = None,
    client_of: Callable[[object], str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> type[FairqScheduler]:
    """Make a ``FairqScheduler`` subclass bound to ``policy`` (a local policy
    of :data:`fairq.sched.POLICY_INFO`: ``"fcfs"``, ``"lpm"``, ``"vtc"``,
    ``"dlpm"``...; a ``"fairq-"`` prefix is accepted) and its options.

    Args:
        options: what every engine takes (``tenants.make_options``): the
            policy's own (``quantum``, ``w_e``/``w_q``, ``w_in``/``w_out``),
            ``tenant_weights``, ``tenant`` (the resolver's options),
            ``state_file``/``state_interval_s``; or a built ``FairOptions``.
        client_of: request id -> client (default: the options' resolver,
            ``TenantResolver()``).
        weights: client -> weight (the older spelling of ``tenant_weights``).

    Raises:
        ValueError, TypeError: unknown policy or option, bad value (the
            message names the field, as every engine's).
    """
    opts = make_options(policy, options, client_of=client_of, weights=weights)
    key = opts.policy
    cls_name = POLICIES[key][0]
    attrs: dict[str, Any] = {
        "policy": key,
        "fair_options": opts,
        "policy_opts": dict(opts.policy_options),
        "client_of": staticmethod(opts.tenant),
        "client_weights": dict(opts.tenant_weights),
        "__doc__": f"fairq {cls_name} admission inside transformers continuous batching.",
        "__module__": __name__,
    }
    return type(f"Fairq{cls_name}Scheduler", (FairqScheduler,), attrs)


def register(
    policies: Iterable[str] | None = None,
    *,
    prefix: str = "fairq-",
    options: Mapping[str, Mapping[str, Any]] | None = None,
    client_of: Callable[[object], str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> dict[str, type[Scheduler]]:
    """Register fairq schedulers into transformers' ``SCHEDULER_MAPPING``.

    Registers ``f"{prefix}{policy}"`` for each policy (every policy of
    :data:`fairq.sched.POLICY_INFO` by default), each with
    ``options[policy]`` (see :func:`scheduler_class`), and
    ``"fifo-observed"`` (transformers' FIFO plus measurements).
    Re-registering replaces the previous classes. Returns ``name -> class``.

    Raises:
        ValueError: unknown policy, option or empty prefix.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
    names = list(FAIR_POLICIES) if policies is None else [check_policy(p) for p in policies]
    opts = dict(options or {})
    for key in opts:
        if check_policy(key) not in names:
            raise ValueError(f"options given for policy {key!r} that is not being registered")
    opts = {check_policy(k): v for k, v in opts.items()}
    registered: dict[str, type[Scheduler]] = {}
    for key in names:
        cls = scheduler_class(key, options=opts.get(key), client_of=client_of, weights=weights)
        registered[f"{prefix}{key}"] = cls
    registered["fifo-observed"] = ObservedFIFOScheduler
    SCHEDULER_MAPPING.update(registered)
    return registered


def scheduler_type(policy: str, *, prefix: str = "fairq-") -> str:
    """The ``scheduler_type`` name for ``policy``, registering defaults if it is
    not registered yet. ``"fifo"`` / ``"fifo-observed"`` pass through.

    Raises:
        ValueError: ``policy`` is not a fairq policy (transformers itself would
            silently fall back to FIFO).
    """
    if policy in ("fifo", "fifo-observed"):
        if policy not in SCHEDULER_MAPPING:
            register([], prefix=prefix)
        return policy
    name = f"{prefix}{check_policy(policy)}"
    if name not in SCHEDULER_MAPPING:
        register([check_policy(policy)], prefix=prefix)
    return name


def running_scheduler(manager: Any) -> Any:
    """The scheduler instance a ``ContinuousBatchingManager`` is running (or None)."""
    processor = getattr(manager, "batch_processor", None)
    return getattr(processor, "scheduler", None)


# Importing this module registers every policy with default options (and
# "fifo-observed"); call register() again to change options or clients.
register()
