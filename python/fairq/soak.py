"""``fairq soak``: millions of random operations per structure against the
conservation rule, with the process's memory (RSS) sampled over time.

For each structure a driver adds requests and takes them out again at random
(pop / schedule + finish / dispatch + on_finish / remove), keeping the queue
near ``--depth`` requests, and checks the rule every fairq structure keeps:
**every request added leaves exactly once** (no loss, no duplicate). RSS is
sampled ``--samples`` times; the slope of RSS over the second half of the run
(after warm-up) says whether memory is flat. Clients come from a pool of
``--clients`` names, or are all distinct with ``--distinct-clients`` (tenants
that come and go).

``fairq soak --ops 10000000 --json docs/results/soak.json`` is the long run
(``docs/results/soak.md``); the test suite runs a short one.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

STRUCTURES = ["fcfs", "lpm", "vtc", "dlpm", "d2lpm", "drr", "wfq", "wfq-vllm", "dualphase"]


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` (0 for fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


class ConservationError(AssertionError):
    """A request left twice, or left without having been added."""


@dataclass
class Driver:
    """One structure behind three verbs; ``take`` returns the ids that left."""

    add: Callable[[int, str, list[int]], None]
    take: Callable[[], Iterable[int]]
    remove: Callable[[int], None]


class _Request:
    """What vLLM's queues read of a request (weak-referenceable, like vLLM's)."""

    __slots__ = (
        "request_id",
        "priority",
        "arrival_time",
        "num_prompt_tokens",
        "sampling_params",
        "client_id",
        "__weakref__",
    )

    def __init__(self, req_id: int, client: str, tokens: int) -> None:
        from types import SimpleNamespace

        self.request_id = req_id
        self.priority = 0
        self.arrival_time = float(req_id)
        self.num_prompt_tokens = tokens
        self.sampling_params = SimpleNamespace(max_tokens=16)
        self.client_id = client


def _scheduler_driver(name: str, rng: random.Random) -> Driver:
    """fcfs, lpm, vtc, dlpm: fairq's local scheduler over a radix tree;
    ``take`` admits, inserts the prompts and finishes about as many as it
    admitted, sometimes evicting."""
    import fairq
    from fairq.sched import make_scheduler

    tree = fairq.RadixTree(capacity=200_000)
    s = make_scheduler(name, tree, **({"quantum": 512.0} if name == "dlpm" else {}))
    running: list[int] = []
    prompts: dict[int, list[int]] = {}

    def add(i: int, client: str, toks: list[int]) -> None:
        prompts[i] = toks
        s.add(i, client, toks)

    def take() -> list[int]:
        out: list[int] = []
        for a in s.schedule(rng.randrange(64, 4096), max_requests=32):
            rid = int(a.request_id)
            tree.insert(prompts.pop(rid))
            running.append(rid)
        # finish about as many as were admitted
        for _ in range(min(len(running), 32)):
            rid = running.pop(rng.randrange(len(running)))
            s.charge_output(rid, rng.randrange(1, 32))
            s.finish(rid)
            out.append(rid)
        if rng.random() < 0.01:
            tree.evict(rng.randrange(1, 20_000))
        return out

    def remove(i: int) -> None:
        if i in prompts:
            s.remove(i)
            del prompts[i]
        else:  # running: finish it instead
            running.remove(i)
            s.finish(i)

    return Driver(add, take, remove)


def _d2lpm_driver(name: str, rng: random.Random) -> Driver:
    """d2lpm: the dispatcher over 4 workers whose caches report evictions."""
    from fairq.dispatch import make_dispatcher

    d = make_dispatcher("d2lpm", 4, worker_quantum=4096.0)
    live: list[int] = []
    # Each worker's cache holds its last 2,000 prompts and reports the
    # eviction of older ones (their unique last token), as engines do.
    cached: list[deque[list[int]]] = [deque() for _ in range(4)]

    def dadd(i: int, client: str, toks: list[int]) -> None:
        w = d.dispatch(i, client, toks)
        live.append(i)
        cached[w].append(toks)
        if len(cached[w]) > 2000:
            old = cached[w].popleft()
            d.on_evict(w, old, len(old) - 1)

    def dtake() -> list[int]:
        out = []
        for _ in range(min(len(live), 8)):
            rid = live.pop(rng.randrange(len(live)))
            d.on_finish(rid, rng.randrange(1, 64))
            out.append(rid)
        return out

    def dremove(i: int) -> None:
        live.remove(i)
        d.on_finish(i, 0)

    return Driver(dadd, dtake, dremove)


def _drr_driver(name: str, rng: random.Random) -> Driver:
    """drr: a DRR queue over three policy classes."""
    import fairq

    q = fairq.DRRQueue(
        [
            fairq.PolicyClass(c, quantum, o)
            for c, quantum, o in [("a", 1000, "fcfs"), ("b", 3000, "wspt"), ("c", 500, "fcfs")]
        ]
    )
    tickets: dict[int, int] = {}

    def qadd(i: int, client: str, toks: list[int]) -> None:
        tickets[i] = q.push(i, "abc"[i % 3], len(toks) * 8 + 1, arrival=float(i))

    def qtake() -> list[int]:
        out = []
        for _ in range(8):
            got = q.pop()
            if got is None:
                break
            del tickets[got[1]]
            out.append(got[1])
        return out

    def qremove(i: int) -> None:
        assert q.remove(tickets.pop(i)) == i

    return Driver(qadd, qtake, qremove)


def _wfq_driver(name: str, rng: random.Random) -> Driver:
    """wfq, wfq-vllm: fairq's WFQ queue, alone or as vLLM's request queue."""
    import fairq

    vllm = name == "wfq-vllm"
    if vllm:
        from fairq.vllm.wfq import WFQRequestQueue

        w: Any = WFQRequestQueue()
    else:
        w = fairq.WFQQueue(virtual_clock="finish")
    objs: dict[int, Any] = {}

    def wadd(i: int, client: str, toks: list[int]) -> None:
        r = _Request(i, client, len(toks))
        objs[i] = r
        if vllm:
            w.add_request(r)
        else:
            w.add(r, tokens=len(toks) + 16, flow=client)

    def wtake() -> list[int]:
        out = []
        for _ in range(min(len(objs), 8)):
            r = w.pop_request() if vllm else w.pop()
            del objs[r.request_id]
            out.append(r.request_id)
        return out

    def wremove(i: int) -> None:
        r = objs.pop(i)
        if vllm:
            w.remove_request(r)
        else:
            w.remove(r)

    return Driver(wadd, wtake, wremove)


def _dualphase_driver(name: str, rng: random.Random) -> Driver:
    """dualphase: the dual-phase queue, requests changing phase at random."""
    import fairq

    p = fairq.DualPhaseQueue()
    ids: set[int] = set()

    def padd(i: int, client: str, toks: list[int]) -> None:
        p.add(i, phase="think" if i % 2 else "output")
        ids.add(i)

    def ptake() -> list[int]:
        out = []
        for rid, _ in p.schedule(8, 64):
            if rng.random() < 0.15:
                p.on_phase_event(rid)
            if rng.random() < 0.25:
                p.remove(rid)
                ids.discard(rid)
                out.append(rid)
        return out

    def premove(i: int) -> None:
        p.remove(i)
        ids.discard(i)

    return Driver(padd, ptake, premove)


def make_driver(name: str, rng: random.Random) -> Driver:
    """A driver for structure ``name`` (see :data:`STRUCTURES`)."""
    build = _DRIVERS.get(name)
    if build is None:
        raise ValueError(f"structure must be one of {', '.join(STRUCTURES)}, got {name!r}")
    return build(name, rng)


#: The driver builder of each structure.
_DRIVERS: dict[str, Callable[[str, random.Random], Driver]] = {
    "fcfs": _scheduler_driver,
    "lpm": _scheduler_driver,
    "vtc": _scheduler_driver,
    "dlpm": _scheduler_driver,
    "d2lpm": _d2lpm_driver,
    "drr": _drr_driver,
    "wfq": _wfq_driver,
    "wfq-vllm": _wfq_driver,
    "dualphase": _dualphase_driver,
}


def soak(
    name: str,
    ops: int,
    *,
    depth: int = 2000,
    clients: int = 100,
    distinct_clients: bool = False,
    samples: int = 40,
    seed: int = 0,
) -> dict[str, Any]:
    """Run ``ops`` random operations on one structure; return the report.

    Objects that predate the run are frozen out of the garbage collector for
    its length (:func:`gc.freeze`, undone at the end), so each RSS sample's
    collection scans only what the run made: in a long-lived process (a test
    suite, a notebook with torch loaded) a full collection otherwise costs
    about a second per sample, and it would count in ``ops_per_s``."""
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.collect()
        gc.freeze()
    try:
        return _soak(name, ops, depth, clients, distinct_clients, samples, seed)
    finally:
        if frozen:
            gc.unfreeze()


def _soak(
    name: str,
    ops: int,
    depth: int,
    clients: int,
    distinct_clients: bool,
    samples: int,
    seed: int,
) -> dict[str, Any]:
    rng = random.Random(seed)
    drv = make_driver(name, rng)
    live: set[int] = set()
    added = left = 0
    next_id = 0
    series: list[tuple[int, float]] = []
    every = max(1, ops // samples)
    t0 = time.perf_counter()
    prefixes = [[rng.randrange(50_000) for _ in range(64)] for _ in range(32)]

    def remove(rid: int) -> None:
        try:
            drv.remove(rid)
        except (KeyError, ValueError, IndexError) as e:
            raise ConservationError(
                f"{name}: request {rid} was lost: the structure no longer holds it ({e!r})"
            ) from e
        leave([rid])

    def leave(ids: Iterable[int]) -> None:
        nonlocal left
        for rid in ids:
            if rid not in live:
                raise ConservationError(f"{name}: request {rid} left twice or was never added")
            live.remove(rid)
            left += 1

    for op in range(ops):
        r = rng.random()
        if r < 0.5 if len(live) < depth else r < 0.2:
            client = f"t{next_id}" if distinct_clients else f"c{rng.randrange(clients)}"
            toks = prefixes[rng.randrange(32)][: rng.randrange(8, 64)] + [next_id % 50_000]
            drv.add(next_id, client, toks)
            live.add(next_id)
            added += 1
            next_id += 1
        elif r < 0.97 or not live:
            leave(drv.take())
        else:
            remove(next(iter(live)))
        if op % every == 0:
            gc.collect()
            series.append((op, rss_mb()))
    # drain: every request still in must come out exactly once
    for _ in range(1_000_000):
        if not live:
            break
        out = list(drv.take())
        if not out:
            for rid in list(live)[:64]:
                remove(rid)
        leave(out)
    if live:
        raise ConservationError(f"{name}: {len(live)} requests never left")
    wall = time.perf_counter() - t0
    gc.collect()
    series.append((ops, rss_mb()))
    half = [(x, y) for x, y in series if x >= ops // 2]
    s = slope([x for x, _ in half], [y for _, y in half])
    return {
        "structure": name,
        "ops": ops,
        "added": added,
        "left": left,
        "wall_s": round(wall, 2),
        "ops_per_s": round(ops / wall) if wall else None,
        "rss_mb": [round(y, 1) for _, y in series],
        "rss_at_ops": [x for x, _ in series],
        "rss_slope_mb_per_million_ops": round(s * 1e6, 3),
        "rss_growth_second_half_mb": round(half[-1][1] - half[0][1], 1) if half else 0.0,
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--structure",
        action="append",
        choices=STRUCTURES,
        help="structure to soak (repeatable; default: all)",
    )
    from fairq.cliargs import count, output_file

    p.add_argument("--ops", type=count(1), default=1_000_000, help="operations per structure")
    p.add_argument("--depth", type=count(1), default=2000, help="requests kept in flight")
    p.add_argument("--clients", type=count(1), default=100, help="client pool size")
    p.add_argument("--distinct-clients", action="store_true", help="every request a new client")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--json", metavar="FILE", type=output_file, help="write the report as JSON ('-': stdout)"
    )


def run(args: argparse.Namespace) -> int:
    from fairq.cli import write_json

    rows = []
    print(
        "| structure | ops | added | ops/s | RSS start -> end MB | slope MB / 1M ops (2nd half) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.structure or STRUCTURES:
        try:
            rep = soak(
                name,
                args.ops,
                depth=args.depth,
                clients=args.clients,
                distinct_clients=args.distinct_clients,
                seed=args.seed,
            )
        except ConservationError as e:
            print(f"fairq soak: CONSERVATION VIOLATED: {e}", file=sys.stderr)
            return 1
        rows.append(rep)
        print(
            f"| {name} | {rep['ops']:,} | {rep['added']:,} | {rep['ops_per_s']:,} | "
            f"{rep['rss_mb'][0]} -> {rep['rss_mb'][-1]} | {rep['rss_slope_mb_per_million_ops']} |",
            flush=True,
        )
    if args.json:
        write_json(
            args,
            {"command": "fairq soak " + " ".join(sys.argv[2:]), "results": rows},
        )
    return 0
