"""Benchmark suite ``vllm``: fairq.vllm queues vs vLLM's pure-Python queues.

The baselines reimplement vLLM's own classes (``vllm/v1/core/sched/
request_queue.py``): ``FCFSRequestQueue`` is a ``collections.deque`` subclass
with Python wrapper methods, ``PriorityRequestQueue`` a ``heapq`` list of
requests ordered by a vLLM-``Request``-like ``__lt__``. Both sides run in the
same process on the same request objects. Per case: seconds per operation
(``add``/``pop``/``peek``/``remove-one``: per request; ``remove-batch`` (10%
of the queue in one ``remove_requests`` call) and ``iterate`` (one full
iteration): per call).
"""

from __future__ import annotations

import functools
import heapq
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fairq.benchmarks import Row, per_op

TITLE = "vLLM request queues (fairq.vllm vs vLLM's deque / heapq queues)"

SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)


class Request:
    """vLLM-``Request``-like: the three sort attributes and vLLM's ``__lt__``."""

    __slots__ = ("priority", "arrival_time", "request_id")

    def __init__(self, priority: int, arrival_time: float, request_id: str) -> None:
        self.priority = priority
        self.arrival_time = arrival_time
        self.request_id = request_id

    def __lt__(self, other: Request) -> bool:
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_time != other.arrival_time:
            return self.arrival_time < other.arrival_time
        if self.request_id != other.request_id:
            return self.request_id < other.request_id
        return id(self) < id(other)


class BaselineFCFSRequestQueue(deque):
    """vLLM's FCFSRequestQueue (deque subclass), reimplemented."""

    def add_request(self, request: Any) -> None:
        self.append(request)

    def pop_request(self) -> Any:
        return self.popleft()

    def peek_request(self) -> Any:
        if not self:
            raise IndexError("peek from an empty queue")
        return self[0]

    def prepend_request(self, request: Any) -> None:
        self.appendleft(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        self.extendleft(requests)

    def remove_request(self, request: Any) -> None:
        self.remove(request)

    def remove_requests(self, requests: Iterable[Any]) -> None:
        requests_to_remove = set(requests)
        filtered = [req for req in self if req not in requests_to_remove]
        self.clear()
        self.extend(filtered)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __len__(self) -> int:
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        return super().__iter__()


class BaselinePriorityRequestQueue:
    """vLLM's PriorityRequestQueue (heapq of requests), reimplemented."""

    def __init__(self) -> None:
        self._heap: list[Any] = []

    def add_request(self, request: Any) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Any:
        if not self._heap:
            raise IndexError("pop from empty heap")
        return heapq.heappop(self._heap)

    def peek_request(self) -> Any:
        if not self._heap:
            raise IndexError("peek from empty heap")
        return self._heap[0]

    def prepend_request(self, request: Any) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Any) -> None:
        self._heap.remove(request)
        heapq.heapify(self._heap)

    def remove_requests(self, requests: Iterable[Any]) -> None:
        requests_to_remove = requests if isinstance(requests, set) else set(requests)
        self._heap = [r for r in self._heap if r not in requests_to_remove]
        heapq.heapify(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Any]:
        heap_copy = self._heap[:]
        while heap_copy:
            yield heapq.heappop(heap_copy)


def make_requests(n: int, seed: int = 0) -> list[Request]:
    """``n`` requests in arrival order with a few priority levels."""
    rng = random.Random(seed)
    return [Request(rng.randrange(4), float(i), f"req-{i}") for i in range(n)]


def build(impl: str, policy: str, reqs: list[Request]) -> Any:
    """A queue of ``impl`` (``fairq``/``baseline``) and ``policy`` holding ``reqs``."""
    if impl == "fairq":
        from fairq.vllm import FCFSRequestQueue, PriorityRequestQueue

        q: Any = FCFSRequestQueue() if policy == "fcfs" else PriorityRequestQueue()
        for r in reqs:
            q.add_request(r)
        return q
    if policy == "fcfs":
        return BaselineFCFSRequestQueue(reqs)
    b = BaselinePriorityRequestQueue()
    b._heap = list(reqs)
    heapq.heapify(b._heap)
    return b


def _add(extra: list[Request]) -> Callable[[Any], None]:
    def op(q: Any) -> None:
        add = q.add_request
        for r in extra:
            add(r)

    return op


def _pop(k: int) -> Callable[[Any], None]:
    def op(q: Any) -> None:
        pop = q.pop_request
        for _ in range(k):
            pop()

    return op


def _peek(k: int) -> Callable[[Any], None]:
    def op(q: Any) -> None:
        peek = q.peek_request
        for _ in range(k):
            peek()

    return op


def _remove_one(victims: list[Request]) -> Callable[[Any], None]:
    def op(q: Any) -> None:
        remove = q.remove_request
        for r in victims:
            remove(r)

    return op


def _remove_batch(victims: list[Request]) -> Callable[[Any], None]:
    def op(q: Any) -> None:
        q.remove_requests(victims)

    return op


def _iterate(q: Any) -> None:
    for _ in q:
        pass


def _iterate_after_change(q: Any) -> None:
    # One O(1)/O(log n) change first, so fairq cannot reuse its cached
    # snapshot: this is the cost of the first pass after the queue changed.
    q.prepend_request(q.pop_request())
    for _ in q:
        pass


def run(quick: bool = False) -> list[Row]:
    """The suite's rows: both policies, every size, every operation."""
    sizes = QUICK_SIZES if quick else SIZES
    repeat = 3 if quick else 5
    rows: list[Row] = []
    for policy in ("fcfs", "priority"):
        baseline_name = "deque subclass" if policy == "fcfs" else "heapq + __lt__"
        for n in sizes:
            reqs = make_requests(n)
            rng = random.Random(n)
            extra = make_requests(1000, seed=n + 1)
            for i, r in enumerate(extra):
                r.request_id = f"extra-{i}"
            # vLLM's remove is O(n) + heapify: fewer removes at large n keep it short.
            k_rm = max(1, min(100, n // 10, 1_000_000 // n))
            victims = rng.sample(reqs, k_rm)
            batch = rng.sample(reqs, n // 10)
            k_pop = min(1000, n)
            specs: list[tuple[str, bool, Callable[[Any], None], int]] = [
                ("add", True, _add(extra), len(extra)),
                ("pop", True, _pop(k_pop), k_pop),
                ("peek", False, _peek(1000), 1000),
                ("remove-one", True, _remove_one(victims), k_rm),
                ("remove-batch 10%", True, _remove_batch(batch), 1),
                ("iterate (unchanged since last pass)", False, _iterate, 1),
                ("iterate (after a change)", False, _iterate_after_change, 1),
            ]
            built = {impl: build(impl, policy, reqs) for impl in ("fairq", "baseline")}
            for case, mutates, op, ops in specs:
                t: dict[str, float] = {}
                for impl in ("fairq", "baseline"):
                    setup = (
                        functools.partial(build, impl, policy, reqs)
                        if mutates
                        else functools.partial(built.__getitem__, impl)
                    )
                    t[impl] = per_op(setup, op, ops, repeat=repeat)
                rows.append(
                    Row("vllm", f"{policy} {case}", n, t["fairq"], t["baseline"], baseline_name)
                )
    return rows
