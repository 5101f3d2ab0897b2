"""The local schedulers (FCFS, LPM, VTC, DLPM) under hostile input.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairq

from fuzz.hostile import (
    FUZZ,
    attempt,
    hostile,
    must_fail,
)

SCHEDULERS: list[Callable[[], Any]] = [
    lambda: fairq.FCFS(),
    lambda: fairq.FCFS(fairq.RadixTree()),
    lambda: fairq.LPM(fairq.RadixTree()),
    lambda: fairq.VTC(fairq.RadixTree(), w_in=1.0, w_out=2.0),
    lambda: fairq.DLPM(fairq.RadixTree(), quantum=8.0),
    lambda: fairq.DLPM(fairq.RadixTree(), quantum=5e-324, w_e=1e308, w_q=1e308),
]


def sched_snap(s: Any) -> Any:
    cs = s.clients()
    extra: list[Any] = []
    if isinstance(s, fairq.VTC):
        extra = [s.counter(c) for c in cs]
    if isinstance(s, fairq.DLPM):
        extra = [s.deficit(c) for c in cs] + [s.refills]
    return (
        len(s),
        s.num_running,
        cs,
        [(s.service(c), s.weight(c), s.num_waiting(c)) for c in cs],
        extra,
    )


@FUZZ
@given(which=st.integers(0, len(SCHEDULERS) - 1), data=st.data())
def test_schedulers_hostile(which: int, data: st.DataObject) -> None:
    s = SCHEDULERS[which]()
    for i in range(4):
        s.add(f"r{i}", f"c{i % 2}", [1, 2, 3, i], item=i)
    s.set_weight("c1", 2.0)
    running = [a.request_id for a in s.schedule(8)]

    def snap() -> Any:
        return sched_snap(s)

    def sattempt(*a: Any, **kw: Any) -> tuple[bool, Any]:
        return attempt(*a, **kw)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(
            st.sampled_from(
                ["add", "remove", "schedule", "charge", "finish", "weight", "query", "valid"]
            )
        )
        h = data.draw(hostile)
        if op == "add":
            args: list[Any] = ["new", "c9", [4, 5], None, None]
            pos = data.draw(st.integers(0, 4))
            args[pos] = h
            ok, _ = sattempt(snap, s.add, *args)
            if ok:
                s.remove(args[0])
            # duplicate id
            must_fail(snap, s.add, "r0" if "r0" in running or len(s) else "r3", "c0", [1])
        elif op == "remove":
            sattempt(snap, s.remove, h)
        elif op == "schedule":
            fn = s.schedule if data.draw(st.booleans()) else s.schedule_within_credit
            if data.draw(st.booleans()):
                ok, r = sattempt(snap, fn, h)
            else:
                ok, r = sattempt(snap, fn, 8, h)
            if ok:
                running += [a.request_id for a in r]
        elif op == "charge":
            target = data.draw(st.sampled_from([*running, h])) if running else h
            sattempt(snap, s.charge_output, target, h)
            sattempt(snap, s.charge_output, h)
        elif op == "finish":
            ok, _ = sattempt(snap, s.finish, h)
            if ok:
                running.remove(h)
        elif op == "weight":
            ok, _ = sattempt(snap, s.set_weight, "c0", h)
            sattempt(snap, s.set_weight, h, 1.0)
            for m in ("service", "weight", "num_waiting"):
                sattempt(snap, getattr(s, m), h)
        elif op == "query":
            for m in ("counter", "deficit"):
                if hasattr(s, m):
                    sattempt(snap, getattr(s, m), h)
        else:
            s.add("tmp", "c0", [7])
            assert s.remove("tmp") is None
        s._check()
    for r in list(running):
        s.finish(r)
    while s.schedule(10**6):
        pass


def test_schedulers_messages_name_fields() -> None:
    for make in SCHEDULERS:
        s = make()
        s.add("a", "c", [1, 2])

        def snap(s: Any = s) -> Any:
            return sched_snap(s)

        must_fail(snap, s.add, "a", "c", [1], exc=ValueError, field="a")
        must_fail(snap, s.add, "b", "c", [1, -1], exc=ValueError, field="tokens")
        must_fail(snap, s.add, 1.5, "c", [1], exc=TypeError, field="request_id")
        must_fail(snap, s.add, 2**64, "c", [1], exc=ValueError, field="request_id")
        must_fail(snap, s.remove, "zz", exc=KeyError)
        must_fail(snap, s.finish, "a", exc=KeyError)
        must_fail(snap, s.schedule, -1, exc=ValueError, field="token_budget")
        for w in (0.0, -1.0, math.nan, math.inf):
            must_fail(snap, s.set_weight, "c", w, exc=ValueError, field="w")


def test_schedulers_huge_ints_name_field() -> None:
    s = fairq.FCFS()
    s.add("a", "c", [1])

    def snap() -> Any:
        return sched_snap(s)

    must_fail(snap, s.schedule, 2**64, exc=ValueError, field="token_budget")
    must_fail(snap, s.schedule, 8, 2**64, exc=ValueError, field="max_requests")
    must_fail(snap, s.schedule, 8, 1.5, exc=TypeError, field="max_requests")
    (a,) = s.schedule(8)
    must_fail(snap, s.charge_output, a.request_id, 2**64, exc=ValueError, field="n_tokens")
    must_fail(snap, s.charge_output, a.request_id, -(2**70), exc=ValueError, field="n_tokens")
    must_fail(snap, s.recharge_extend, a.request_id, 2**64, exc=ValueError, field="extend_len")
    must_fail(snap, s.recharge_extend, a.request_id, "1", exc=TypeError, field="extend_len")


def test_schedulers_huge_float_names_field() -> None:
    s = fairq.FCFS()
    s.add("a", "c", [1])

    def snap() -> Any:
        return sched_snap(s)

    must_fail(snap, s.set_weight, "c", 2**2000, exc=ValueError, field="w")
    for make, kw in [
        (fairq.VTC, "w_in"),
        (fairq.VTC, "w_out"),
        (fairq.DLPM, "quantum"),
        (fairq.DLPM, "w_e"),
        (fairq.DLPM, "w_q"),
    ]:
        args: dict[str, Any] = {"quantum": 1.0} if make is fairq.DLPM else {}
        args[kw] = 2**2000
        with pytest.raises(ValueError, match=kw):
            make(fairq.RadixTree(), **args)


def test_dlpm_extreme_weights_deficit_stays_finite() -> None:
    s = fairq.DLPM(fairq.RadixTree(), 1.0, w_e=1e308, w_q=1e308)
    s.add("a", "x", [1] * 10)
    s.schedule(100)
    s.add("b", "x", [2] * 3)
    s.schedule(100)
    assert math.isfinite(s.deficit("x"))
    s.charge_output("a", 10**6)
    s.recharge_extend("a", 0)
    s.recharge_extend("a", 10)
    assert math.isfinite(s.deficit("x"))
    s._check()


def test_dlpm_tiny_quantum_is_not_infinite_credit() -> None:
    s = fairq.DLPM(fairq.RadixTree(), 5e-324)
    for i in range(6):
        s.add(i, "a", [1, 2, 3])
        s.add(10 + i, "b", [4, 5])
    got = s.schedule(100)
    assert len(got) == 12
    assert all(math.isfinite(s.deficit(c)) for c in ("a", "b"))
    s._check()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add("a", "\ud800", [1]),
        lambda s: s.set_weight("\ud800", 1.0),
        lambda s: s.service("\ud800"),
    ],
)
def test_schedulers_lone_surrogates_name_field(call: Callable[[Any], Any]) -> None:
    s = fairq.FCFS()
    with pytest.raises(ValueError) as ei:
        call(s)
    assert "request_id" in str(ei.value) or "client" in str(ei.value)
