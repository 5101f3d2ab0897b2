"""fairq.DualPhaseQueue under hostile input.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairq

from fuzz.hostile import (
    FUZZ,
    FlakyHash,
    attempt,
    hostile,
    must_fail,
)


def dp_snap(q: Any) -> Any:
    return (
        len(q),
        [id(x) for x in q.ids("think")],
        [id(x) for x in q.ids("output")],
        q.metrics(),
    )


def _forget(ids: list[Any], h: Any) -> None:
    """Drop the first id equal to ``h`` (``list.remove`` compares with
    ``==``, which numpy broadcasts against a tuple id: an array, no bool).
    The same object counts as equal, as in the queue's own lookup: a NaN id
    is not ``==`` to itself."""
    for i, x in enumerate(ids):
        try:
            same = x is h or bool(x == h)
        except ValueError:
            same = False
        if same:
            del ids[i]
            return
    raise AssertionError(f"removed {h!r}, which the test never added")


@FUZZ
@given(data=st.data())
def test_dualphase_hostile(data: st.DataObject) -> None:
    q = fairq.DualPhaseQueue()
    ids: list[Any] = ["r0", 1, ("t", 2)]
    for i, r in enumerate(ids):
        q.add(r, item=i, phase="think" if i % 2 else "output")

    def snap() -> Any:
        return dp_snap(q)

    for _ in range(data.draw(st.integers(1, 8))):
        ops = ["add", "remove", "event", "phase", "sched", "ids", "valid"]
        op = data.draw(st.sampled_from(ops))
        h = data.draw(hostile)
        if op == "add":
            which = data.draw(st.sampled_from(["id", "phase", "dup"]))
            if which == "id":
                ok, _ = attempt(snap, q.add, h)
                if ok:
                    ids.append(h)
            elif which == "phase":
                must_fail(snap, q.add, "new", None, h, field="phase")
            else:
                must_fail(snap, q.add, data.draw(st.sampled_from(ids)), exc=ValueError)
        elif op == "remove":
            ok, _ = attempt(snap, q.remove, h)
            if ok:
                _forget(ids, h)
        elif op == "event":
            attempt(snap, q.on_phase_event, h)
        elif op == "phase":
            attempt(snap, q.phase_of, h)
            attempt(snap, q.__contains__, h)
        elif op == "sched":
            args = [2, 2]
            pos = data.draw(st.integers(0, 1))
            args[pos] = h
            ok, e = attempt(snap, q.schedule, *args)
            if not ok and isinstance(e, ValueError):
                assert ("output_budget", "available_blocks")[pos] in str(e), e
        elif op == "ids":
            attempt(snap, q.ids, h)
            attempt(snap, q.len, h)
        else:
            q.schedule(3, 3)
    for r in list(ids):
        q.remove(r)
    assert len(q) == 0


@pytest.mark.parametrize("fail_on", [1, 2, 3])
def test_dualphase_flaky_hash_add(fail_on: int) -> None:
    q = fairq.DualPhaseQueue()
    q.add("x")

    def snap() -> Any:
        return dp_snap(q)

    h = FlakyHash(fail_on)
    h.armed = True
    attempt(snap, q.add, h)
    h.armed = False
    if h in q:
        assert q.phase_of(h) == "think"
        q.remove(h)
    else:
        with pytest.raises(KeyError):
            q.phase_of(h)
    assert q.remove("x") is None and len(q) == 0


@pytest.mark.parametrize("fail_on", [1, 2, 3])
@pytest.mark.parametrize("op", ["remove", "on_phase_event", "phase_of"])
def test_dualphase_flaky_hash_after_add(fail_on: int, op: str) -> None:
    """Regression: remove() dropped the request from the core, then failed to
    forget its id (hash raised), so phase_of() panicked ('interned')."""
    q = fairq.DualPhaseQueue()
    h = FlakyHash(fail_on)
    q.add(h, item="payload")
    q.add("y", phase="output")

    def snap() -> Any:
        return dp_snap(q)

    h.armed = True
    ok, _ = attempt(snap, getattr(q, op), h)
    h.armed = False
    if h in q:
        q.phase_of(h)
        assert q.remove(h) == "payload"
    assert q.ids("output") == ["y"] and len(q) == 1
    assert q.schedule(2, 2) == [("y", None)]


def test_dualphase_messages_name_fields() -> None:
    q = fairq.DualPhaseQueue()
    q.add("a")

    def snap() -> Any:
        return dp_snap(q)

    for v in (-1, 2**64, 2**200):
        must_fail(snap, q.schedule, v, 1, exc=ValueError, field="output_budget")
        must_fail(snap, q.schedule, 1, v, exc=ValueError, field="available_blocks")
    must_fail(snap, q.schedule, 1.5, 1, exc=TypeError, field="output_budget")
    must_fail(snap, q.add, [], exc=TypeError)
    must_fail(snap, q.add, "b", None, "thinking", exc=ValueError, field="phase")
    must_fail(snap, q.remove, "zz", exc=KeyError)
    for m in (math.nan, math.inf, 0.5, -1, 2**2000):
        with pytest.raises(ValueError, match="think_batch_multiplier"):
            fairq.DualPhaseQueue(think_batch_multiplier=m)
    for r in (-1, 2**64):
        with pytest.raises(ValueError, match="min_think_reservation"):
            fairq.DualPhaseQueue(min_think_reservation=r)


def test_reentrant_hash_dualphase() -> None:
    q = fairq.DualPhaseQueue()
    q.add("a")

    class Reenter:
        def __hash__(self) -> int:
            if "a" in q:
                q.remove("a")
            return 1

    # Ids are hashed while the queue is not borrowed: the hash's own call
    # runs first, then the add, each whole.
    r = Reenter()
    q.add(r)
    assert "a" not in q and r in q and len(q) == 1
