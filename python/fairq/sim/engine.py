"""Discrete-event simulation of continuous-batching engine workers.

Per worker: a :class:`fairq.RadixTree` prefix cache (capacity enforced by
the worker: LRU eviction of unlocked prefixes), a local scheduler (FCFS, LPM,
VTC or DLPM, from :mod:`fairq.sched`), chunked prefill under a token budget,
one decode token per running request per step, and the step time of
:class:`~fairq.sim.model.StepModel`. Across workers, a dispatcher from
:mod:`fairq.dispatch` routes each arriving request.

Event loop: a heap of (time, seq, kind) events: request arrivals (dependent
calls arrive when their parents finish) and step ends. A busy worker runs
steps back to back; an idle one starts a step when a request arrives.

A step is *planned* when it starts (admissions, which prefill chunks and
which decodes it runs, hence its duration) and *applied* when it ends (cache
inserts, first tokens, finishes, service accounting, dispatcher reports).

Memory: a worker's KV pool of ``kv_capacity`` tokens holds the radix tree
(cached prefixes; locked while a running request uses them) plus each running
request's private reservation (its uncached prompt tokens until prefill
completes, and its whole output). Admission gets the room that is free or
evictable; eviction frees LRU unlocked leaves (at least 2 % of the pool at a
time, so evictions and the dispatcher's eviction reports stay infrequent).

Output charging for the fair schedulers is lazy: ``charge_output`` runs for
the tokens produced since the last charge right before the scheduler's state
matters (``add``, ``schedule``, ``finish``), which gives the same decisions as
charging every step with far fewer calls into Rust.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fairq.dispatch import LABELS
from fairq.sched import POLICIES, POLICY_OPTIONS, VARIANTS, admit, make_scheduler, policy_name
from fairq.sim.model import StepModel, attn_pairs
from fairq.sim.workloads import SimRequest, Workload

#: Local policies the simulator runs: fairq's four and the named engine
#: variants (``lpm-sglang``: LPM as SGLang runs it).
LOCAL_POLICIES = (*POLICIES, *VARIANTS)

#: How a local policy reads in results.
LOCAL_LABELS = {"lpm-sglang": "LPM-SGLang"}


def base_policy(name: str) -> str:
    """The fairq policy behind a :data:`LOCAL_POLICIES` name (``lpm-sglang``
    -> ``lpm``); ValueError naming the known ones for anything else."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in VARIANTS:
        return VARIANTS[key][0]
    try:
        return policy_name(name)
    except ValueError:
        raise ValueError(
            f"policy must be one of {', '.join(LOCAL_POLICIES)}; got {name!r}"
        ) from None


class _Run:
    """A request admitted on a worker."""

    __slots__ = (
        "req",
        "cidx",
        "cached",
        "extend",
        "remaining",
        "prefill_step",
        "admit_time",
    )

    def __init__(self, req: SimRequest, cidx: int, cached: int, extend: int, now: float) -> None:
        self.req = req
        self.cidx = cidx
        self.cached = cached
        self.extend = extend
        self.remaining = extend
        self.prefill_step = -1
        self.admit_time = now


@dataclass
class SimConfig:
    """What to simulate: workers, local policy, dispatcher and knobs."""

    workers: int = 1
    policy: str = "dlpm"
    dispatcher: str | None = None  # None with 1 worker; else a fairq.dispatch name
    user_quantum: float = 2000.0  # DLPM's Q_u
    worker_quantum: float = 20000.0  # D2LPM's Q_w
    w_e: float = 1.0
    w_q: float = 2.0
    model: StepModel = field(default_factory=StepModel)
    max_time: float = 36_000.0  # simulated seconds before giving up

    def label(self) -> str:
        local = LOCAL_LABELS.get(self.policy, self.policy.upper())
        if self.workers == 1 or not self.dispatcher:
            return local
        return f"{LABELS.get(self.dispatcher, self.dispatcher)}+{local}"


