"""Pure-Python reference of vLLM's request queues, as fairq.vllm defines them.

``RefFCFSRequestQueue`` is vLLM's deque subclass (same methods, so the same
errors and messages come from ``collections.deque``). ``RefPriorityRequestQueue``
is vLLM's heapq queue, with keys read once at ``add_request`` and the
deterministic insertion tie-break instead of ``id()``, plus fairq's two
additions: a duplicate add is a ``ValueError`` and a batch prepend is
all-or-nothing. ``Req`` is the tests' one vLLM-``Request`` stand-in.
``require_tested_vllm`` and ``require_serving_vllm`` are the vLLM test
modules' one gate each (module-level skips with the reason).
"""

from __future__ import annotations

import heapq
import math
import operator
import time
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from fairq.benchmarks.vllm import BaselineFCFSRequestQueue
from fairq.enginebench.server import VllmServer
from fairq.enginebench.traffic import metric_sum, scrape


class Req:
    """The tests' one stand-in for a vLLM ``Request``.

    ``Req(request_id, priority=0, arrival_time=0.0, *, prompt=None,
    max_tokens=None, **attributes)``. Like vLLM's ``Request`` it has identity
    equality and hash (no ``__eq__``/``__hash__``) and vLLM's ``__lt__`` on
    ``(priority, arrival_time, request_id)``. ``prompt=n`` gives it ``n``
    ``prompt_token_ids``; ``max_tokens=m`` a ``sampling_params`` with
    ``max_tokens=m`` (where vLLM keeps it). Every other keyword becomes an
    attribute as given (``client_id``, ``weight``, ``num_prompt_tokens``,
    ``tenant``, ...). An attribute not given is absent: tests of missing
    fields rely on that.
    """

    def __init__(
        self,
        request_id: Any,
        priority: Any = 0,
        arrival_time: Any = 0.0,
        *,
        prompt: int | None = None,
        max_tokens: Any = None,
        **attributes: Any,
    ) -> None:
        self.request_id = request_id
        self.priority = priority
        self.arrival_time = arrival_time
        if prompt is not None:
            self.prompt_token_ids = list(range(prompt))
        if max_tokens is not None:
            self.sampling_params = SimpleNamespace(max_tokens=max_tokens)
        for name, value in attributes.items():
            setattr(self, name, value)

    def __lt__(self, other: Req) -> bool:
        if self.priority != other.priority:
            return bool(self.priority < other.priority)
        if self.arrival_time != other.arrival_time:
            return bool(self.arrival_time < other.arrival_time)
        if self.request_id != other.request_id:
            return bool(self.request_id < other.request_id)
        return id(self) < id(other)

    def __repr__(self) -> str:
        return f"Req({self.request_id!r})"


# vLLM's FCFSRequestQueue (a deque with the RequestQueue methods): the
# benchmark baseline is exactly that reimplementation, so the model reuses it.
RefFCFSRequestQueue = BaselineFCFSRequestQueue


def _rid_key(v: Any) -> tuple[int, Any]:
    # fairq's total order on request ids: every int before every str.
    return (0, v) if isinstance(v, int) else (1, v)


def read_key(request: Any) -> tuple[Any, Any, tuple[int, Any]]:
    """fairq's validation of the sort key, in Python (same types and messages)."""
    out = []
    for field in ("priority", "arrival_time", "request_id"):
        if not hasattr(request, field):
            raise TypeError(
                f"{type(request).__name__} object has no attribute '{field}': "
                "PriorityRequestQueue needs priority, arrival_time and request_id"
            )
        v = getattr(request, field)
        if field == "request_id":
            # fairq's one request-id rule (rust/request_id.rs)
            if isinstance(v, bool) or not isinstance(v, (str, int)) and not hasattr(v, "__index__"):
                raise TypeError(f"request_id must be an int or a str, got {type(v).__name__}")
            if not isinstance(v, str):
                v = operator.index(v)
        elif isinstance(v, float):
            if math.isnan(v):
                raise ValueError(f"{field} must not be NaN")
        elif not isinstance(v, int):
            raise TypeError(f"{field} must be an int or float, got {type(v).__name__} {v!r}")
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            raise ValueError(f"{field} = {v!r} is out of range: integers must fit in 64 bits")
        out.append(v)
    return out[0], out[1], _rid_key(out[2])


class _Entry:
    __slots__ = ("key", "seq", "request")

    def __init__(self, key: Any, seq: int, request: Any) -> None:
        self.key = key
        self.seq = seq
        self.request = request

    def __lt__(self, other: _Entry) -> bool:
        # Request-like __lt__ on the keys read at add time, then insertion.
        if self.key != other.key:
            return bool(self.key < other.key)
        return self.seq < other.seq


