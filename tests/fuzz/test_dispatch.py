"""The dispatchers (D2LPM, RoundRobin, LeastLoaded, ClientRoundRobin,
PrefixAffinity) under hostile input.

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
    PROBES,
    Boom,
    attempt,
    hostile,
    must_fail,
)

DISPATCHERS: list[Callable[[], Any]] = [
    lambda: fairq.D2LPM(3, worker_quantum=16.0),
    lambda: fairq.D2LPM(3, worker_quantum=5e-324, w_e=1e308, w_q=1e308),
    lambda: fairq.D2LPM(3, worker_quantum=math.inf, w_e=1e308, w_q=1e308),
    lambda: fairq.RoundRobin(3),
    lambda: fairq.LeastLoaded(3),
    lambda: fairq.ClientRoundRobin(3),
    lambda: fairq.PrefixAffinity(3),
]


def disp_snap(d: Any) -> Any:
    extra: list[Any] = []
    if isinstance(d, fairq.D2LPM):
        extra = [d.deficit(c, w) for c in d.clients() for w in range(d.num_workers)]
    return (
        len(d),
        d.queue_sizes,
        d.dispatched_counts,
        d.tree_nodes,
        d.clients(),
        [d.longest_match(p) for p in PROBES],
        extra,
    )


@FUZZ
@given(which=st.integers(0, len(DISPATCHERS) - 1), data=st.data())
def test_dispatchers_hostile(which: int, data: st.DataObject) -> None:
    d = DISPATCHERS[which]()
    live = []
    for i in range(4):
        d.dispatch(i, f"c{i % 2}", PROBES[i])
        live.append(i)

    def snap() -> Any:
        return disp_snap(d)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(
            st.sampled_from(["dispatch", "finish", "evict", "query", "deficit", "valid"])
        )
        h = data.draw(hostile)
        if op == "dispatch":
            args: list[Any] = ["new", "c", [1, 2]]
            pos = data.draw(st.integers(0, 2))
            args[pos] = h
            ok, _ = attempt(snap, d.dispatch, *args)
            if ok:
                live.append(args[0])
            must_fail(snap, d.dispatch, live[0], "c", [1], exc=ValueError) if live else None
        elif op == "finish":
            target = data.draw(st.sampled_from([*live, h]))
            ok, _ = attempt(snap, d.on_finish, target, data.draw(st.sampled_from([3, h])))
            if ok:
                live.remove(target)
        elif op == "evict":
            args = [0, PROBES[0], 0]
            pos = data.draw(st.integers(0, 2))
            args[pos] = h
            attempt(snap, d.on_evict, *args)
        elif op == "query":
            attempt(snap, d.worker_of, h)
            attempt(snap, d.longest_match, h)
            attempt(snap, d.held_len, h, PROBES[0])
            attempt(snap, d.held_len, 0, h)
            attempt(snap, d.__contains__, h)
        elif op == "deficit" and isinstance(d, fairq.D2LPM):
            attempt(snap, d.deficit, h, 0)
            attempt(snap, d.deficit, "c0", h)
        else:
            w = d.dispatch("tmp", "c0", [1, 2, 3])
            assert d.on_finish("tmp", 1) == w
    for r in live:
        d.on_finish(r, 1)
    assert len(d) == 0 and sum(d.queue_sizes) == 0


def test_dispatchers_messages_name_fields() -> None:
    for make in DISPATCHERS:
        d = make()
        d.dispatch(1, "c", [1, 2])

        def snap(d: Any = d) -> Any:
            return disp_snap(d)

        must_fail(snap, d.dispatch, 1, "c", [1], exc=ValueError)
        must_fail(snap, d.dispatch, 2, "c", [-1], exc=ValueError, field="tokens")
        must_fail(snap, d.dispatch, 1.5, "c", [1], exc=TypeError, field="request_id")
        must_fail(snap, d.on_finish, 99, 1, exc=KeyError)
        for v in (-1, 2**64, 2**200):
            must_fail(snap, d.on_finish, 1, v, exc=ValueError, field="output_tokens")
            must_fail(snap, d.on_evict, v, [1], exc=(ValueError, IndexError), field="worker")
            must_fail(snap, d.held_len, v, [1], exc=(ValueError, IndexError), field="worker")
        must_fail(snap, d.on_evict, 0, [1], -1, exc=ValueError, field="kept")
        must_fail(snap, d.on_evict, 0, [1], 2**64, exc=ValueError, field="kept")
        must_fail(snap, d.on_evict, 7, [1], exc=IndexError, field="worker")
    for bad in (0, -1, 2**64, 2**200, 10**6):
        with pytest.raises(ValueError, match="num_workers"):
            fairq.RoundRobin(bad)
        with pytest.raises(ValueError, match="num_workers"):
            fairq.D2LPM(bad, 1.0)
    for q in (0.0, -1.0, math.nan, -math.inf, 2**2000):  # +inf is allowed
        with pytest.raises(ValueError, match="worker_quantum"):
            fairq.D2LPM(2, q)
    for kw in ("abs_threshold", "rel_threshold", "match_threshold"):
        for v in (math.nan, -1.0, 2**2000):
            with pytest.raises(ValueError, match=kw):
                fairq.PrefixAffinity(2, **{kw: v})
    with pytest.raises(ValueError, match="dispatcher"):
        fairq.dispatch.make_dispatcher("nope", 2)


def test_dispatch_unknown_worker_and_client() -> None:
    d = fairq.D2LPM(2, 10.0)
    d.dispatch("r", "alice", [1, 2, 3])

    def snap() -> Any:
        return disp_snap(d)

    must_fail(snap, d.deficit, "alice", 5, exc=IndexError, field="worker")
    ok, v = attempt(snap, d.deficit, "nobody", 0)
    assert not ok or v == 0.0


@pytest.mark.parametrize("qw", [5e-324, 1.0, 1e300, math.inf])
def test_d2lpm_extreme_weights_no_panic(qw: float) -> None:
    """Regression: with w_e * tokens overflowing to inf a deficit became -inf,
    the refill turned it into NaN, no worker was eligible and argmin panicked
    (PanicException); also the refill count overflowed (debug builds)."""
    d = fairq.D2LPM(3, qw, w_e=1e308, w_q=1e308)
    for i in range(30):
        assert 0 <= d.dispatch(i, "a", [1, 2, 3, i]) < 3
        if i % 3 == 0:
            d.on_finish(i, 2**62)
    assert not any(math.isnan(d.deficit("a", w)) for w in range(3))


def test_d2lpm_tiny_quantum_is_not_infinite_credit() -> None:
    """Regression: with worker_quantum=5e-324 a refill computed k = inf rounds
    and every deficit became +inf (unbounded affinity, deficits meaningless)."""
    d = fairq.D2LPM(2, 5e-324)
    for i in range(6):
        d.dispatch(i, "a", [1, 2, 3])
    assert all(math.isfinite(d.deficit("a", w)) for w in range(2))


@FUZZ
@given(name=hostile, n=hostile)
def test_make_dispatcher_hostile(name: Any, n: Any) -> None:
    """Regression: a non-str name raised AttributeError (``name.lower()``)."""
    ok, e = attempt(lambda: None, fairq.dispatch.make_dispatcher, name, 2, user_exc=False)
    if not ok and not isinstance(name, str):
        assert isinstance(e, TypeError) and "name" in str(e), e
    ok, e = attempt(lambda: None, fairq.dispatch.make_dispatcher, "d2lpm", n)
    if not ok and not isinstance(e, Boom):
        assert "num_workers" in str(e), e
