"""fairq.vllm request queues (FCFS, priority, WFQ; create_request_queue) under hostile requests.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairq.vllm import FCFSRequestQueue, PriorityRequestQueue, create_request_queue
from fairq.vllm.wfq import WFQRequestQueue

from fuzz.hostile import (
    ALLOWED,
    FUZZ,
    Bare,
    attempt,
    hostile,
    must_fail,
)
from reference.vllm import Req


def vllm_snap(q: Any) -> Any:
    return (len(q), bool(q), [id(r) for r in q])


def req(request_id: Any, **attributes: Any) -> Req:
    """A request for these tests: 4 prompt tokens and 2 new tokens unless told."""
    attributes.setdefault("num_prompt_tokens", 4)
    attributes.setdefault("max_tokens", 2)
    return Req(request_id, **attributes)


# The request fields a hostile value goes into; ``max_tokens`` lives where
# vLLM keeps it, in ``sampling_params``.
HOSTILE_FIELDS = [
    "priority",
    "arrival_time",
    "request_id",
    "weight",
    "num_prompt_tokens",
    "max_tokens",
]


def hostile_request(data: st.DataObject) -> Any:
    kind = data.draw(st.integers(0, 3))
    if kind == 0:
        return data.draw(hostile)
    kw: dict[str, Any] = {}
    for f in HOSTILE_FIELDS:
        if data.draw(st.booleans()):
            kw[f] = data.draw(hostile)
    r = req(kw.pop("request_id", data.draw(st.integers(0, 5))))
    for k, v in kw.items():
        if k == "max_tokens":
            r.sampling_params = SimpleNamespace(max_tokens=v)
        else:
            setattr(r, k, v)
    if kind == 3:
        for f in HOSTILE_FIELDS:
            attr = "sampling_params" if f == "max_tokens" else f
            if data.draw(st.booleans()) and attr in r.__dict__:
                delattr(r, attr)
    return r


VLLM_FACTORIES: list[Callable[[], Any]] = [
    FCFSRequestQueue,
    PriorityRequestQueue,
    WFQRequestQueue,
    lambda: WFQRequestQueue(virtual_clock="finish"),
    lambda: create_request_queue("fcfs"),
    lambda: create_request_queue("priority"),
    lambda: create_request_queue("wfq"),
]


@FUZZ
@given(which=st.integers(0, len(VLLM_FACTORIES) - 1), data=st.data())
def test_vllm_queues_hostile(which: int, data: st.DataObject) -> None:
    q = VLLM_FACTORIES[which]()
    live = [req(i, priority=i % 3, arrival_time=float(i), client_id=f"c{i % 2}") for i in range(4)]
    for r in live:
        q.add_request(r)

    def snap() -> Any:
        return vllm_snap(q)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(
            st.sampled_from(
                [
                    "add",
                    "prepend",
                    "prepends",
                    "remove",
                    "removes",
                    "contains",
                    "pop",
                    "peek",
                    "valid",
                ]
            )
        )
        bad = hostile_request(data)
        if op == "add":
            attempt(snap, q.add_request, bad)
        elif op == "prepend":
            attempt(snap, q.prepend_request, bad)
        elif op == "prepends":
            batch = [req(100 + len(q)), bad] if data.draw(st.booleans()) else bad
            attempt(snap, q.prepend_requests, batch)
        elif op == "remove":
            attempt(snap, q.remove_request, bad)
        elif op == "removes":
            attempt(snap, q.remove_requests, bad if data.draw(st.booleans()) else [bad])
        elif op == "contains":
            attempt(snap, q.__contains__, bad)
        elif op in ("pop", "peek"):
            if len(q) == 0:
                must_fail(snap, q.pop_request if op == "pop" else q.peek_request, exc=IndexError)
            elif op == "peek":
                assert q.peek_request() is next(iter(q))
            else:
                first = next(iter(q))
                assert q.pop_request() is first
        else:
            r = req(1000 + len(q), client_id="z")
            q.add_request(r)
            assert r in q
            q.remove_request(r)
            assert r not in q
    # valid operations still work and nothing is lost or duplicated
    ids = [id(r) for r in q]
    assert len(ids) == len(q) == len(set(ids)) or which in (0, 4)
    n = len(q)
    out = [q.pop_request() for _ in range(n)]
    assert len(out) == n and not q
    must_fail(snap, q.pop_request, exc=IndexError)


@pytest.mark.parametrize("factory", VLLM_FACTORIES[1:4])
def test_vllm_duplicate_and_absent(factory: Callable[[], Any]) -> None:
    q = factory()
    a, b = req(1), req(2)
    q.add_request(a)

    def snap() -> Any:
        return vllm_snap(q)

    must_fail(snap, q.add_request, a, exc=ValueError)
    must_fail(snap, q.remove_request, b, exc=ValueError)
    must_fail(snap, q.prepend_requests, [b, b], exc=ValueError)
    must_fail(snap, q.prepend_requests, [b, a], exc=ValueError)
    assert list(q) == [a]


def test_priority_queue_messages_name_fields() -> None:
    q = PriorityRequestQueue()
    q.add_request(req(0))

    def snap() -> Any:
        return vllm_snap(q)

    must_fail(snap, q.add_request, req(1, priority=math.nan), exc=ValueError, field="priority")
    must_fail(snap, q.add_request, req(1, priority=2**64), exc=ValueError, field="priority")
    must_fail(snap, q.add_request, req(1, arrival_time="x"), exc=TypeError, field="arrival_time")
    must_fail(snap, q.add_request, req(2**200), exc=ValueError, field="request_id")
    must_fail(snap, q.add_request, req(1.5), exc=TypeError, field="request_id")
    must_fail(snap, q.add_request, Bare(), exc=TypeError, field="priority")
    must_fail(snap, q.prepend_requests, [req(5), req(6, priority=None)], field="priority")


def test_wfq_request_queue_messages_name_fields() -> None:
    q = WFQRequestQueue()
    q.add_request(req(0, client_id="a"))

    def snap() -> Any:
        return (vllm_snap(q), q.virtual_time, q.flow_count)

    for w in (0, -1.0, math.nan, math.inf):
        must_fail(snap, q.add_request, req(1, weight=w), exc=ValueError, field="weight")
    must_fail(snap, q.add_request, req(1, weight="2"), exc=TypeError, field="weight")
    must_fail(snap, q.add_request, Bare(), exc=TypeError, field="num_prompt_tokens")
    must_fail(snap, q.add_request, req(1, num_prompt_tokens=-5), exc=ValueError, field="tokens")
    must_fail(snap, q.add_request, req(1, client_id=[]), exc=TypeError)
    must_fail(snap, q.prepend_requests, [req(7), req(8, weight=0)], exc=ValueError, field="weight")
    for bad in (0, -1.0, math.nan, math.inf, "1"):
        with pytest.raises(ValueError, match="default_weight"):
            WFQRequestQueue(default_weight=bad)
    with pytest.raises(ValueError, match="virtual_clock"):
        WFQRequestQueue(virtual_clock="later")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="flow_key"):
        WFQRequestQueue(flow_key=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scheduling policy"):
        create_request_queue("lifo")
    with pytest.raises(ValueError, match="scheduling policy"):
        create_request_queue(None)  # type: ignore[arg-type]


def test_vllm_reentrant_iterables() -> None:
    """An iterable that mutates the queue while being consumed."""
    for factory in VLLM_FACTORIES:
        q = factory()
        rs = [req(i, client_id="a") for i in range(3)]
        for r in rs:
            q.add_request(r)

        def gen(q: Any = q, rs: list[Req] = rs) -> Any:
            yield rs[0]
            q.remove_request(rs[1])
            yield rs[2]

        ok, e = attempt(lambda: None, q.remove_requests, gen())
        assert ok or isinstance(e, ALLOWED + (RuntimeError,)), e
        # whatever happened, the queue is consistent: nothing duplicated
        ids = [id(r) for r in q]
        assert len(ids) == len(set(ids)) == len(q)
        for r in list(q):
            q.remove_request(r)
        assert len(q) == 0


def test_wfq_request_queue_reentrant_flow_key() -> None:
    """Regression: a flow_key callback that queues the request itself made
    add_request queue it twice (the duplicate check ran before the callback)."""
    calls = []

    def flow_key(r: Any) -> str:
        if not calls:
            calls.append(r)
            q.add_request(r)
        return "c"

    q = WFQRequestQueue(flow_key=flow_key)
    r = req(1)

    # the callback's own add_request succeeds; the outer one is the duplicate
    with pytest.raises(ValueError, match="already"):
        q.add_request(r)
    assert list(q) == [r]
    assert q.pop_request() is r and not q


def test_reentrant_attribute_reads() -> None:
    """A request whose attribute read mutates the queue: attributes are read
    before the queue is borrowed, so the nested call runs first, then the
    add, each whole."""

    class Sneaky:
        request_id = 1
        arrival_time = 0.0
        num_prompt_tokens = 3

        @property
        def priority(self) -> int:
            pq.pop_request()
            return 0

    pq = PriorityRequestQueue()
    first = req(0)
    pq.add_request(first)
    sneaky = Sneaky()
    pq.add_request(sneaky)
    assert list(pq) == [sneaky] and pq.pop_request() is sneaky and not pq


@pytest.mark.parametrize(
    "bad",
    [
        req(2, num_prompt_tokens=10**400),
        req(2, num_prompt_tokens=10**300, weight=5e-324),
        req(2, num_prompt_tokens=10**300, client_id="c", weight=1e-10),
    ],
)
def test_wfq_request_queue_prepend_requests_all_or_nothing(bad: Req) -> None:
    """Regression: a batch whose later request failed in the core (tokens too
    large for a float, or an overflowing finish time) kept the earlier ones."""
    q = WFQRequestQueue()
    q.add_request(req(0, client_id="c"))

    def snap() -> Any:
        return (vllm_snap(q), q.virtual_time, q.flow_count)

    must_fail(snap, q.prepend_requests, [req(1, client_id="c"), bad], exc=ValueError)
    must_fail(snap, q.add_request, bad, exc=ValueError)
    assert len(q) == 1


@FUZZ
@given(
    policy=hostile,
    opt=st.sampled_from(["default_weight", "flow_key", "virtual_clock", "x"]),
    v=hostile,
)
def test_create_request_queue_hostile(policy: Any, opt: str, v: Any) -> None:
    attempt(lambda: None, create_request_queue, policy)  # getattr may raise Boom
    for name in ("fcfs", "priority", "wfq"):
        ok, q = attempt(lambda: None, create_request_queue, name, **{opt: v}, user_exc=False)
        if ok:
            added, _ = attempt(lambda q=q: vllm_snap(q), q.add_request, req(1), user_exc=False)
            assert len(q) == int(added)
