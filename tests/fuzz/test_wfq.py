"""fairq.WFQQueue under hostile input.

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
    Boom,
    FlakyHash,
    Item,
    attempt,
    hostile,
    must_fail,
)


def wfq_snap(q: Any) -> Any:
    items = list(q)
    return (
        len(q),
        [id(x) for x in items],
        [q.times(x) for x in items],
        q.virtual_time,
        q.flow_count,
    )


@FUZZ
@given(data=st.data(), clock=st.sampled_from(["start", "finish"]))
def test_wfq_queue_hostile(data: st.DataObject, clock: str) -> None:
    q = fairq.WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    items = [Item() for _ in range(4)]
    for i, it in enumerate(items):
        q.add(it, tokens=10 + i, flow=f"f{i % 2}", weight=1.0 + i)
    popped = q.pop()

    def snap() -> Any:
        return wfq_snap(q)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(
            st.sampled_from(
                ["add", "prepend", "remove", "discard", "update", "tags", "flow", "forget", "valid"]
            )
        )
        h = data.draw(hostile)
        target = data.draw(st.sampled_from([*items, popped, h]))
        if op == "add":
            kw: dict[str, Any] = {"tokens": 5, "flow": "f", "weight": 1.0, "arrival": 0.0}
            field = data.draw(st.sampled_from(list(kw)))
            kw[field] = h
            ok, e = attempt(snap, q.add, Item(), **kw, field=None)
            if not ok and field != "flow" and not isinstance(e, Boom):
                assert field in str(e) or "finish" in str(e), e
        elif op == "prepend":
            kw = {}
            if data.draw(st.booleans()):
                kw[data.draw(st.sampled_from(["tokens", "flow", "weight", "arrival"]))] = h
            attempt(snap, q.prepend, target, **kw)
        elif op == "remove":
            attempt(snap, q.remove, target)
        elif op == "discard":
            attempt(snap, q.discard, target)
        elif op == "update":
            attempt(snap, q.update_remaining, target, h)
        elif op == "tags":
            attempt(snap, q.tags, target)
            attempt(snap, q.times, target)
        elif op == "flow":
            attempt(snap, q.flow_last_finish, h)
        elif op == "forget":
            attempt(snap, q.forget, h)
            attempt(snap, q.remembers, h)
        else:
            it = Item()
            q.add(it, tokens=3, flow="v")
            assert it in q
            q.remove(it)
    n = len(q)
    vt = q.virtual_time
    out = [q.pop() for _ in range(n)]
    assert len(out) == n  # WFQQueue, like a deque, may hold an item twice
    assert q.virtual_time >= vt
    must_fail(snap, q.pop, exc=IndexError)
    must_fail(snap, q.peek, exc=IndexError)


def test_wfq_messages_name_fields() -> None:
    q = fairq.WFQQueue()
    q.add(Item(), tokens=1)

    def snap() -> Any:
        return wfq_snap(q)

    for w in (0, -1, math.nan, math.inf, 2**2000):
        must_fail(snap, q.add, Item(), tokens=1, weight=w, exc=ValueError, field="weight")
    for t in (-1, math.nan, math.inf, 2**2000):
        must_fail(snap, q.add, Item(), tokens=t, exc=ValueError, field="tokens")
    for a in (math.nan, math.inf, 2**2000):
        must_fail(snap, q.add, Item(), tokens=1, arrival=a, exc=ValueError, field="arrival")
    must_fail(snap, q.add, Item(), tokens="1", exc=TypeError, field="tokens")
    must_fail(snap, q.add, Item(), tokens=1, flow=[], exc=TypeError)
    with pytest.raises(ValueError, match="virtual_clock"):
        fairq.WFQQueue(virtual_clock="bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="virtual_clock"):
        fairq.WFQQueue(virtual_clock=3)  # type: ignore[arg-type]


def test_wfq_flow_with_raising_eq() -> None:
    """A flow key whose __eq__ raises must not corrupt the queue."""

    class EvilFlow:
        def __hash__(self) -> int:
            return 7

        def __eq__(self, other: object) -> bool:
            raise Boom("eq exploded")

    q = fairq.WFQQueue()
    q.add(Item(), tokens=1, flow=EvilFlow())

    def snap() -> Any:
        return wfq_snap(q)

    attempt(snap, q.add, Item(), tokens=1, flow=EvilFlow())
    attempt(snap, q.flow_last_finish, EvilFlow())
    q.pop()
    assert len(q) == 0


@pytest.mark.parametrize("fail_on", [1, 2, 3])
def test_wfq_flaky_hash_flow(fail_on: int) -> None:
    q = fairq.WFQQueue()
    q.add(Item(), tokens=2, flow="x")

    def snap() -> Any:
        return wfq_snap(q)

    f = FlakyHash(fail_on)
    f.armed = True
    ok, _ = attempt(snap, q.add, Item(), tokens=3, flow=f)
    f.armed = False
    n = len(q)
    assert [q.pop() for _ in range(n)] and not q
