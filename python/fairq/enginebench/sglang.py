"""Time of one SGLang scheduling decision: fairq's policies against SGLang's own.

``python -m fairq.enginebench.sglang [--waiting 1000 10000] [--steps 20]`` (in the
SGLang venv) builds SGLang's ``RadixCache`` holding 64 cached 256-token
prefixes and ``N`` waiting ``Req`` objects (a cached prefix + 32 tokens of
their own), then times, in the same run, on the same queue:

* ``sglang-lpm``: SGLang's ``SchedulePolicy("lpm").calc_priority`` as shipped
  (above 128 waiting it falls back to FCFS: no matching, no sort);
* ``sglang-lpm-matching``: the same with the 128 limit lifted
  (``WAITING_QUEUE_PREFIX_MATCH_MAX``), i.e. what keeping locality costs SGLang;
* ``fairq-<policy>``: fairq's part of a step in steady state: each step the
  adder takes the first 8 admitted requests and 8 new ones arrive, 64
  requests decode (one token each, finishing after 8 steps) (the
  one-off cost of adding the first ``N`` is reported apart); timed: the
  journaled reassignment and appends of SGLang's waiting list and
  ``calc_priority`` (:func:`time_fairq`);
* ``fairq-<policy> (whole-list read)``: the same with a plain list, which
  fairq reads whole at every decision (``--full-read``; what it did before
  the journal).

``--outcomes`` prints the policies' outcomes on the tests' workloads instead
(:func:`outcomes`). Prints one row per (N, policy): mean ms per decision and the ratio to
``sglang-lpm-matching``. Timings are wall-clock on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import random
import time
from array import array
from typing import Any

from fairq.enginebench.harness.sglang import publish_server_args
from fairq.sglang.queue import TrackedAttribute


def _setup(n: int, seed: int = 0) -> tuple[Any, list[Any], Any]:
    import torch
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    from sglang.srt.sampling.sampling_params import SamplingParams

    publish_server_args()
    rng = random.Random(seed)
    alloc = TokenToKVPoolAllocator(1 << 20, torch.float16, "cpu", None, False)
    cache = RadixCache.create_simulated(mock_allocator=alloc)
    groups = [[rng.randrange(30000) for _ in range(256)] for _ in range(64)]
    for g in groups:
        cache.insert(InsertParams(key=RadixKey(array("q", g)), value=alloc.alloc(len(g))))
    ids = iter(range(1 << 40))

    def make() -> Any:
        params = SamplingParams(max_new_tokens=16)
        params.normalize(None)
        toks = rng.choice(groups) + [rng.randrange(30000) for _ in range(32)]
        i = next(ids)
        return Req(f"t{i % 4}:{i}", "", array("q", toks), params)

    return cache, [make() for _ in range(n)], make


def time_sglang(n: int, matching: bool, repeat: int = 3) -> float:
    from sglang.srt.managers import schedule_policy as sp

    cache, waiting, _ = _setup(n)
    old = sp.WAITING_QUEUE_PREFIX_MATCH_MAX
    if matching:
        sp.WAITING_QUEUE_PREFIX_MATCH_MAX = 1 << 62
    try:
        pol = sp.SchedulePolicy("lpm", cache, False, False, True)
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            pol.calc_priority(waiting, None)
            best = min(best, time.perf_counter() - t)
    finally:
        sp.WAITING_QUEUE_PREFIX_MATCH_MAX = old
    return best


class _Scheduler:
    """What fairq reads of SGLang's ``Scheduler``, with ``waiting_queue``
    journaled as :func:`fairq.sglang.install` journals the real one."""

    waiting_queue = TrackedAttribute("waiting_queue")

    def __init__(self, cache: Any, waiting: list[Any]) -> None:
        self.tree_cache = cache
        self.waiting_queue = waiting


def time_fairq(
    n: int, policy: str, steps: int, take: int = 8, journal: bool = True, decode_steps: int = 8
) -> tuple[float, float]:
    """Mean seconds of fairq's part of a step and of the first call.

    A step as SGLang's scheduler makes it: the adder takes the first
    ``take`` admitted requests, ``self.waiting_queue = [x for x in
    self.waiting_queue if x not in can_run_set]`` (SGLang's own pass, not
    timed; the assignment, which fairq journals, is), ``take`` arrivals are
    appended (``_add_request_to_queue``; timed: the journal's append), then
    ``calc_priority`` (timed). Admitted requests decode one token per step
    and finish after ``decode_steps`` (about ``take * decode_steps``
    running, whose new tokens and finishes fairq reads each decision).
    ``journal=False``: the list is a plain list and every decision reads
    all of it (what fairq did before the journal).
    """
    from fairq.sglang._install import build_policy
    from fairq.sglang.tenants import make_options

    cache, waiting, make = _setup(n)
    s = _Scheduler(cache, waiting)
    if journal:
        TrackedAttribute.track(s, "waiting_queue")
    pol, _ = build_policy(s, make_options(policy, {}))
    t = time.perf_counter()
    pol.calc_priority(s.waiting_queue, None)
    first = time.perf_counter() - t
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    state = pol.fairq
    total = 0.0
    running: list[list[Any]] = []
    for _ in range(steps):
        for batch in running:  # a decode step: one token each
            for req in batch:
                req.output_ids.append(1)
        if len(running) == decode_steps:  # the oldest finish
            for req in running.pop(0):
                req.finished_reason = FINISH_LENGTH(len(req.output_ids))
        can_run = []
        for req in s.waiting_queue[:take]:  # what SGLang's adder takes
            if req.rid in state.admitted:
                req.prefix_len, req.extend_end = 0, len(req.origin_input_ids)
                state.taken(req)
                can_run.append(req)
        running.append(can_run)
        can_run_set = set(can_run)
        kept = [x for x in s.waiting_queue if x not in can_run_set]
        arrivals = [make() for _ in range(take)]
        t = time.perf_counter()
        s.waiting_queue = kept
        wq = s.waiting_queue
        for req in arrivals:
            wq.append(req)
        pol.calc_priority(wq, None)
        total += time.perf_counter() - t
    if journal:
        assert state.full_reads == 1, state.full_reads
    return total / steps, first


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--waiting", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--policies", nargs="+", default=["fairq-lpm", "fairq-dlpm", "fairq-vtc"])
    ap.add_argument(
        "--full-read",
        nargs="*",
        default=["fairq-vtc"],
        help="policies also timed reading the whole waiting list each step (no journal)",
    )
    ap.add_argument(
        "--outcomes", action="store_true", help="the policies' outcomes on the tests' workloads"
    )
    args = ap.parse_args(argv)
    if args.outcomes:
        outcomes()
        return
    print("| waiting | policy | ms per decision | vs sglang-lpm-matching |")
    print("|---:|---|---:|---:|")
    for n in args.waiting:
        base = time_sglang(n, matching=True)
        rows = [
            ("sglang-lpm", time_sglang(n, matching=False), ""),
            ("sglang-lpm-matching", base, ""),
        ]
        for p in args.policies:
            step, first = time_fairq(n, p, args.steps)
            rows.append((p, step, f" (first call, adding all {n}: {first * 1e3:.1f} ms)"))
        for p in args.full_read:
            step, _ = time_fairq(n, p, args.steps, journal=False)
            rows.append((f"{p} (whole-list read)", step, ""))
        for name, sec, note in rows:
            print(f"| {n} | {name} | {sec * 1e3:.3f}{note} | {sec / base:.3f} |")


def outcomes() -> None:
    """Steps, hit rate, Theorem 4.1's gap and the greedy tenant's share on
    the greedy workload; steps and hit rate with 320 waiting."""
    from fairq.enginebench.harness.sglang import (
        Engine,
        contention,
        greedy_workload,
        grouped_workload,
        max_gap_while_backlogged,
    )

    print("| policy | steps | hit rate | max backlogged gap | flood share while all wait |")
    print("|---|---:|---:|---:|---:|")
    for p in ["lpm", "fcfs", "fairq-fcfs", "fairq-lpm", "fairq-vtc", "fairq-dlpm"]:
        e = Engine(p, max_prefill_tokens=2048, chunk_size=1024, kv_tokens=1 << 15)
        greedy_workload(e, seed=13)
        n = e.run()
        c = contention(e)
        gap = max_gap_while_backlogged(e)
        share = c["flood"] / sum(c.values())
        print(f"| {p} | {n} | {e.hit_rate:.3f} | {gap:.0f} | {share:.2f} |")
    print()
    print("| policy | steps | hit rate |")
    print("|---|---:|---:|")
    for p in ["lpm", "fairq-fcfs", "fairq-lpm", "fairq-vtc", "fairq-dlpm"]:
        e = Engine(p, max_prefill_tokens=1024, chunk_size=512, kv_tokens=2048)
        grouped_workload(e, seed=17)
        n = e.run()
        print(f"| {p} | {n} | {e.hit_rate:.3f} |")


if __name__ == "__main__":
    main()
