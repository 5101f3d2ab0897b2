"""One request-id rule in every API (rust/request_id.rs, one parser in
rust/python/request_id.rs).

Every API that takes a request id (the local schedulers, the dispatchers,
vLLM's priority queue through ``request.request_id``) must give the same id
the same outcome: accepted as the same id, or rejected with the same
exception and message. The rule: a ``str`` (lone surrogates included) or an
integer within 64 bits (``int`` subclasses and ``__index__`` integers such as
numpy's); not ``bool``; anything else is a ``TypeError``, an integer out of
range a ``ValueError``, both naming ``request_id``.

Not here, on purpose: ``DualPhaseQueue`` keys any hashable Python object
(its ids never reach the core, which sees only its own ``u64`` keys), and
vLLM's FCFS queue never reads ``request_id``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairq
from fairq.vllm import PriorityRequestQueue

from reference.vllm import Req


class Color(enum.IntEnum):
    RED = 7


class MyInt(int):
    pass


class Index:
    """Not an int, but an integer by ``__index__``."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


def _scheduler(make: Callable[[], Any]) -> Callable[[Any], Any]:
    def use(rid: Any) -> Any:
        s = make()
        s.add(rid, "c", [1, 2])
        (a,) = s.schedule(10)
        s.finish(a.request_id)  # the id handed back is the same id
        s._check()
        return a.request_id

    return use


def _dispatcher(make: Callable[[], Any]) -> Callable[[Any], Any]:
    def use(rid: Any) -> Any:
        d = make()
        w = d.dispatch(rid, "c", [1, 2])
        assert rid in d and d.worker_of(rid) == w
        d.on_finish(rid, 1)
        assert rid not in d
        return None

    return use


def _vllm_priority(rid: Any) -> Any:
    q = PriorityRequestQueue()
    r = Req(rid, priority=0, arrival_time=0.0)
    q.add_request(r)
    assert r in q and q.pop_request() is r
    return None


APIS: dict[str, Callable[[Any], Any]] = {
    "FCFS": _scheduler(fairq.FCFS),
    "LPM": _scheduler(lambda: fairq.LPM(fairq.RadixTree())),
    "VTC": _scheduler(fairq.VTC),
    "DLPM": _scheduler(lambda: fairq.DLPM(fairq.RadixTree(), 10)),
    "D2LPM": _dispatcher(lambda: fairq.D2LPM(2, 100)),
    "RoundRobin": _dispatcher(lambda: fairq.RoundRobin(2)),
    "LeastLoaded": _dispatcher(lambda: fairq.LeastLoaded(2)),
    "ClientRoundRobin": _dispatcher(lambda: fairq.ClientRoundRobin(2)),
    "PrefixAffinity": _dispatcher(lambda: fairq.PrefixAffinity(2)),
    "vllm.PriorityRequestQueue": _vllm_priority,
}

# (id, the id it is: the int or str every API treats it as)
GOOD: list[tuple[Any, Any]] = [
    (0, 0),
    (-1, -1),
    (2**63 - 1, 2**63 - 1),
    (-(2**63), -(2**63)),
    ("r", "r"),
    ("", ""),
    ("é\u4e2d\U0001f600", "é\u4e2d\U0001f600"),
    ("\ud800", "\ud800"),
    ("a\udcffb", "a\udcffb"),
    ("\udc80\ud800", "\udc80\ud800"),
    (np.int64(5), 5),
    (np.uint8(3), 3),
    (np.int32(-4), -4),
    (Color.RED, 7),
    (MyInt(9), 9),
    (Index(11), 11),
]

# (id, exception)
BAD: list[tuple[Any, type[BaseException]]] = [
    (True, TypeError),
    (False, TypeError),
    (np.bool_(True), TypeError),
    (1.5, TypeError),
    (2.0, TypeError),
    (np.float64(1.0), TypeError),
    (None, TypeError),
    (b"x", TypeError),
    (bytearray(b"x"), TypeError),
    ([1], TypeError),
    ((1,), TypeError),
    (object(), TypeError),
    (2**63, ValueError),
    (-(2**63) - 1, ValueError),
    (2**200, ValueError),
    (np.uint64(2**64 - 1), ValueError),
    (Index(2**64), ValueError),
]


def outcome(api: Callable[[Any], Any], rid: Any) -> tuple[str, Any]:
    try:
        return ("ok", api(rid))
    except Exception as e:  # noqa: BLE001 - compared across APIs
        return ("err", (type(e), str(e)))


@pytest.mark.parametrize("rid,as_id", GOOD, ids=repr)
def test_good_ids_are_accepted_by_every_api(rid: Any, as_id: Any) -> None:
    for name, api in APIS.items():
        kind, got = outcome(api, rid)
        assert kind == "ok", (name, got)
        if got is not None:  # schedulers hand the id back: a plain int or str
            assert got == as_id and type(got) is type(as_id), (name, got)


@pytest.mark.parametrize("rid,exc", BAD, ids=repr)
def test_bad_ids_fail_the_same_way_in_every_api(rid: Any, exc: type[BaseException]) -> None:
    outcomes = {name: outcome(api, rid) for name, api in APIS.items()}
    first = next(iter(outcomes.values()))
    assert first[0] == "err" and first[1][0] is exc, outcomes
    assert "request_id" in first[1][1]
    for name, got in outcomes.items():
        assert got == first, (name, got, first)


def test_equal_ids_are_one_id() -> None:
    """``5``, ``np.int64(5)`` and ``IntEnum`` 5 collide; ``"5"`` does not."""
    s = fairq.FCFS()
    s.add(np.int64(5), "c", [1])
    with pytest.raises(ValueError, match="request_id 5 is already"):
        s.add(5, "c", [1])
    s.add("5", "c", [1])
    d = fairq.RoundRobin(2)
    d.dispatch(5, "c", [1])
    assert np.int64(5) in d and "5" not in d
    with pytest.raises(ValueError, match="already in flight"):
        d.dispatch(MyInt(5), "c", [1])


def test_lone_surrogate_ids_keep_code_point_order() -> None:
    # the vLLM priority queue breaks ties by request id: strings by code point
    ids = ["\ud7ff", "\ud800", "\udfff", "\ue000", "a", "\U0001f600"]
    q = PriorityRequestQueue()
    reqs = [Req(i, priority=0, arrival_time=0.0) for i in reversed(ids)]
    for r in reqs:
        q.add_request(r)
    assert [q.pop_request().request_id for _ in ids] == sorted(ids)


@given(st.one_of(st.integers(-(2**64), 2**64), st.text(), st.floats(), st.booleans()))
def test_random_ids_agree_across_apis(rid: Any) -> None:
    outcomes = {name: outcome(api, rid) for name, api in APIS.items()}
    kinds = {kind for kind, _ in outcomes.values()}
    assert len(kinds) == 1, outcomes
    if kinds == {"err"}:
        assert len({got for _, got in outcomes.values()}) == 1, outcomes