class RefPriorityRequestQueue:
    """vLLM's PriorityRequestQueue with fairq's deterministic additions."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = 0

    def _check_new(self, request: Any, also: Iterable[Any] = ()) -> None:
        if any(e.request is request for e in self._heap) or any(r is request for r in also):
            raise ValueError(f"{request!r} is already in the priority queue")

    def add_request(self, request: Any) -> None:
        self._check_new(request)
        key = read_key(request)
        heapq.heappush(self._heap, _Entry(key, self._seq, request))
        self._seq += 1

    def pop_request(self) -> Any:
        if not self._heap:
            raise IndexError("pop from empty heap")
        return heapq.heappop(self._heap).request

    def peek_request(self) -> Any:
        if not self._heap:
            raise IndexError("peek from empty heap")
        return self._heap[0].request

    def prepend_request(self, request: Any) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        items = list(requests)
        for i, r in enumerate(items):
            self._check_new(r, items[:i])
        keys = [read_key(r) for r in items]
        for k, r in zip(keys, items, strict=True):
            heapq.heappush(self._heap, _Entry(k, self._seq, r))
            self._seq += 1

    def remove_request(self, request: Any) -> None:
        for i, e in enumerate(self._heap):
            if e.request is request:
                del self._heap[i]
                heapq.heapify(self._heap)
                return
        raise ValueError("list.remove(x): x not in list")

    def remove_requests(self, requests: Iterable[Any]) -> None:
        drop = {id(r) for r in requests}
        self._heap = [e for e in self._heap if id(e.request) not in drop]
        heapq.heapify(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Any]:
        heap_copy = self._heap[:]
        while heap_copy:
            yield heapq.heappop(heap_copy).request


def require_tested_vllm() -> Any:
    """The installed vLLM module, if it is a tested series; else skip the
    calling test module (call it at import time)."""
    from fairq.vllm.compat import TESTED_SERIES, is_tested

    vllm = pytest.importorskip("vllm", reason="needs vLLM 0.32 or 0.33 (installed by .ci/run)")
    if not is_tested(vllm.__version__):
        pytest.skip(
            f"tested against vLLM {', '.join(TESTED_SERIES)}, found {vllm.__version__}",
            allow_module_level=True,
        )
    return vllm


_SERVING: list[str | None] = []


def require_serving_vllm() -> str:
    """The version of the vLLM that can serve here (``$FAIRQ_VLLM_SERVER_PYTHON``),
    asked once per session; else skip the calling test module."""
    from fairq.enginebench.server import server_vllm_version

    if not _SERVING:
        _SERVING.append(server_vllm_version())
    version = _SERVING[0]
    if version is None:
        pytest.skip(
            "no vLLM that can serve a model here: set FAIRQ_VLLM_SERVER_PYTHON to a Python "
            "with vLLM's CPU build 0.32 and fairq (.ci/run makes one), or install a CUDA vLLM "
            "on a GPU machine",
            allow_module_level=True,
        )
    return version


def wait_until_waiting(
    url: str, want: int, until: float, stop: Callable[[], bool] = lambda: False
) -> bool:
    """Poll the vLLM server at ``url`` (its ``vllm:num_requests_waiting``,
    every 0.05 s) until ``want`` requests wait in its scheduler: True; or
    until ``time.monotonic()`` passes ``until``, or ``stop()``: False.

    A test that sends a flood and then other tenants waits on this instead
    of a fixed delay, which raced the machine's speed both ways: too short,
    and the flood had not reached the engine; too long, and a quiet
    machine's stock vLLM had served most of it already."""
    while metric_sum(scrape(url), "vllm:num_requests_waiting") < want:
        if time.monotonic() >= until or stop():
            return False
        time.sleep(0.05)
    return True


#: vLLM arguments every server the tests start gets: no torch.compile warm-up,
#: 10-20 s less per start on 2 cores (about 25 starts in a full run). The
#: tests check scheduling, which is the same either way; ``fairq engine-bench``
#: and the README's commands keep vLLM's default.
TEST_SERVER_ARGS = ("--enforce-eager",)


def vllm_server(model: str, policy: str | None, **kw: Any) -> VllmServer:
    """A :class:`fairq.enginebench.server.VllmServer` with
    :data:`TEST_SERVER_ARGS` before the caller's ``args``."""
    return VllmServer(model, policy, args=[*TEST_SERVER_ARGS, *kw.pop("args", ())], **kw)
