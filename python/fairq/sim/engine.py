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
request's private tokens; eviction frees LRU unlocked leaves (at least 2 % of
the pool at a time, so evictions and the dispatcher's eviction reports stay
infrequent). Two models (``SimConfig.memory``, ``fairq simulate --memory``):

- ``estimate`` (default): output lengths are unknown to the engine, as in
  SGLang 0.5 (``PrefillAdder``, ``retract_decode``, ``NewTokenRatioTracker``).
  Every request carries ``max_new_tokens`` (``SimConfig.max_new_tokens``;
  default the workload's longest output). A request holds what is really
  allocated: its uncached prompt (plus, when readmitted, the output it had
  produced) from admission, one token per output token as it is produced,
  and its prompt moves into the tree when its prefill completes. Admission
  keeps room for the running requests' future output, ``new_token_ratio x
  min(max_new_tokens - produced, 4096)`` each, and admits a request only if
  its uncached prompt plus ``min(max_new_tokens - produced, 4096)`` (whole,
  as SGLang reserves for a request it adds) fits beside them (the ones that
  do not go back to waiting: a first admission refunded, ``requeue(...,
  refund=True)``; FCFS, VTC and LPM-SGLang stop at the first, LPM and DLPM
  skip it); with nothing running the first admission always stays. The
  ratio starts at 0.7, falls by (0.7 - 0.098) / 600 per decode step to 0.098
  (0.7 x 0.14), is reset to 0.7 when the worker goes idle, and after a
  retraction is set to ``min(1, (produced + 20 n) / (n max_new_tokens + 1))``
  over the ``n`` requests kept. Before each step, if the step's new tokens
  (one per decoding request and per prefill completing) do not fit with every
  unlocked prefix evicted, running requests are retracted in SGLang's order
  (the fewest output tokens first, then the longest prompt; one is always
  kept; a request still prefilling counts with its output so far, so it goes
  before the decoding ones, where SGLang retracts from its decode batch
  only): their tokens are freed (the cached prompt stays, unlocked), they
  return to the local scheduler with ``requeue(..., refund=False)`` (their
  place by arrival; charges kept, the next admission charges nothing:
  recomputation is not charged, ALGORITHMS.md section 9) and on readmission
  they prefill their uncached prompt and the output they had produced again,
  then continue (output already produced is not produced again; it is
  charged and counted once). The pool is never exceeded
  (``SimConfig.validate`` checks it every step); ``retractions`` and
  ``recomputed_tokens`` count the cost.
- ``oracle``: fairq's model before the estimate: a running request reserves
  its uncached prompt until prefill completes and its whole (known) output
  from admission; admission gets the room that is free or evictable, counting
  prompt tokens only, so the pool may overcommit; nothing is retracted.

Both reject up front a request needing more than half the pool (prompt plus
output), so a request running alone always fits and nothing deadlocks.

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
from typing import Any

import numpy as np

from fairq.dispatch import PLACEMENTS, PREFIX_AWARE, placement_kind, probe_placement
from fairq.sched import POLICY_INFO, VARIANTS, admit, make_scheduler
from fairq.sim.config import LOCAL_LABELS as LOCAL_LABELS
from fairq.sim.config import LOCAL_POLICIES as LOCAL_POLICIES
from fairq.sim.config import MEMORY_MODELS as MEMORY_MODELS
from fairq.sim.config import SimConfig as SimConfig
from fairq.sim.config import base_policy as base_policy
from fairq.sim.model import attn_pairs
from fairq.sim.workloads import SimRequest, Workload

# SGLang 0.5's defaults for the "estimate" memory model (sglang/srt/environ.py:
# SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS,
# SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096

#: Token id standing for a retracted request's output token when the workload
#: gives no output ids (outside every workload's vocabulary).
_FILLER_ID = 2**32 - 2


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
        "gen",
        "dec_start",
        "p0",
        "finish_sd",
        "charge_left",
        "resumed",
    )

    def __init__(
        self, req: SimRequest, cidx: int, cached: int, extend: int, now: float, gen: int = 0
    ) -> None:
        self.req = req
        self.cidx = cidx
        self.cached = cached
        self.extend = extend
        self.remaining = extend
        self.prefill_step = -1
        self.admit_time = now
        #: output tokens produced before this admission (a retracted request's,
        #: recomputed as part of its prompt); 0 on a first admission
        self.gen = gen
        #: the step count when its prefill completed, and the output tokens it
        #: had then (memory model "estimate": tokens produced = p0 + steps since)
        self.dec_start = -1
        self.p0 = 0
        self.finish_sd = -1
        #: prefill tokens of its first admission not charged as cost yet
        #: (recomputation after a retraction is not charged)
        self.charge_left = extend
        #: admitted again after a retraction
        self.resumed = False

    def produced(self, steps_done: int) -> int:
        """Output tokens produced so far (prefill not complete: ``gen``)."""
        if self.dec_start < 0:
            return self.gen
        return self.p0 + steps_done - self.dec_start


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
        info = POLICY_INFO[policy]
        # the simulator's knobs by option name (VTC's w_in/w_out play w_e/w_q's
        # roles); an option without one takes the policy's engine default
        knobs = {
            "quantum": cfg.user_quantum,
            "quantum_scale": cfg.quantum_scale,
            "strict_credit": cfg.strict_credit,
            "w_e": cfg.w_e,
            "w_q": cfg.w_q,
            "w_in": cfg.w_e,
            "w_out": cfg.w_q,
        }
        opts = {opt: knobs.get(opt, info.engine_defaults[opt]) for opt in info.options}
        self.sched = make_scheduler(cfg.policy, self.tree, **opts)
        # the policies that keep a per-client number charge output tokens
        self.lazy_charge = bool(info.state_fields)
        self.runs: dict[int, _Run] = {}
        self.prefill_q: deque[_Run] = deque()
        self.decoding: dict[int, _Run] = {}
        self.finish_heap: list[tuple[int, int]] = []  # (steps_done at finish, rid)
        self.dec_by_client = [0] * len(sim.clients)
        self.dec_rids: list[dict[int, None]] = [{} for _ in sim.clients]
        self.pending = [0] * len(sim.clients)  # output tokens not yet charged
        self.ctx_tokens = 0
        self.steps_done = 0
        #: private KV tokens of the running requests: "oracle": what admission
        #: reserved (uncached prompt until prefilled, whole output); "estimate":
        #: what is allocated (uncached prompt until prefilled, output so far)
        self.reserved = 0
        self.busy = False
        self.dirty = True
        self.plan: tuple[list[tuple[_Run, int]], int] | None = None
        # prompts inserted here, for eviction reports: rid -> [tokens, held]
        self.tracked: dict[int, list[Any]] = {}
        self.stats_steps = 0
        self.evict_reports = 0
        # memory model "estimate"
        self.estimate = cfg.memory == "estimate"
        self.validate = cfg.validate and self.estimate
        self.max_new = sim.max_new
        self.ratio = INIT_NEW_TOKEN_RATIO
        #: retracted requests waiting here: rid -> (output tokens produced,
        #: prefill tokens of its first admission not yet charged as cost)
        self.retracted: dict[int, tuple[int, int]] = {}
        variant = VARIANTS.get(cfg.policy.strip().lower())
        # policies whose admission stops at the first request that does not fit
        self.stop_at_unfit = info.stop_at_unfit or bool(variant and variant[1].get("stop_at_unfit"))
        self.retractions = 0
        self.recomputed = 0

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

    def _make_room(self, extra: int = 0) -> None:
        over = self.tree.size + self.reserved + extra - self.cap
        if over > 0:
            freed = self.tree.evict(max(over, self.cap // 50))
            if freed and self.sim.sync_evictions:
                self._report_evictions()

    def _check_pool(self, extra: int = 0) -> None:
        """Validation mode: the KV pool holds the tree, the running requests'
        tokens and ``extra`` tokens about to be allocated."""
        used = self.tree.size + self.reserved + extra
        if used > self.cap:
            raise AssertionError(
                f"worker {self.idx}: KV pool exceeded at step {self.steps_done}: "
                f"tree {self.tree.size} + running {self.reserved} + next {extra} "
                f"> capacity {self.cap}"
            )

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

    def _running_estimate(self) -> int:
        """SGLang's reservation for the running requests' future output:
        ``new_token_ratio x min(max_new_tokens - produced, CLIP)`` each."""
        sd = self.steps_done
        mx = self.max_new
        tot = 0
        for run in self.runs.values():
            left = mx - run.produced(sd)
            tot += left if left < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS
        return int(self.ratio * tot + 0.999999)

    @staticmethod
    def _tokens(req: SimRequest, gen: int) -> Any:
        """What a retracted request recomputes: its prompt and the ``gen``
        output tokens it produced (their ids, or filler ids outside the
        workloads' vocabulary when the workload has none)."""
        if gen == 0:
            return req.tokens
        out = req.output_ids
        tail = (
            out[:gen]
            if out is not None and len(out) >= gen
            else np.full(gen, _FILLER_ID, dtype=np.uint32)
        )
        return np.concatenate([req.tokens, tail])

    def _fit_estimate(self, adm: list[Any], est_running: int) -> list[Any]:
        """Memory model "estimate": keep the admissions whose uncached prompt
        plus ``min(max_new_tokens - produced, CLIP)`` (reserved whole, as
        SGLang's PrefillAdder does for a request it adds) fit the pool beside
        the running requests' reservations; the others go back to waiting
        (a first admission refunded, a retracted request's charges kept).
        With nothing running the first admission stays (progress). Admissions
        kept have their cached prefix locked."""
        tree = self.tree
        sim = self.sim
        avail = self.cap - self.reserved - est_running
        new_total = 0
        keep: list[Any] = []
        stopped = False
        for a in adm:
            req = sim.requests[a.request_id]
            gen = self.retracted.get(req.rid, (0, 0))[0]
            tree.lock(req.tokens)
            need = a.extend_len + min(self.max_new - gen, CLIP_MAX_NEW_TOKENS)
            ok = not stopped and (
                tree.size - tree.evictable_size + new_total + need <= avail
                or (not self.runs and not keep)
            )
            if ok:
                keep.append(a)
                new_total += need
                continue
            tree.unlock(req.tokens)
            resumed = req.rid in self.retracted
            self.sched.requeue(req.rid, self._tokens(req, gen), refund=not resumed)
            stopped = stopped or self.stop_at_unfit
        return keep

    def _retract(self) -> None:
        """The next step's tokens do not fit the pool even with every unlocked
        prefix evicted: retract running requests, as SGLang's
        ``retract_decode`` orders them (the fewest output tokens first, then
        the longest prompt), until they fit, keeping at least one; then set
        the new-token ratio from the requests kept."""
        self.flush_charges()
        sd = self.steps_done
        order = sorted(
            self.runs.values(),
            key=lambda r: (r.produced(sd), -r.req.input_len),
            reverse=True,
        )
        while len(order) > 1:
            if self._decode_fits(len(self.decoding) + self._chunks()[3]):
                break
            self._retract_one(order.pop())
        if not self._decode_fits(len(self.decoding) + self._chunks()[3]):
            raise RuntimeError(  # the up-front request check rules this out
                f"worker {self.idx}: one request alone does not fit the KV pool ({self.cap})"
            )
        produced = sum(r.produced(sd) for r in self.runs.values())
        n = len(self.runs)
        self.ratio = min(1.0, (produced + RETRACT_DECODE_STEPS * n) / (self.max_new * n + 1))

    def _retract_one(self, run: _Run) -> None:
        req = run.req
        rid = req.rid
        ci = run.cidx
        p = run.produced(self.steps_done)
        del self.runs[rid]
        if run.dec_start >= 0:
            del self.decoding[rid]  # its finish-heap entry goes stale
            self.dec_by_client[ci] -= 1
            del self.dec_rids[ci][rid]
            self.ctx_tokens -= req.input_len + p
            self.reserved -= p
        else:
            self.prefill_q.remove(run)
            self.reserved -= run.extend
        self.tree.unlock(req.tokens)  # the cached prompt stays, unlocked
        self.retracted[rid] = (p, run.charge_left)
        self.sched.requeue(rid, self._tokens(req, p), refund=False)
        self.sim.waiting[ci] += 1
        self.retractions += 1
        self.dirty = True

    def _decode_fits(self, need: int) -> bool:
        locked = self.tree.size - self.tree.evictable_size
        return locked + self.reserved + need <= self.cap

    # ---- one step ---------------------------------------------------------

    def _admit(self, now: float) -> None:
        sched = self.sched
        sched.set_time(now)  # the scheduler runs on simulated time
        if not self.dirty or len(sched) == 0:
            return
        room = self.model.max_running - len(self.runs)
        if room <= 0:
            self.dirty = False
            return
        self.flush_charges()
        locked = self.tree.size - self.tree.evictable_size
        mem = self.cap - locked - self.reserved
        est = self._running_estimate() if self.estimate else 0
        mem -= est
        pending = sum(r.remaining for r in self.prefill_q)
        budget = min(self.model.prefill_budget - pending, mem)
        # Nothing fits this step's prefill budget and nothing is prefilling:
        # the policy's first request is admitted whole (within free memory)
        # and prefilled in chunks over several steps.
        head = None if self.prefill_q else mem
        adm: list[Any] = admit(sched, budget, room, head_budget=head)
        if adm and self.estimate:
            adm = self._fit_estimate(adm, est)
        if not adm:
            self.dirty = False
            return
        sim = self.sim
        lock = self.tree.lock
        for a in adm:
            req = sim.requests[a.request_id]
            back = self.retracted.pop(req.rid, None)
            run = _Run(req, sim.cidx[req.client], a.cached_len, a.extend_len, now)
            if back is None:
                run.charge_left = a.extend_len
            else:
                run.gen, run.charge_left = back
                run.resumed = True
                self.recomputed += a.extend_len
            if not self.estimate:
                lock(req.tokens)
                self.reserved += a.extend_len + req.output_len
            else:
                self.reserved += a.extend_len
            self.runs[req.rid] = run
            self.prefill_q.append(run)
            sim.on_admit(run, self.idx, now)
        self._make_room()
        if self.validate:
            self._check_pool()

    def _chunks(self) -> tuple[list[tuple[_Run, int]], int, int, int]:
        """This step's prefill chunks: (chunks, tokens, attention pairs, how
        many prefills complete)."""
        budget = self.model.prefill_budget
        chunks: list[tuple[_Run, int]] = []
        ptoks = 0
        pairs = 0
        done = 0
        with_attn = self.model.c_attn > 0
        for run in self.prefill_q:
            if budget <= 0:
                break
            take = run.remaining if run.remaining < budget else budget
            chunks.append((run, take))
            budget -= take
            ptoks += take
            if take == run.remaining:
                done += 1
            if with_attn:
                pairs += attn_pairs(run.cached + run.extend - run.remaining, take)
        return chunks, ptoks, pairs, done

    def start_step(self, now: float) -> float | None:
        """Plan a step starting at ``now``; its duration, or None if idle."""
        self._admit(now)
        chunks, ptoks, pairs, done = self._chunks()
        n_dec = len(self.decoding)
        if not chunks and n_dec == 0:
            self.busy = False
            self.plan = None
            self.ratio = INIT_NEW_TOKEN_RATIO  # SGLang resets it when idle
            return None
        if self.estimate:
            # each decode (and each completing prefill) allocates one token
            if not self._decode_fits(n_dec + done):
                self._retract()
                chunks, ptoks, pairs, done = self._chunks()
                n_dec = len(self.decoding)
            elif n_dec:
                self.ratio = max(self.ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
            self._make_room(n_dec + done)
            if self.validate:
                self._check_pool(n_dec + done)
        # A request whose prompt is fully cached still runs one (cheap) step.
        self.plan = (chunks, n_dec)
        self.busy = True
        return self.model.step_time(ptoks, n_dec, self.ctx_tokens, pairs)

    def end_step(self, now: float) -> None:
        """Apply the planned step's effects at time ``now``."""
        self.sched.set_time(now)
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
            if self.estimate:
                self.reserved += n_dec
            pending = self.pending
            for ci, n in enumerate(self.dec_by_client):
                if n:
                    sim.service[ci] += 2 * n
                    sim.actual[ci] += sim.cfg.w_q * n
                    pending[ci] += n
        fin = self.finish_heap
        while fin and fin[0][0] <= sd:
            at, rid = heapq.heappop(fin)
            run = self.decoding.get(rid)
            if run is None or run.finish_sd != at:
                continue  # retracted since
            del self.decoding[rid]
            self._finish(run, now, decoding=True)
        # prefill chunks
        tree = self.tree
        w_e = sim.cfg.w_e
        for run, take in chunks:
            run.remaining -= take
            charge = take if take < run.charge_left else run.charge_left
            if charge:
                run.charge_left -= charge
                sim.actual[run.cidx] += w_e * charge
            if run.remaining > 0:
                continue
            self.prefill_q.popleft()
            req = run.req
            tree.unlock(req.tokens)
            tree.insert(req.tokens)
            tree.lock(req.tokens)
            p0 = run.gen + 1
            if self.estimate:
                self.reserved += p0 - run.extend
            else:
                self.reserved -= run.extend
            if sim.sync_evictions:
                self.tracked[req.rid] = [req.tokens, req.input_len]
            run.prefill_step = sd - 1
            first = req.rid not in sim.first_token
            sim.service[run.cidx] += (req.input_len + 2) if first else 2
            sim.actual[run.cidx] += sim.cfg.w_q
            if first:
                sim.on_first_token(req, now)
            self.pending[run.cidx] += 1
            if p0 >= req.output_len:
                self._finish(run, now, decoding=False)
            else:
                run.dec_start = sd
                run.p0 = p0
                run.finish_sd = sd + req.output_len - p0
                self.decoding[req.rid] = run
                heapq.heappush(fin, (run.finish_sd, req.rid))
                self.dec_by_client[run.cidx] += 1
                self.dec_rids[run.cidx][req.rid] = None
                self.ctx_tokens += req.input_len + p0
        self._make_room()
        if self.validate:
            self._check_pool()

    def _finish(self, run: _Run, now: float, decoding: bool) -> None:
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
        if decoding:
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
        longest = max((r.output_len for r in workload.requests), default=1)
        self.max_new = cfg.max_new_tokens if cfg.max_new_tokens is not None else longest
        if self.max_new < longest:
            rid = next(r.rid for r in workload.requests if r.output_len > self.max_new)
            raise ValueError(
                f"max_new_tokens ({self.max_new}) is below request {rid}'s output length "
                f"({self.requests[rid].output_len}); the simulator does not cut outputs"
            )
        self.dispatcher: Any = None
        if cfg.workers > 1:
            name = cfg.dispatcher or "rr"

            def make() -> Any:
                return make_dispatcher(
                    name,
                    cfg.workers,
                    worker_quantum=cfg.worker_quantum,
                    w_e=cfg.w_e,
                    w_q=cfg.w_q,
                    placement_slack=cfg.placement_slack,
                    match_threshold=cfg.match_threshold if name == "d2lpm" else None,
                    spread_by_credit=cfg.spread_by_credit,
                )

            if cfg.fleet:
                from fairq.sim.routers import RouterFleet

                self.dispatcher = RouterFleet(
                    make,
                    cfg.routers,
                    cfg.view_staleness,
                    cfg.router_assign,
                    lambda: self.now,
                    hub_placement=cfg.hub_placement,
                    hub_placement_slack=cfg.hub_placement_slack,
                )
            else:
                self.dispatcher = make()
        self.sync_evictions = self.dispatcher is not None and self.dispatcher.policy in PREFIX_AWARE
        #: dispatches by where they went against the prompt's longest held
        #: prefix (:func:`fairq.dispatch.placement_kind`; the prefix-aware
        #: dispatchers only, a fleet counting each router's own view)
        self.placements: dict[str, int] | None = None
        if self.sync_evictions:
            self.placements = getattr(self.dispatcher, "placements", None)
            if self.placements is None:
                self.placements = dict.fromkeys(PLACEMENTS, 0)
                self._probe_workers = range(cfg.workers)
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
        if not run.resumed:  # the cache hit counts first admissions
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
        d = self.dispatcher
        if d is None:
            w = 0
        elif self.placements is None or hasattr(d, "placements"):
            w = d.dispatch(rid, req.client, req.tokens)
        else:
            probe = probe_placement(d, req.client, req.tokens, self._probe_workers)
            w = d.dispatch(rid, req.client, req.tokens)
            self.placements[placement_kind(probe, w)] += 1
        self.worker_of[rid] = w
        worker = self.workers[w]
        worker.sched.set_time(now)
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
    def retractions(self) -> int:
        """Running requests retracted (memory model "estimate")."""
        return sum(w.retractions for w in self.workers)

    @property
    def recomputed_tokens(self) -> int:
        """Tokens prefilled again when retracted requests were readmitted
        (uncached prompt plus the output they had produced)."""
        return sum(w.recomputed for w in self.workers)

    @property
    def complete(self) -> bool:
        return len(self.finish) == len(self.requests)


def simulate(workload: Workload, cfg: SimConfig) -> Simulator:
    """Run ``workload`` under ``cfg`` and return the finished simulator."""
    return Simulator(workload, cfg).run()
