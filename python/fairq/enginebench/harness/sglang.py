"""Drive SGLang's real scheduling objects step by step, without a model.

:class:`Engine` holds SGLang's own ``RadixCache`` (over a real CPU
``TokenToKVPoolAllocator``), ``SchedulePolicy`` (SGLang's, or fairq's through
:func:`fairq.sglang._install.build_policy`), ``PrefillAdder`` and ``Req``
objects, and runs the prefill step the way ``Scheduler._get_new_batch_prefill_raw``
(SGLang 0.5.23) does: ``calc_priority`` on the waiting list, the chunked
request first (``add_chunked_req``), then ``init_next_round_input`` +
``add_one_req`` for each waiting request until the adder's budget is spent
or a request does not fit, and the taken ones leave the list. The model is
the test's: a prefill chunk puts the computed tokens into the cache (as
``cache_unfinished_req`` / ``cache_finished_req`` do), each decode step
appends one output token per running request (given by the test), a request
finishes after its ``max_new_tokens``, and :meth:`Engine.retract` does what
SGLang's retraction does (``reset_for_retract``, back to the waiting list).

Not covered: SGLang's ``Scheduler`` itself (it needs a model runner, and
its CUDA-only kernels, to be built), the overlap scheduler, mixed chunked
prefill, LoRA slots, hierarchical cache, grammar and disaggregation paths.
"""

from __future__ import annotations

import itertools
import random
from array import array
from dataclasses import dataclass, field
from typing import Any

from fairq.sglang.queue import TrackedAttribute

__all__ = [
    "Engine",
    "StepResult",
    "contention",
    "greedy_workload",
    "grouped_workload",
    "max_gap_while_backlogged",
    "publish_server_args",
]

_published = False


def publish_server_args() -> None:
    """SGLang's adder reads process-wide settings: publish CPU defaults once."""
    global _published
    if _published:
        return
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", device="cpu"))
    _published = True


