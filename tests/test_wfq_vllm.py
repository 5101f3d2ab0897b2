"""fairq.vllm.wfq.WFQRequestQueue: the vLLM RequestQueue interface over WFQ."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from fairq.vllm import RequestQueue, SchedulingPolicy, create_request_queue
from fairq.vllm.wfq import WFQRequestQueue, request_tokens

from reference.vllm import Req


class Unhashable(Req):
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        raise AssertionError("requests must be compared by identity")


def same(xs: list[Any], ys: list[Any]) -> bool:
    return len(xs) == len(ys) and all(x is y for x, y in zip(xs, ys, strict=True))


def test_factory_and_abc() -> None:
    q = create_request_queue(SchedulingPolicy.WFQ)
    assert isinstance(q, WFQRequestQueue) and isinstance(q, RequestQueue)
    assert isinstance(create_request_queue("wfq"), WFQRequestQueue)
    q2 = create_request_queue("wfq", flow_key=None, default_weight=2.0)
    assert isinstance(q2, WFQRequestQueue)


def test_full_interface() -> None:
    q = WFQRequestQueue()
    assert not q and len(q) == 0
    with pytest.raises(IndexError):
        q.pop_request()
    with pytest.raises(IndexError):
        q.peek_request()
    a = Unhashable("a", prompt=5, max_tokens=5, client_id="x")
    b = Unhashable("b", prompt=5, max_tokens=5, client_id="x")
    c = Unhashable("c", prompt=5, max_tokens=5, client_id="y")
    for r in (a, b, c):
        q.add_request(r)
    assert len(q) == 3 and q
    assert same(list(q), [a, c, b])
    assert q.peek_request() is a
    assert q.pop_request() is a
    q.prepend_request(a)  # preempted: back at its old place
    assert same(list(q), [a, c, b])
    q.remove_request(c)
    with pytest.raises(ValueError):
        q.remove_request(c)
    q.remove_requests([b, c])  # absent c ignored
    assert same(list(q), [a])
    assert q.pop_request() is a
    d = Unhashable("d", prompt=1, client_id="y")
    q.add_request(d)
    e = Unhashable("e", prompt=1)
    # a restored (F=10); e is new (S=V=0, F=1); d's flow "y" still has
    # F_last=10 from the removed c (removal does not rewind): S=10, F=11.
    q.prepend_requests([a, e])
    assert len(q) == 3 and same(list(q), [e, a, d])
    assert q.tags(a)["finish"] == 10.0
    with pytest.raises(ValueError):
        q.add_request(d)
    assert len(q) == 3


def test_reads_inputs_once_at_add() -> None:
    q = WFQRequestQueue()
    r = Req("r", prompt=7, max_tokens=3, client_id="c", weight=2.0, arrival_time=4.0)
    q.add_request(r)
    r.weight = 100.0
    r.prompt_token_ids = []
    r.client_id = "other"
    t = q.tags(r)
    assert (t["flow"], t["weight"], t["finish"], t["arrival"]) == ("c", 2.0, 5.0, 4.0)


def test_token_and_flow_sources() -> None:
    vllm_like = SimpleNamespace(
        num_prompt_tokens=4, prompt_token_ids=None, sampling_params=SimpleNamespace(max_tokens=6)
    )
    assert request_tokens(vllm_like) == 10
    assert request_tokens(SimpleNamespace(prompt_token_ids=[1, 2], max_tokens=3)) == 5
    assert request_tokens(SimpleNamespace(prompt_token_ids=[1, 2])) == 2
    with pytest.raises(TypeError, match="num_prompt_tokens"):
        request_tokens(SimpleNamespace())
    # Configurable flow key: attribute name or callable; None = per request.
    q = WFQRequestQueue(flow_key="tenant")
    r = Req("r", prompt=10, tenant="t1")
    q.add_request(r)
    assert q.tags(r)["flow"] == "t1"
    q2 = WFQRequestQueue(flow_key=lambda req: req.request_id[0])
    r2 = Req("zz", prompt=10)
    q2.add_request(r2)
    assert q2.tags(r2)["flow"] == "z"
    q3 = WFQRequestQueue(flow_key=None)
    r3 = Req("r3", prompt=10, client_id="c")
    q3.add_request(r3)
    assert q3.tags(r3)["flow"] is None
    # Default: no client_id attribute -> the request alone.
    q4 = WFQRequestQueue()
    r4 = Req("r4", prompt=10)
    q4.add_request(r4)
    assert q4.tags(r4)["flow"] is None and q4.tags(r4)["weight"] == 1.0


@pytest.mark.parametrize("w", [0, 0.0, -2.0, math.nan, math.inf, -math.inf])
def test_bad_weight_value_error_queue_unchanged(w: float) -> None:
    q = WFQRequestQueue()
    ok = Req("ok", prompt=10, client_id="c")
    q.add_request(ok)
    before = (list(q), q.virtual_time, q.flow_last_finish("c"))
    bad = Req("bad", prompt=10, client_id="c", weight=w)
    with pytest.raises(ValueError, match="weight"):
        q.add_request(bad)
    with pytest.raises(ValueError, match="weight"):
        q.prepend_requests([Req("fine", prompt=10, client_id="c"), bad])
    assert (list(q), q.virtual_time, q.flow_last_finish("c")) == before


def test_bad_default_weight_and_flow_key() -> None:
    with pytest.raises(ValueError, match="default_weight"):
        WFQRequestQueue(default_weight=0.0)
    with pytest.raises(TypeError, match="flow_key"):
        WFQRequestQueue(flow_key=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight"):
        WFQRequestQueue().add_request(Req("r", prompt=10, weight="heavy"))


def test_weighted_clients_share_ratio() -> None:
    q = WFQRequestQueue()
    for i in range(400):
        q.add_request(Req(f"l{i}", prompt=16, client_id="light", arrival_time=float(i)))
    for i in range(100):
        q.add_request(Req(f"h{i}", prompt=16, client_id="heavy", weight=2.0))
    served = {"light": 0, "heavy": 0}
    for _ in range(150):
        served[q.pop_request().client_id] += 16
    assert served["heavy"] == 2 * served["light"]


def test_virtual_clock_option_through_factory() -> None:
    assert WFQRequestQueue().virtual_clock == "start"
    q = create_request_queue("wfq", virtual_clock="finish")
    assert isinstance(q, WFQRequestQueue) and q.virtual_clock == "finish"
    q2 = WFQRequestQueue("tenant", 2.0, virtual_clock="finish")
    assert q2.virtual_clock == "finish" and q2._flow_key == "tenant"
    assert "virtual_clock='finish'" in repr(q2)
    with pytest.raises(ValueError, match="virtual_clock.*fifo"):
        create_request_queue(SchedulingPolicy.WFQ, virtual_clock="fifo")
    with pytest.raises(ValueError, match="virtual_clock"):
        WFQRequestQueue(virtual_clock="Finish")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="virtual_clock"):
        WFQRequestQueue(virtual_clock=0)  # type: ignore[arg-type]


@pytest.mark.parametrize("clock", ["start", "finish"])
def test_requests_without_client_id_long_one_waits(clock: str) -> None:
    # The drop-in default: no client_id, every request is its own flow. A
    # steady stream of short requests (one arrives before each scheduling
    # step) starves a long one under "start"; "finish" bounds its wait.
    q = create_request_queue("wfq", virtual_clock=clock)
    long = Req("long", prompt=900, max_tokens=100)
    q.add_request(long)
    served_at = None
    for i in range(5000):
        q.add_request(Req(f"s{i}", prompt=8, max_tokens=2, arrival_time=float(i + 1)))
        if q.pop_request() is long:
            served_at = i + 1
            break
    if clock == "start":
        assert served_at is None and long in q
    else:
        assert served_at is not None and served_at <= 1000 // 10 + 1


def test_finish_clock_weighted_clients_share_ratio() -> None:
    q = WFQRequestQueue(virtual_clock="finish")
    for i in range(400):
        q.add_request(Req(f"l{i}", prompt=16, client_id="light", arrival_time=float(i)))
    for i in range(100):
        q.add_request(Req(f"h{i}", prompt=16, client_id="heavy", weight=2.0))
    served = {"light": 0, "heavy": 0}
    for _ in range(150):
        served[q.pop_request().client_id] += 16
    assert served["heavy"] == 2 * served["light"]
    # Preemption keeps the tags under either clock.
    r = q.pop_request()
    t = (q.virtual_time, r.client_id)
    q.prepend_request(r)
    assert q.peek_request() is r and (q.virtual_time, r.client_id) == t


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_prepend_requests_with_non_finite_arrival_adds_nothing(bad: float) -> None:
    """A batch holding one request with a NaN/inf arrival_time is rejected
    whole: the requests before it in the batch are not queued."""
    q = WFQRequestQueue()
    good = [Req(f"g{i}", prompt=10, arrival_time=float(i)) for i in range(3)]
    bad_req = Req("bad", prompt=10, arrival_time=bad)
    with pytest.raises(ValueError, match="arrival_time"):
        q.prepend_requests([*good, bad_req])
    assert len(q) == 0
    with pytest.raises(ValueError, match="arrival_time"):
        q.add_request(bad_req)
    assert len(q) == 0