class Worker:
    """One engine replica."""

    def __init__(self, idx: int, sim: Simulator) -> None:
        import fairq

        self.idx = idx
        self.sim = sim
        cfg = sim.cfg
        self.model = cfg.model
        self.cap = int(cfg.model.kv_capacity)
        self.tree = fairq.RadixTree()
        policy = base_policy(cfg.policy)
        # the simulator's knobs by option name (VTC's w_in/w_out play w_e/w_q's roles)
        knobs = {
            "quantum": cfg.user_quantum,
            "w_e": cfg.w_e,
            "w_q": cfg.w_q,
            "w_in": cfg.w_e,
            "w_out": cfg.w_q,
        }
        self.sched = make_scheduler(
            cfg.policy, self.tree, **{opt: knobs[opt] for opt in POLICY_OPTIONS[policy]}
        )
        self.lazy_charge = policy in ("vtc", "dlpm")
        self.runs: dict[int, _Run] = {}
        self.prefill_q: deque[_Run] = deque()
        self.decoding: dict[int, _Run] = {}
        self.finish_heap: list[tuple[int, int]] = []  # (steps_done at finish, rid)
        self.dec_by_client = [0] * len(sim.clients)
        self.dec_rids: list[dict[int, None]] = [{} for _ in sim.clients]
        self.pending = [0] * len(sim.clients)  # output tokens not yet charged
        self.ctx_tokens = 0
        self.steps_done = 0
        self.reserved = 0
        self.busy = False
        self.dirty = True
        self.plan: tuple[list[tuple[_Run, int]], int] | None = None
        # prompts inserted here, for eviction reports: rid -> [tokens, held]
        self.tracked: dict[int, list[Any]] = {}
        self.stats_steps = 0
        self.evict_reports = 0

    # ---- scheduler bookkeeping ---------------------------------------------

    def flush_charges(self) -> None:
        """Charge the output tokens produced since the last charge. Charging
        is per client in every policy, so one call per client with a running
        request suffices (any of its running requests carries the charge)."""
        if not self.lazy_charge:
            return
        pending = self.pending
        for ci, n in enumerate(pending):
            if n:
                self.sched.charge_output(next(iter(self.dec_rids[ci])), n)
                pending[ci] = 0

    def add(self, req: SimRequest) -> None:
        self.flush_charges()
        self.sched.add(req.rid, req.client, req.tokens)
        self.dirty = True

    # ---- memory -----------------------------------------------------------

    def _make_room(self) -> None:
        over = self.tree.size + self.reserved - self.cap
        if over > 0:
            freed = self.tree.evict(max(over, self.cap // 50))
            if freed and self.sim.sync_evictions:
                self._report_evictions()

    def _report_evictions(self) -> None:
        """Tell the dispatcher which prompts this worker lost.

        The tree evicts least-recently-used leaves, and ``tracked`` holds the
        prompts inserted here in insertion order (oldest first), so the scan
        starts at the oldest and stops after 32 consecutive intact prompts.
        A truncated prompt is reported (``kept`` = what is still cached) and
        no longer tracked; the part still cached is shared with newer
        prompts, whose later eviction reports cover it.
        """
        disp = self.sim.dispatcher
        match = self.tree.match
        gone = []
        intact = 0
        for rid, entry in self.tracked.items():
            m = match(entry[0])
            if m < entry[1]:
                disp.on_evict(self.idx, entry[0], m)
                self.evict_reports += 1
                gone.append(rid)
                intact = 0
            else:
                intact += 1
                if intact >= 32:
                    break
        for rid in gone:
            del self.tracked[rid]

    # ---- one step ---------------------------------------------------------

    def _admit(self, now: float) -> None:
        sched = self.sched
        if not self.dirty or len(sched) == 0:
            return
        room = self.model.max_running - len(self.runs)
        if room <= 0:
            self.dirty = False
            return
        self.flush_charges()
        locked = self.tree.size - self.tree.evictable_size
        mem = self.cap - locked - self.reserved
        pending = sum(r.remaining for r in self.prefill_q)
        budget = min(self.model.prefill_budget - pending, mem)
        # Nothing fits this step's prefill budget and nothing is prefilling:
        # the policy's first request is admitted whole (within free memory)
        # and prefilled in chunks over several steps.
        adm: list[Any] = admit(sched, budget, room, head_budget=None if self.prefill_q else mem)
        if not adm:
            self.dirty = False
            return
        sim = self.sim
        lock = self.tree.lock
        for a in adm:
            req = sim.requests[a.request_id]
            run = _Run(req, sim.cidx[req.client], a.cached_len, a.extend_len, now)
            lock(req.tokens)
            self.runs[req.rid] = run
            self.prefill_q.append(run)
            self.reserved += a.extend_len + req.output_len
            sim.on_admit(run, self.idx, now)
        self._make_room()

    def start_step(self, now: float) -> float | None:
        """Plan a step starting at ``now``; its duration, or None if idle."""
        self._admit(now)
        budget = self.model.prefill_budget
        chunks: list[tuple[_Run, int]] = []
        ptoks = 0
        pairs = 0
        with_attn = self.model.c_attn > 0
        for run in self.prefill_q:
            if budget <= 0:
                break
            take = run.remaining if run.remaining < budget else budget
            chunks.append((run, take))
            budget -= take
            ptoks += take
            if with_attn:
                pairs += attn_pairs(run.cached + run.extend - run.remaining, take)
        n_dec = len(self.decoding)
        if not chunks and n_dec == 0:
            self.busy = False
            self.plan = None
            return None
        # A request whose prompt is fully cached still runs one (cheap) step.
        self.plan = (chunks, n_dec)
        self.busy = True
        return self.model.step_time(ptoks, n_dec, self.ctx_tokens, pairs)

    def end_step(self, now: float) -> None:
        """Apply the planned step's effects at time ``now``."""
        assert self.plan is not None
        chunks, n_dec = self.plan
        self.plan = None
        sim = self.sim
        self.steps_done += 1
        self.stats_steps += 1
        sd = self.steps_done
        # decode: one token per decoding request
        if n_dec:
            self.ctx_tokens += n_dec
            pending = self.pending
            for ci, n in enumerate(self.dec_by_client):
                if n:
                    sim.service[ci] += 2 * n
                    sim.actual[ci] += sim.cfg.w_q * n
                    pending[ci] += n
        fin = self.finish_heap
        while fin and fin[0][0] <= sd:
            _, rid = heapq.heappop(fin)
            self._finish(self.decoding.pop(rid), now)
        # prefill chunks
        tree = self.tree
        for run, take in chunks:
            run.remaining -= take
            sim.actual[run.cidx] += sim.cfg.w_e * take
            if run.remaining > 0:
                continue
            self.prefill_q.popleft()
            req = run.req
            tree.unlock(req.tokens)
            tree.insert(req.tokens)
            tree.lock(req.tokens)
            self.reserved -= run.extend
            if sim.sync_evictions:
                self.tracked[req.rid] = [req.tokens, req.input_len]
            run.prefill_step = sd - 1
            sim.service[run.cidx] += req.input_len + 2
            sim.actual[run.cidx] += sim.cfg.w_q
            sim.on_first_token(req, now)
            self.pending[run.cidx] += 1
            if req.output_len <= 1:
                self._finish(run, now)
            else:
                self.decoding[req.rid] = run
                heapq.heappush(fin, (run.prefill_step + req.output_len, req.rid))
                self.dec_by_client[run.cidx] += 1
                self.dec_rids[run.cidx][req.rid] = None
                self.ctx_tokens += req.input_len + 1
        self._make_room()

    def _finish(self, run: _Run, now: float) -> None:
        req = run.req
        sched = self.sched
        ci = run.cidx
        if self.lazy_charge and self.pending[ci]:
            sched.charge_output(req.rid, self.pending[ci])
            self.pending[ci] = 0
        sched.finish(req.rid)
        del self.runs[req.rid]
        tree = self.tree
        tree.unlock(req.tokens)
        if req.output_ids is not None:
            tree.insert(np.concatenate([req.tokens, req.output_ids]))
        self.reserved -= req.output_len
        if run.prefill_step >= 0 and req.output_len > 1:
            self.dec_by_client[ci] -= 1
            del self.dec_rids[ci][req.rid]
            self.ctx_tokens -= req.input_len + req.output_len
        self.dirty = True
        self.sim.on_finish(req, self.idx, now)


class Simulator:
    """Runs one workload under one :class:`SimConfig`."""

    def __init__(self, workload: Workload, cfg: SimConfig) -> None:
        from fairq.dispatch import make_dispatcher

        self.workload = workload
        self.cfg = cfg
        if cfg.workers < 1:
            raise ValueError(f"workers must be >= 1, got {cfg.workers}")
        self.clients = list(workload.clients)
        self.cidx = {c: i for i, c in enumerate(self.clients)}
        self.requests = {r.rid: r for r in workload.requests}
        if len(self.requests) != len(workload.requests):
            raise ValueError("workload request ids must be unique")
        cap = cfg.model.kv_capacity
        too_big = [r.rid for r in workload.requests if r.input_len + r.output_len > cap // 2]
        if too_big:
            raise ValueError(
                f"request {too_big[0]} needs more than half the KV capacity ({cap} tokens); "
                "raise --model kv_capacity=..."
            )
        self.dispatcher: Any = None
        if cfg.workers > 1:
            name = cfg.dispatcher or "rr"
            self.dispatcher = make_dispatcher(
                name, cfg.workers, worker_quantum=cfg.worker_quantum, w_e=cfg.w_e, w_q=cfg.w_q
            )
        self.sync_evictions = self.dispatcher is not None and self.dispatcher.policy in (
            "D2LPM",
            "PrefixAffinity",
        )
        self.workers = [Worker(i, self) for i in range(cfg.workers)]
        n = len(self.clients)
        self.service = [0.0] * n  # client view: input + 2 * output tokens
        self.actual = [0.0] * n  # system cost: w_e * extend + w_q * output
        self.in_system = [0] * n
        self.waiting = [0] * n  # arrived, not yet admitted: "backlogged" when > 0
        # dependency bookkeeping
        self.children: dict[int, list[int]] = {}
        self.pending_deps: dict[int, int] = {}
        for r in workload.requests:
            if r.after:
                self.pending_deps[r.rid] = len(r.after)
                for p in r.after:
                    self.children.setdefault(p, []).append(r.rid)
        # results
        self.arrival: dict[int, float] = {}
        self.first_token: dict[int, float] = {}
        self.finish: dict[int, float] = {}
        self.worker_of: dict[int, int] = {}
        self.cached_tokens = 0
        self.input_tokens = 0
        self.samples_t: list[float] = []
        self.samples_service: list[list[float]] = []
        self.samples_actual: list[list[float]] = []
        self.samples_backlog: list[tuple[bool, ...]] = []
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self.now = 0.0
        self.wall_s = 0.0

    # ---- events -----------------------------------------------------------

    def _push(self, t: float, kind: int, payload: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, payload))

    def on_admit(self, run: _Run, worker: int, now: float) -> None:
        self.waiting[run.cidx] -= 1
        self.cached_tokens += run.cached
        self.input_tokens += run.req.input_len

    def on_first_token(self, req: SimRequest, now: float) -> None:
        self.first_token[req.rid] = now

    def on_finish(self, req: SimRequest, worker: int, now: float) -> None:
        self.finish[req.rid] = now
        self.in_system[self.cidx[req.client]] -= 1
        if self.dispatcher is not None:
            self.dispatcher.on_finish(req.rid, req.output_len)
        for child in self.children.get(req.rid, ()):
            left = self.pending_deps[child] - 1
            self.pending_deps[child] = left
            if left == 0:
                self._push(now + self.requests[child].arrival, 0, child)

    def _arrive(self, rid: int, now: float) -> None:
        req = self.requests[rid]
        self.arrival[rid] = now
        ci = self.cidx[req.client]
        self.in_system[ci] += 1
        self.waiting[ci] += 1
        w = 0 if self.dispatcher is None else self.dispatcher.dispatch(rid, req.client, req.tokens)
        self.worker_of[rid] = w
        worker = self.workers[w]
        worker.add(req)
        if not worker.busy:
            self._start(worker, now)

    def _start(self, worker: Worker, now: float) -> None:
        dur = worker.start_step(now)
        if dur is not None:
            self._push(now + dur, 1, worker.idx)

    def _sample(self, now: float) -> None:
        self.samples_t.append(now)
        self.samples_service.append(self.service.copy())
        self.samples_actual.append(self.actual.copy())
        self.samples_backlog.append(tuple(n > 0 for n in self.waiting))

    def run(self, progress: Callable[[float], None] | None = None) -> Simulator:
        """Simulate until every request finished (or ``max_time``)."""
        t0 = time.perf_counter()
        for r in self.workload.requests:
            if not r.after:
                self._push(r.arrival, 0, r.rid)
        self._sample(0.0)
        events = self._events
        last_report = 0.0
        while events:
            now, _, kind, payload = heapq.heappop(events)
            if now > self.cfg.max_time:
                break
            self.now = now
            if kind == 0:
                self._arrive(payload, now)
            else:
                w = self.workers[payload]
                w.end_step(now)
                self._sample(now)
                self._start(w, now)
            if progress is not None and now - last_report > 5.0:
                progress(now)
                last_report = now
        self.wall_s = time.perf_counter() - t0
        return self

    @property
    def steps(self) -> int:
        return sum(w.stats_steps for w in self.workers)

    @property
    def complete(self) -> bool:
        return len(self.finish) == len(self.requests)


def simulate(workload: Workload, cfg: SimConfig) -> Simulator:
    """Run ``workload`` under ``cfg`` and return the finished simulator."""
    return Simulator(workload, cfg).run()