@dataclass
class StepResult:
    """What one :meth:`Engine.step` did."""

    #: (rid, prefix_len, extend_end) of each admission or chunk, in order
    admitted: list[tuple[str, int, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


def tenant_of(rid: str) -> str:
    """The harness's tenant of a request id: the text before ``":"``."""
    return rid.partition(":")[0]


class Engine:
    """SGLang's scheduling objects and a simulated model (see the module doc).

    As in a scheduler running a fair policy under :func:`fairq.sglang.install`,
    the waiting list of a fair engine is a :class:`fairq.sglang.queue.WaitingList`
    and assignments to ``waiting`` are journaled; arrivals and retractions
    ``append`` (``Scheduler._add_request_to_queue``), an abort of a waiting
    request is popped (``Scheduler.abort_request``), the taken requests
    leave by a filtered copy (``_get_new_batch_prefill_raw``).

    ``policy``: SGLang's own name (``"lpm"``, ``"fcfs"``) or fairq's
    (``"fairq-dlpm"``, ...; ``options`` as :func:`fairq.sglang.install`'s).
    ``kv_tokens``: the KV pool's size; ``max_prefill_tokens`` and
    ``chunk_size``: the adder's per-step limits.
    """

    def __init__(
        self,
        policy: str,
        *,
        kv_tokens: int = 1 << 16,
        max_prefill_tokens: int = 4096,
        chunk_size: int | None = 2048,
        page_size: int = 1,
        options: dict[str, Any] | None = None,
    ) -> None:
        import torch
        from sglang.srt.managers import schedule_policy as sp
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.radix_cache import RadixCache

        publish_server_args()
        self._sp = sp
        self.alloc = TokenToKVPoolAllocator(kv_tokens, torch.float16, "cpu", None, False)
        self.cache = RadixCache.create_simulated(mock_allocator=self.alloc, page_size=page_size)
        self.max_prefill_tokens = max_prefill_tokens
        self.chunk_size = chunk_size
        self.fair = policy.strip().lower().startswith("fairq-")
        if self.fair:
            from fairq.sglang._install import build_policy
            from fairq.sglang.tenants import make_options

            self.policy, make_adder = build_policy(self, make_options(policy, options or {}))
            cls = make_adder(sp.PrefillAdder, sp.AddReqResult)
            self.adder_cls = type(cls.__name__, (cls,), {"fairq": self.policy.fairq})
        else:
            self.policy = sp.SchedulePolicy(policy, self.cache, False, False, True)
            self.adder_cls = sp.PrefillAdder
        self.waiting = []
        if self.fair:
            TrackedAttribute.track(self, "waiting")
        self.running: list[Any] = []
        self.chunked: Any = None
        self._ids = itertools.count()
        #: the engine's truth: prompt positions computed the first time
        #: (high-water mark) per request; prefix hit at first admission
        self.high: dict[str, int] = {}
        self.first_prefix: dict[str, int] = {}
        self.prompt_len: dict[str, int] = {}
        #: per tenant (:func:`tenant_of`): prompt positions computed the
        #: first time, output tokens
        self.prompt_served: dict[str, int] = {}
        self.output_served: dict[str, int] = {}
        #: per tenant: whole prompts of the requests admitted (VTC's measure)
        self.prompt_admitted: dict[str, int] = {}
        #: per step: ({tenant: prompt + w_q * output served}, {tenant: waiting})
        self.timeline: list[tuple[dict[str, float], dict[str, int]]] = []
        #: per step: {tenant: whole admitted prompts + w_q * output}
        self.vtc_timeline: list[dict[str, float]] = []
        self.w_q = 2.0
        #: admissions per request id (not chunk continuations)
        self.admissions: dict[str, int] = {}

    waiting = TrackedAttribute("waiting")

    # the attributes build_policy reads from a Scheduler
    @property
    def tree_cache(self) -> Any:
        return self.cache

    @property
    def fairq(self) -> Any:
        """fairq's :class:`~fairq.sglang.fair.FairState` (fair policies only)."""
        return self.policy.fairq

    # -- requests ----------------------------------------------------------
    def request(
        self,
        tokens: list[int],
        max_new_tokens: int = 4,
        *,
        rid: str | None = None,
        **attrs: Any,
    ) -> Any:
        """A real SGLang ``Req`` added to the waiting list (``attrs``: Req's
        keywords such as ``extra_key``, ``routing_key``, ``lora_id``)."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens)
        params.normalize(None)
        req = Req(rid or f"r{next(self._ids)}", "", array("q", tokens), params, **attrs)
        self.waiting.append(req)
        t = tenant_of(req.rid)
        self.prompt_served.setdefault(t, 0)
        self.output_served.setdefault(t, 0)
        self.prompt_admitted.setdefault(t, 0)
        return req

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found in the cache at each request's first admission
        over all prompt tokens of the admitted requests."""
        total = sum(self.prompt_len[r] for r in self.first_prefix)
        hit = sum(min(p, self.prompt_len[r]) for r, p in self.first_prefix.items())
        return hit / total if total else 0.0

    def abort(self, req: Any) -> None:
        """Abort ``req``: a waiting one leaves the list; a running one finishes."""
        from sglang.srt.managers.schedule_batch import FINISH_ABORT

        i = next((i for i, r in enumerate(self.waiting) if r is req), None)
        if i is not None:
            self.waiting.pop(i)
            req.finished_reason = FINISH_ABORT("aborted")
        else:
            req.to_finish = FINISH_ABORT("aborted")

    def retract(self, req: Any) -> None:
        """SGLang's retraction of a running request: its KV is released, it
        is reset and goes back to the waiting list."""
        self.running = [r for r in self.running if r is not req]
        self._release(req)
        req.reset_for_retract()
        self.waiting.append(req)

    # -- the step ------------------------------------------------------------
    def step(self, output_tokens: dict[str, int] | None = None) -> StepResult:
        """One prefill step (as SGLang's scheduler) then one decode step:
        every running request appends one token (``output_tokens[rid]``, or
        its output count) and finishes after ``max_new_tokens``."""
        sp = self._sp
        out = StepResult()
        # decode step of the requests running before this prefill
        for req in list(self.running):
            if req.to_finish is not None:
                req.finished_reason, req.to_finish = req.to_finish, None
            else:
                tok = (output_tokens or {}).get(req.rid, len(req.output_ids))
                req.output_ids.append(tok)
                self.output_served[tenant_of(req.rid)] += 1
                if len(req.output_ids) >= req.sampling_params.max_new_tokens:
                    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

                    req.finished_reason = FINISH_LENGTH(len(req.output_ids))
            if req.finished():
                self.running.remove(req)
                self._release(req)
                out.finished.append(req.rid)
        if not self.waiting and self.chunked is None:
            self._record()
            return out
        self.policy.calc_priority(self.waiting, None)
        adder = self.adder_cls(
            self.cache.page_size,
            self.cache,
            self.alloc,
            None,
            0.5,
            self.max_prefill_tokens,
            self.chunk_size,
        )
        cont = self.chunked
        if cont is not None:
            cont.init_next_round_input()
            self.chunked = adder.add_chunked_req(cont)
        for req in self.waiting:
            if adder.budget_state() == sp.AddReqResult.OTHER:
                break
            req.init_next_round_input(self.cache)
            res = adder.add_one_req(
                req, has_chunked_req=self.chunked is not None, truncation_align_size=None
            )
            if res != sp.AddReqResult.CONTINUE:
                break
        for req in adder.can_run_list:
            if req is not cont:
                self.admissions[req.rid] = self.admissions.get(req.rid, 0) + 1
        taken = adder.can_run_list
        ids = {id(r) for r in taken}
        self.waiting = [r for r in self.waiting if id(r) not in ids]
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        for req in taken:
            rid = req.rid
            start, end = int(req.prefix_len), int(req.extend_end)
            out.admitted.append((rid, start, end))
            prompt = len(req.origin_input_ids)
            high = self.high.get(rid, 0)
            new = max(0, min(end, prompt) - max(start, high))
            self.prompt_served[tenant_of(rid)] += new
            self.high[rid] = max(high, min(end, prompt))
            if rid not in self.first_prefix:
                self.first_prefix[rid] = start
                self.prompt_len[rid] = prompt
                self.prompt_admitted[tenant_of(rid)] += prompt
            self._cache_prefix(req, end)
            if req is self.chunked:
                req.prefix_len = end  # as cache_unfinished_req leaves it
                continue  # more chunks to come
            if not any(r is req for r in self.running):
                self.running.append(req)
        self._record()
        return out

    def _record(self) -> None:
        waiting: dict[str, int] = dict.fromkeys(self.prompt_served, 0)
        for r in self.waiting:
            waiting[tenant_of(r.rid)] += 1
        served = {
            t: self.prompt_served[t] + self.w_q * self.output_served[t] for t in self.prompt_served
        }
        self.timeline.append((served, waiting))
        self.vtc_timeline.append(
            {
                t: self.prompt_admitted[t] + self.w_q * self.output_served[t]
                for t in self.prompt_admitted
            }
        )

    def run(self, max_steps: int = 100_000) -> int:
        """Step until nothing waits or runs; returns the steps taken."""
        for n in range(max_steps):
            if not self.waiting and not self.running and self.chunked is None:
                if self.fair:  # fairq sees the last finishes at its next decision
                    self.policy.calc_priority(self.waiting, None)
                return n
            self.step()
        raise RuntimeError(f"not drained after {max_steps} steps")

    # -- the simulated model's cache writes ------------------------------------
    def _cache_prefix(self, req: Any, end: int) -> None:
        """The KV of ``fill_ids[:end]`` is computed: into the cache, and the
        request holds its path (as ``cache_unfinished_req``)."""
        import torch
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        toks = array("q", list(req.full_untruncated_fill_ids)[:end])
        key = RadixKey(toks, extra_key=req.extra_key, cache_salt=req.cache_salt)
        key = key.page_aligned(self.cache.page_size)
        n = len(key)
        if n == 0:
            return
        idx = self.alloc.alloc(n)
        if idx is None:
            self.cache.evict(EvictParams(num_tokens=n - self.alloc.available_size()))
            idx = self.alloc.alloc(n)
        if idx is None:
            idx = torch.zeros(n, dtype=torch.int64)  # full: the model's own rows
            owned = False
        else:
            owned = True
        res = self.cache.insert(InsertParams(key=key, value=idx))
        if owned and res.prefix_len:
            self.alloc.free(idx[: res.prefix_len])
        old = getattr(req, "lock", None)
        req.lock = self.cache.lock(res.last_device_node)
        self.cache.unlock(old)

    def _release(self, req: Any) -> None:
        lock = getattr(req, "lock", None)
        if lock is not None:
            self.cache.unlock(lock)
            req.lock = None


# -- workloads and measures of the tests and the bench --------------------------


def greedy_workload(e: Engine, seed: int, flood: int = 80, each: int = 16) -> None:
    """A greedy tenant whose requests share a long cached prefix, and three
    tenants with prompts of their own, all waiting from the start."""
    rng = random.Random(seed)
    system = [rng.randrange(30000) for _ in range(480)]
    reqs = [("flood", system + [rng.randrange(30000) for _ in range(160)]) for _ in range(flood)]
    for t in ("a", "b", "c"):
        reqs += [
            (t, [rng.randrange(30000) for _ in range(rng.randrange(200, 500))]) for _ in range(each)
        ]
    rng.shuffle(reqs)
    for i, (t, toks) in enumerate(reqs):
        e.request(toks, max_new_tokens=rng.randrange(2, 12), rid=f"{t}:{i}")


def max_gap_while_backlogged(e: Engine, vtc: bool = False) -> float:
    """Largest |W_f - W_g| growth over an interval in which both tenants had
    requests waiting at every step (ALGORITHMS.md section 6, Theorem 4.1).
    Service: prompt tokens computed + 2 x output (DLPM's W); ``vtc``: whole
    prompts admitted + 2 x output (VTC's cost)."""
    tl = e.timeline
    if vtc:
        tl = [(cost, row[1]) for cost, row in zip(e.vtc_timeline, e.timeline, strict=True)]
    tenants = sorted(tl[0][0])
    worst = 0.0
    for f, g in itertools.combinations(tenants, 2):
        start = None
        for k, (_, waiting) in enumerate(tl):
            both = waiting[f] > 0 and waiting[g] > 0
            if both and start is None:
                start = k
            if start is not None and (not both or k == len(tl) - 1):
                end = k if both else k - 1
                for a in range(max(start - 1, 0), end + 1):
                    wf0, wg0 = tl[a][0][f], tl[a][0][g]
                    for b in range(a, end + 1):
                        d = abs((tl[b][0][f] - wf0) - (tl[b][0][g] - wg0))
                        worst = max(worst, d)
                start = None
    return worst


def contention(e: Engine) -> dict[str, float]:
    """Service each tenant got while all of them had requests waiting."""
    tl = e.timeline
    a = next(i for i, (_, w) in enumerate(tl) if min(w.values()) > 0)
    b = next((i for i in range(a, len(tl)) if min(tl[i][1].values()) == 0), len(tl))
    assert b - a > 5, "every tenant should stay backlogged for a while"
    start = tl[a - 1][0] if a > 0 else dict.fromkeys(tl[0][0], 0.0)
    return {t: tl[b - 1][0][t] - start[t] for t in start}


def grouped_workload(e: Engine, seed: int, groups: int = 16, n: int = 320) -> None:
    """``n`` requests waiting at once, each one of ``groups`` 400-token
    prefixes + 24 tokens of its own, four tenants."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(30000) for _ in range(400)] for _ in range(groups)]
    for i in range(n):
        g = rng.randrange(groups)
        e.request(
            prefixes[g] + [rng.randrange(30000) for _ in range(24)],
            max_new_tokens=4,
            rid=f"t{g % 4}:{i}",
        )
