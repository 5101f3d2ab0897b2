"""Adversarial (fuzz) tests over every public Python API of fairq.

Each test builds a small valid structure, then feeds hostile values into the
argument positions of its methods: NaN, +-inf, -1, 0, huge ints (2**64,
2**200), floats where ints are expected, bools, None, strings, bytes of odd
length, numpy arrays of the wrong dtype / ndim, objects whose attribute access
or hashing raises, unhashable objects, duplicate ids, unknown names and
reentrant callbacks. For every call that fails we check that

* the exception is one of the documented types (ValueError, TypeError,
  KeyError, IndexError, fairq.QueueFull): never pyo3's PanicException, a
  SystemError, or any other BaseException;
* where the test knows which argument is bad, the message names that field;
* a snapshot of everything observable (len, iteration order, stats, metrics,
  deficits, counters, tree size and match results) is identical afterwards;

and valid operations interleaved with the hostile ones keep working.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq import QueueFull
from fairq._core import as_tokens
from fairq.vllm import FCFSRequestQueue, PriorityRequestQueue, create_request_queue
from fairq.vllm.wfq import WFQRequestQueue

ALLOWED: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    QueueFull,
)

FUZZ = settings(max_examples=150, deadline=None)


# ------------------------------------------------------------ hostile values


class Boom(Exception):
    """Raised by hostile objects; a user exception that must propagate as is."""


class RaisingAttrs:
    """Every attribute access raises a user exception."""

    def __getattr__(self, name: str) -> Any:
        raise Boom(f"attribute {name} exploded")


class Bare:
    """An object with no attributes at all."""

    __slots__ = ()


class Unhashable:
    __hash__ = None  # type: ignore[assignment]


class FlakyHash:
    """Hashes fine until armed; then the ``fail_on``-th hash call raises."""

    def __init__(self, fail_on: int = 2) -> None:
        self.armed = False
        self.calls = 0
        self.fail_on = fail_on

    def __hash__(self) -> int:
        if self.armed:
            self.calls += 1
            if self.calls == self.fail_on:
                raise Boom("hash exploded")
        return 12345

    def __eq__(self, other: object) -> bool:
        return other is self


class BadIndex:
    """Pretends to be an int via __index__, which raises."""

    def __index__(self) -> int:
        raise Boom("__index__ exploded")


class BadFloat:
    def __float__(self) -> float:
        raise Boom("__float__ exploded")


class BadIter:
    def __iter__(self) -> Any:
        yield "a"
        raise Boom("iteration exploded")


def hostile_values() -> list[Any]:
    """Fresh hostile values (fresh objects each call)."""
    return [
        math.nan,
        math.inf,
        -math.inf,
        -1,
        0,
        -1.0,
        0.0,
        1.5,
        2**31,
        2**63,
        2**64,
        2**200,
        -(2**200),
        1e308,
        5e-324,
        True,
        False,
        None,
        "",
        "x",
        "\ud800",
        b"\x01\x02\x03",
        b"",
        bytearray(b"\x00" * 5),
        [],
        [1, -1],
        [2**40],
        [1.5],
        ["a"],
        [None],
        {},
        {"a": 1},
        set(),
        (1, 2),
        np.array([1.5, 2.0]),
        np.zeros((2, 2), dtype=np.int64),
        np.array(3),
        np.array([-1], dtype=np.int64),
        np.array([2**40], dtype=np.int64),
        np.array([1, 2], dtype=np.uint8),
        np.array([True, False]),
        np.array(["a"]),
        np.array([1, None], dtype=object),
        np.float64("nan"),
        np.int64(-5),
        RaisingAttrs(),
        Bare(),
        Unhashable(),
        BadIndex(),
        BadFloat(),
        BadIter(),
        object(),
        lambda *a: None,
        slice(1),
    ]


N_HOSTILE = len(hostile_values())
hostile = st.integers(0, N_HOSTILE - 1).map(lambda i: hostile_values()[i])


def _check_exc(e: BaseException, field: str | None, expect_user: bool) -> None:
    name = type(e).__name__
    assert name != "PanicException", f"Rust panic crossed the FFI: {e!r}"
    assert isinstance(e, Exception), f"non-Exception BaseException escaped: {e!r}"
    assert not isinstance(e, SystemError), f"SystemError: {e!r}"
    if isinstance(e, Boom) and expect_user:
        return
    assert isinstance(e, ALLOWED), f"undocumented exception {name}: {e}"
    if field is not None:
        msg = str(e.args[0]) if e.args else str(e)
        assert field in msg or field in str(e), f"{name} message does not name {field!r}: {e}"


def attempt(
    snap: Callable[[], Any],
    fn: Callable[..., Any],
    *args: Any,
    field: str | None = None,
    user_exc: bool = True,
    known: tuple[type[BaseException], ...] = (),
    **kw: Any,
) -> tuple[bool, Any]:
    """Call ``fn``; on failure check the exception and that ``snap()`` is unchanged.

    Returns ``(ok, result_or_exception)``. ``user_exc``: a :class:`Boom` raised
    by a hostile argument may propagate (it must still change nothing).
    """
    before = snap()
    try:
        r = fn(*args, **kw)
    except BaseException as e:  # noqa: BLE001 - we check its type below
        if not isinstance(e, known):
            _check_exc(e, field, user_exc)
        after = snap()
        assert after == before, f"state changed by failing {getattr(fn, '__name__', fn)}: {e!r}"
        return False, e
    return True, r


def must_fail(
    snap: Callable[[], Any],
    fn: Callable[..., Any],
    *args: Any,
    exc: type[BaseException] | tuple[type[BaseException], ...] = ALLOWED,
    field: str | None = None,
    **kw: Any,
) -> BaseException:
    excs = exc if isinstance(exc, tuple) else (exc,)
    user = any(issubclass(x, Boom) for x in excs)
    ok, e = attempt(snap, fn, *args, field=field, user_exc=user, **kw)
    assert not ok, f"{getattr(fn, '__name__', fn)}{args} {kw} succeeded, expected {exc}"
    assert isinstance(e, exc), f"expected {exc}, got {type(e).__name__}: {e}"
    return e


# ------------------------------------------------------------- as_tokens


@FUZZ
@given(v=hostile)
def test_as_tokens_hostile(v: Any) -> None:
    ok, r = attempt(lambda: None, as_tokens, v, "prompt_ids", user_exc=True)
    if ok:
        assert isinstance(r, list) and all(isinstance(t, int) and 0 <= t < 2**32 for t in r)
    elif not isinstance(r, Boom) and isinstance(r, ValueError):
        assert "prompt_ids" in str(r)


@pytest.mark.parametrize(
    "v",
    [b"\x01\x02\x03", np.array([1.5]), np.zeros((2, 2), dtype=np.int64), [1, -1], [2**64]],
)
def test_as_tokens_names_field(v: Any) -> None:
    must_fail(lambda: None, as_tokens, v, "prompt_ids", field="prompt_ids")


# ------------------------------------------------------------- vllm queues


class Req:
    """A vLLM-like request."""

    def __init__(
        self,
        rid: Any,
        priority: Any = 0,
        arrival_time: Any = 0.0,
        client_id: Any = None,
        weight: Any = None,
        num_prompt_tokens: Any = 4,
        max_tokens: Any = 2,
    ) -> None:
        self.request_id = rid
        self.priority = priority
        self.arrival_time = arrival_time
        self.client_id = client_id
        if weight is not None:
            self.weight = weight
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens


def vllm_snap(q: Any) -> Any:
    return (len(q), bool(q), [id(r) for r in q])


def hostile_request(data: st.DataObject) -> Any:
    kind = data.draw(st.integers(0, 3))
    if kind == 0:
        return data.draw(hostile)
    fields = ["priority", "arrival_time", "request_id", "weight", "num_prompt_tokens", "max_tokens"]
    kw: dict[str, Any] = {}
    for f in fields:
        if data.draw(st.booleans()):
            kw[f] = data.draw(hostile)
    r = Req(kw.pop("request_id", data.draw(st.integers(0, 5))))
    for k, v in kw.items():
        setattr(r, k, v)
    if kind == 3:
        for f in fields:
            if data.draw(st.booleans()) and f in r.__dict__:
                delattr(r, f)
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
    live = [Req(i, priority=i % 3, arrival_time=float(i), client_id=f"c{i % 2}") for i in range(4)]
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
            batch = [Req(100 + len(q)), bad] if data.draw(st.booleans()) else bad
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
            r = Req(1000 + len(q), client_id="z")
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
    a, b = Req(1), Req(2)
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
    q.add_request(Req(0))

    def snap() -> Any:
        return vllm_snap(q)

    must_fail(snap, q.add_request, Req(1, priority=math.nan), exc=ValueError, field="priority")
    must_fail(snap, q.add_request, Req(1, priority=2**64), exc=ValueError, field="priority")
    must_fail(snap, q.add_request, Req(1, arrival_time="x"), exc=TypeError, field="arrival_time")
    must_fail(snap, q.add_request, Req(2**200), exc=ValueError, field="request_id")
    must_fail(snap, q.add_request, Req(1.5), exc=TypeError, field="request_id")
    must_fail(snap, q.add_request, Bare(), exc=TypeError, field="priority")
    must_fail(snap, q.prepend_requests, [Req(5), Req(6, priority=None)], field="priority")


def test_wfq_request_queue_messages_name_fields() -> None:
    q = WFQRequestQueue()
    q.add_request(Req(0, client_id="a"))

    def snap() -> Any:
        return (vllm_snap(q), q.virtual_time, q.flow_count)

    for w in (0, -1.0, math.nan, math.inf):
        must_fail(snap, q.add_request, Req(1, weight=w), exc=ValueError, field="weight")
    must_fail(snap, q.add_request, Req(1, weight="2"), exc=TypeError, field="weight")
    must_fail(snap, q.add_request, Bare(), exc=TypeError, field="num_prompt_tokens")
    must_fail(snap, q.add_request, Req(1, num_prompt_tokens=-5), exc=ValueError, field="tokens")
    must_fail(snap, q.add_request, Req(1, client_id=[]), exc=TypeError)
    must_fail(snap, q.prepend_requests, [Req(7), Req(8, weight=0)], exc=ValueError, field="weight")
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
        rs = [Req(i, client_id="a") for i in range(3)]
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


# ------------------------------------------------------------- WFQQueue


def wfq_snap(q: Any) -> Any:
    items = list(q)
    return (
        len(q),
        [id(x) for x in items],
        [q.times(x) for x in items],
        q.virtual_time,
        q.flow_count,
    )


class Item:
    pass


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


# ------------------------------------------------------------- DRRQueue


def drr_snap(q: Any) -> Any:
    return (
        len(q),
        q.cursor,
        q.stats(),
        [(c, q.deficit(c), q.depth(c), id(q.head(c)), q.head_cost(c)) for c in q.class_names],
    )


def make_drr() -> Any:
    return fairq.DRRQueue(
        [
            fairq.PolicyClass("a", quantum=3, order="fcfs", policy_family="f"),
            fairq.PolicyClass("b", quantum=5, order="wspt", max_queued_requests=4),
            fairq.PolicyClass("c", quantum=2, max_queued_tokens=20),
        ]
    )


@FUZZ
@given(data=st.data())
def test_drr_hostile(data: st.DataObject) -> None:
    q = make_drr()
    tickets = [q.push(Item(), c, 1 + i, arrival=float(i)) for i, c in enumerate("abcab")]

    def snap() -> Any:
        return drr_snap(q)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(
            st.sampled_from(
                ["push", "snapshot", "pop", "remove", "query", "classify", "valid", "full"]
            )
        )
        h = data.draw(hostile)
        if op == "push":
            args: dict[str, Any] = {
                "class_name": "a",
                "cost": 2,
                "strict_priority": 0,
                "priority_jump": 0.0,
                "arrival": 1.0,
            }
            field = data.draw(st.sampled_from(list(args)))
            args[field] = h
            ok, e = attempt(snap, q.push, Item(), **args)
            if ok:
                tickets.append(e)
            elif isinstance(e, ValueError | TypeError) and not isinstance(e, Boom):
                assert field in str(e) or "argument" in str(e), e
        elif op == "snapshot":
            raw, cached = data.draw(st.sampled_from([(h, 0), (0, h), (3, 5)]))
            ok, e = attempt(snap, q._push_snapshot, Item(), "a", raw, cached)
            if ok:
                tickets.append(e)
        elif op == "pop":
            blocked = h if data.draw(st.booleans()) else None
            pred: Any = None
            mode = "none"
            if data.draw(st.booleans()):
                mode = data.draw(st.sampled_from(["raise", "reenter", "nonbool", "hostile"]))

                def pred(name: str, item: Any, mode: str = mode, h: Any = h) -> Any:
                    if mode == "raise":
                        raise Boom("predicate exploded")
                    if mode == "reenter":
                        q.push(Item(), "a", 1)
                        return True
                    if mode == "nonbool":
                        return Unhashable()
                    return h

            before = snap()
            try:
                q.pop(blocked=blocked, dispatchable=pred)
            except BaseException as e:  # noqa: BLE001
                if mode == "reenter" and isinstance(e, RuntimeError):
                    # pyo3 refuses the nested push ("Already borrowed"); the
                    # callback's error propagates and the pop changes nothing
                    assert "borrow" in str(e), e
                else:
                    _check_exc(e, None, True)
                if snap() != before:
                    raise AssertionError(f"pop failed with {e!r} and changed the queue") from e
        elif op == "remove":
            t = data.draw(st.sampled_from([*tickets, h]))
            ok, _ = attempt(snap, q.remove, t)
            if ok:
                tickets.remove(t)
        elif op == "query":
            for m in (q.deficit, q.depth, q.head, q.head_cost):
                e = attempt(snap, m, h)[1]
                if isinstance(e, KeyError):
                    assert repr(h)[:20] in str(e) or str(h)[:20] in str(e) or "class" in str(e)
        elif op == "classify":
            attempt(snap, q.classify, h, 3)
            attempt(snap, q.classify, "f", h)
        elif op == "full":
            # the token/request limits must reject without side effects
            e = attempt(snap, q.push, Item(), "c", 10**6)[1]
            assert isinstance(e, QueueFull), e
        else:
            tickets.append(q.push(Item(), "a", 1))
    n = len(q)
    got = 0
    while q.pop() is not None:
        got += 1
    assert got == n and len(q) == 0


def test_drr_messages_name_fields() -> None:
    q = make_drr()
    q.push(Item(), "a", 1)

    def snap() -> Any:
        return drr_snap(q)

    must_fail(snap, q.push, Item(), "a", -1, exc=ValueError, field="cost")
    must_fail(snap, q.push, Item(), "a", 2**64, exc=ValueError, field="cost")
    must_fail(snap, q.push, Item(), "a", 1.5, exc=TypeError, field="cost")
    must_fail(snap, q.push, Item(), "a", True, exc=TypeError, field="cost")
    must_fail(snap, q.push, Item(), "zz", 1, exc=KeyError, field="zz")
    must_fail(snap, q.push, Item(), "a", 1, priority_jump=math.nan, field="priority_jump")
    must_fail(snap, q.push, Item(), "a", 1, arrival=math.inf, field="arrival")
    must_fail(snap, q.push, Item(), "a", 1, arrival=2**2000, exc=ValueError, field="arrival")
    must_fail(snap, q.push, Item(), "a", 1, priority_jump=2**2000, field="priority_jump")
    must_fail(snap, q.push, Item(), "a", 1, strict_priority=2**64, field="strict_priority")
    must_fail(snap, q._push_snapshot, Item(), "a", 1, 2**70, field="cached_tokens")
    must_fail(snap, q.remove, 2**64, exc=KeyError)
    must_fail(snap, q.remove, -1, exc=KeyError)
    must_fail(snap, q.remove, 12345, exc=KeyError)
    must_fail(snap, q.pop, blocked="a", exc=TypeError, field="blocked")
    must_fail(snap, q.pop, blocked=["nope"], exc=KeyError, field="blocked")
    must_fail(snap, q.pop, blocked=[1], exc=TypeError, field="blocked")
    must_fail(snap, q.pop, blocked=BadIter(), exc=(Boom,))
    for _ in range(4):
        q.push(Item(), "b", 1)
    e = must_fail(snap, q.push, Item(), "b", 1, exc=QueueFull, field="max_queued_requests")
    assert e.args[1:3] == ("b", "max_queued_requests"), e.args


CFG_FIELDS = ["name", "quantum", "queue_policy", "policy_family", "cache_bucket"]


@FUZZ
@given(data=st.data())
def test_drr_from_config_hostile(data: st.DataObject) -> None:
    cls: dict[str, Any] = {"name": "a", "quantum": 4, "queue_policy": "fcfs", "policy_family": "f"}
    key = data.draw(
        st.sampled_from(
            [*CFG_FIELDS, "max_queued_requests", "max_queued_tokens", "bogus", "top", "buckets"]
        )
    )
    h = data.draw(hostile)
    cfg: dict[str, Any] = {"policy_classes": [cls]}
    if key == "top":
        cfg = h
    elif key == "buckets":
        cfg["cache_buckets"] = h if data.draw(st.booleans()) else [h]
    elif key == "bogus":
        cfg["bogus"] = h
    else:
        cls[key] = h
    try:
        ok, e = attempt(lambda: None, fairq.DRRQueue.from_config, cfg, user_exc=False)
    except AssertionError:
        # a str / bytes source is a file path: a missing file is an OSError
        if key == "top" and isinstance(h, str | bytes):
            return
        raise
    if ok:
        assert len(e) == 0
    elif key in ("quantum", "queue_policy", "max_queued_requests", "max_queued_tokens"):
        assert key in str(e), e


@pytest.mark.parametrize(
    "text",
    [
        "policy_classes: [\n",  # unterminated flow sequence
        "policy_classes:\n  - name: a\n   quantum: 3\n",  # bad indentation
        "{{{{",
        "- 1\n- 2\n",  # not a mapping
        "",  # empty document
        "policy_classes: 3\n",
        "policy_classes:\n  - {name: a, quantum: -3}\n",
        "policy_classes:\n  - {name: a, quantum: .nan}\n",
        "policy_classes:\n  - {name: a, quantum: 1e400}\n",
        "policy_classes:\n  - {name: a, quantum: 18446744073709551616}\n",
        "policy_classes:\n  - {name: a, quantum: 1, max_queued_tokens: -1}\n",
        "policy_classes:\n  - {name: a, quantum: 1}\n  - {name: a, quantum: 2}\n",
        "policy_classes:\n  - {name: a, quantum: 1, queue_policy: lifo}\n",
        "policy_classes:\n  - {name: a, quantum: 1}\ndefault_family: nope\n",
        "policy_classes:\n  - {name: a, quantum: 1}\n!!python/object:os.system {}\n",
        "policy_classes:\n  - &x {name: a, quantum: 1}\n  - *x\n",
        "a: !!binary AAAA\n",
        "\t- tab\n",
    ],
)
def test_drr_from_config_malformed_yaml(tmp_path: Any, text: str) -> None:
    yaml = pytest.importorskip("yaml")
    p = tmp_path / "cfg.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        fairq.DRRQueue.from_config(p)
    except yaml.YAMLError:
        pass  # a parse error from PyYAML itself is a clear, documented failure
    except BaseException as e:  # noqa: BLE001
        _check_exc(e, None, False)
    else:
        pytest.fail(f"malformed config accepted: {text!r}")


def test_drr_from_config_bad_files(tmp_path: Any) -> None:
    p = tmp_path / "cfg.json"
    p.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError):
        fairq.DRRQueue.from_config(p)
    p.write_text('{"policy_classes": [{"name": "a", "quantum": 0}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="quantum"):
        fairq.DRRQueue.from_config(p)
    with pytest.raises(FileNotFoundError):
        fairq.DRRQueue.from_config(tmp_path / "missing.yaml")


@FUZZ
@given(field=st.sampled_from(["name", "quantum", "order", "max_queued_requests"]), v=hostile)
def test_policy_class_hostile(field: str, v: Any) -> None:
    kw: dict[str, Any] = {"name": "a", "quantum": 2}
    kw[field] = v
    ok, e = attempt(lambda: None, fairq.PolicyClass, **kw, user_exc=False)
    if not ok and isinstance(e, ValueError):
        assert field.replace("order", "queue_policy") in str(e), e


# ------------------------------------------------------------- DualPhaseQueue


def dp_snap(q: Any) -> Any:
    return (
        len(q),
        [id(x) for x in q.ids("think")],
        [id(x) for x in q.ids("output")],
        q.metrics(),
    )


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
                ids.remove(h)
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


# ------------------------------------------------------------- RadixTree


PROBES = [[1, 2, 3, 4], [1, 2, 9], [5, 6, 7, 8, 9, 10], [7]]


def tree_snap(t: Any) -> Any:
    return (
        t.size,
        t.evictable_size,
        t.num_nodes,
        len(t),
        [t.match(p) for p in PROBES],
        [t.match(p, namespace="ns") for p in PROBES],
    )


@FUZZ
@given(data=st.data(), cap=st.sampled_from([None, 8, 64]), page=st.sampled_from([1, 2]))
def test_radix_hostile(data: st.DataObject, cap: int | None, page: int) -> None:
    t = fairq.RadixTree(capacity=cap, page_size=page)
    t.insert([1, 2, 3, 4])
    t.insert([5, 6, 7, 8], namespace="ns")
    t.lock([1, 2, 3, 4])
    locks: list[tuple[str, tuple[Any, ...]]] = [("lock", ((1, 2, 3, 4), None))]

    def snap() -> Any:
        return tree_snap(t)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["match", "insert", "lock", "unlock", "evict", "valid"]))
        h = data.draw(hostile)
        use_ns = data.draw(st.booleans())
        args = (PROBES[0], h) if use_ns else (h,)
        if op == "evict":
            ok, e = attempt(snap, t.evict, h)
            if not ok and isinstance(e, ValueError):
                assert "n_tokens" in str(e), e
        elif op == "valid":
            t.insert([9, 9, 9, 9])
            assert t.match([9, 9, 9, 9]) in (0, 2, 4)
        else:
            ok, e = attempt(snap, getattr(t, op), *args)
            if ok and op in ("lock", "unlock"):
                ns = args[1] if len(args) > 1 else None
                locks.append((op, (tuple(as_tokens(args[0])), ns)))
            if not ok and isinstance(e, ValueError | TypeError):
                assert ("namespace" if use_ns else "tokens") in str(e), e
        t._check()
    # release every lock still held (an unlock releases the latest matching lock)
    held: list[tuple[Any, ...]] = []
    for op, args in locks:
        if op == "lock":
            held.append(args)
        else:
            held.remove(next(a for a in reversed(held) if a == args))
    for toks, ns in held:
        t.unlock(list(toks), ns)
    t.evict(10**9)
    assert t.evictable_size == t.size
    t._check()


def test_radix_messages_name_fields() -> None:
    t = fairq.RadixTree(capacity=10)
    t.insert([1, 2, 3])

    def snap() -> Any:
        return tree_snap(t)

    must_fail(snap, t.unlock, [1, 2, 3], exc=KeyError)
    must_fail(snap, t.insert, [1, 2**32], exc=ValueError, field="tokens")
    must_fail(snap, t.insert, [1], namespace=1.5, exc=TypeError, field="namespace")
    for n in (-1, 2**64, 2**200):
        must_fail(snap, t.evict, n, exc=ValueError, field="n_tokens")
    must_fail(snap, t.evict, 1.5, exc=TypeError, field="n_tokens")
    for bad in (-1, 2**64, 2**200):
        with pytest.raises(ValueError, match="capacity"):
            fairq.RadixTree(capacity=bad)
    for bad in (0, -1, 2**64, 2**200):
        with pytest.raises(ValueError, match="page_size"):
            fairq.RadixTree(page_size=bad)


# ------------------------------------------------------------- local schedulers


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
            if data.draw(st.booleans()):
                ok, r = sattempt(snap, s.schedule, h)
            else:
                ok, r = sattempt(snap, s.schedule, 8, h)
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


# ------------------------------------------------------------- dispatchers


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


# ------------------------------------------------------------- reentrancy and odd strings


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
    r = Req(1)

    # the callback's own add_request succeeds; the outer one is the duplicate
    with pytest.raises(ValueError, match="already"):
        q.add_request(r)
    assert list(q) == [r]
    assert q.pop_request() is r and not q


def test_reentrant_attribute_reads() -> None:
    """A request whose attribute read mutates the queue: pyo3 refuses the
    nested call ("Already borrowed"), which propagates; nothing changes."""

    class Sneaky:
        request_id = 1
        arrival_time = 0.0
        num_prompt_tokens = 3

        @property
        def priority(self) -> int:
            pq.pop_request()
            return 0

    pq = PriorityRequestQueue()
    first = Req(0)
    pq.add_request(first)
    before = vllm_snap(pq)
    with pytest.raises(RuntimeError, match="borrow"):
        pq.add_request(Sneaky())
    assert vllm_snap(pq) == before and pq.pop_request() is first


def test_reentrant_hash_dualphase() -> None:
    q = fairq.DualPhaseQueue()
    q.add("a")

    class Reenter:
        def __hash__(self) -> int:
            q.remove("a")
            return 1

    before = dp_snap(q)
    ok, e = attempt(lambda: dp_snap(q), q.add, Reenter(), known=(RuntimeError,))
    assert not ok and "borrow" in str(e)
    assert dp_snap(q) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda: fairq.DualPhaseQueue().add("r", None, "\ud800"),
        lambda: fairq.DualPhaseQueue().ids("\ud800"),
        lambda: fairq.DualPhaseQueue().len("\ud800"),
        lambda: fairq.DRRQueue().push(1, "\ud800", 1),
        lambda: fairq.DRRQueue().deficit("\ud800"),
        lambda: fairq.D2LPM(2, 1.0).dispatch(1, "\ud800", [1]),
        lambda: fairq.D2LPM(2, 1.0).deficit("\ud800", 0),
        lambda: fairq.RoundRobin(2).dispatch("\ud800", "c", [1]),
        lambda: fairq.RoundRobin(2).worker_of("\ud800"),
        lambda: fairq.RadixTree().match([1], "\ud800"),
    ],
)
def test_lone_surrogate_strings_name_the_field(call: Callable[[], Any]) -> None:
    with pytest.raises(ValueError) as ei:
        call()
    msg = str(ei.value)
    assert any(f in msg for f in ("phase", "class_name", "client", "namespace", "request_id")), msg


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


class BadBool:
    def __bool__(self) -> bool:
        raise Boom("__bool__ exploded")


@pytest.mark.parametrize("n_false", range(5))
def test_drr_dispatchable_raising_mid_ring(n_false: int) -> None:
    """The predicate declines some classes, then raises (or returns an object
    whose truth test raises): deficits, cursor and queues are untouched."""
    q = fairq.DRRQueue(
        [
            fairq.PolicyClass("a", quantum=1),
            fairq.PolicyClass("b", quantum=1),
            fairq.PolicyClass("c", quantum=100),
        ]
    )
    for c in "abc":
        for cost in (5, 7):
            q.push(Item(), c, cost, arrival=0.0)
    q.pop()
    calls = []

    def pred(name: str, item: Any) -> Any:
        calls.append(name)
        if len(calls) > n_false:
            return BadBool() if len(calls) % 2 else Boom("raised")
        return False

    def raising(name: str, item: Any) -> Any:
        r = pred(name, item)
        if isinstance(r, Boom):
            raise r
        return r

    def snap() -> Any:
        return drr_snap(q)

    attempt(snap, q.pop, dispatchable=raising)
    assert q.pop() is not None


@pytest.mark.parametrize(
    "bad",
    [
        Req(2, num_prompt_tokens=10**400),
        Req(2, num_prompt_tokens=10**300, weight=5e-324),
        Req(2, num_prompt_tokens=10**300, client_id="c", weight=1e-10),
    ],
)
def test_wfq_request_queue_prepend_requests_all_or_nothing(bad: Req) -> None:
    """Regression: a batch whose later request failed in the core (tokens too
    large for a float, or an overflowing finish time) kept the earlier ones."""
    q = WFQRequestQueue()
    q.add_request(Req(0, client_id="c"))

    def snap() -> Any:
        return (vllm_snap(q), q.virtual_time, q.flow_count)

    must_fail(snap, q.prepend_requests, [Req(1, client_id="c"), bad], exc=ValueError)
    must_fail(snap, q.add_request, bad, exc=ValueError)
    assert len(q) == 1


def make_bucketed_drr() -> Any:
    return fairq.DRRQueue.from_config(
        {
            "default_family": "std",
            "cache_buckets": [
                {"name": "hot", "min_tokens": 0},
                {"name": "cold", "min_tokens": 100},
            ],
            "policy_classes": [
                {"name": "h", "quantum": 4, "policy_family": "std", "cache_bucket": "hot"},
                {
                    "name": "c",
                    "quantum": 8,
                    "policy_family": "std",
                    "cache_bucket": "cold",
                    "queue_policy": "wspt",
                    "max_queued_tokens": 1000,
                },
            ],
        }
    )


@FUZZ
@given(data=st.data())
def test_drr_push_request_and_classify_hostile(data: st.DataObject) -> None:
    q = make_bucketed_drr()
    q.push_request(Item(), "std", 50, 10)
    q.push_request(Item(), None, 500, 0)

    def snap() -> Any:
        return drr_snap(q)

    for _ in range(data.draw(st.integers(1, 6))):
        h = data.draw(hostile)
        args: dict[str, Any] = {
            "policy_family": "std",
            "raw_isl_tokens": 120,
            "cached_tokens": 10,
            "strict_priority": 0,
            "priority_jump": 0.0,
            "arrival": 1.0,
        }
        field = data.draw(st.sampled_from(list(args)))
        args[field] = h
        ok, e = attempt(snap, q.push_request, Item(), **args)
        if not ok and isinstance(e, ValueError | TypeError) and not isinstance(e, QueueFull):
            assert field in str(e) or "uncached_tokens" in str(e) or "policy_family" in str(e), e
        for cargs in ((h, 5), ("std", h)):
            ok, r = attempt(snap, q.classify, *cargs)
            if ok:
                assert r in ("h", "c")
            else:
                pos = "policy_family" if cargs[0] is h else "uncached_tokens"
                assert pos in str(r) or isinstance(r, Boom), r
    assert q.classify("std", 99) == "h" and q.classify(None, 100) == "c"
    n = len(q)
    assert sum(1 for _ in iter(q.pop, None)) == n


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
            added, _ = attempt(lambda q=q: vllm_snap(q), q.add_request, Req(1), user_exc=False)
            assert len(q) == int(added)


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


@FUZZ
@given(
    where=st.sampled_from(["classes", "class_item", "buckets", "bucket_item", "default_family"]),
    v=hostile,
)
def test_drr_constructor_hostile(where: str, v: Any) -> None:
    """Regression: a cache_buckets entry that is not a CacheBucket raised
    AttributeError ('int' object has no attribute 'name')."""
    from fairq.drr import CacheBucket

    classes: Any = [fairq.PolicyClass("a", 2, policy_family="f", cache_bucket="b0")]
    kw: dict[str, Any] = {"cache_buckets": [CacheBucket("b0", 0)]}
    if where == "classes":
        classes = v
    elif where == "class_item":
        classes = [*classes, v]
    elif where == "buckets":
        kw["cache_buckets"] = v
    elif where == "bucket_item":
        kw["cache_buckets"] = [CacheBucket("b0", 0), v]
    else:
        kw["default_family"] = v
    ok, e = attempt(lambda: None, fairq.DRRQueue, classes, **kw)
    if not ok and where in ("bucket_item", "class_item", "default_family"):
        field = {"bucket_item": "cache_buckets[1]", "class_item": "policy_classes[1]"}.get(
            where, where
        )
        assert field in str(e) or isinstance(e, Boom), e


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add("\ud800", "c", [1]),
        lambda s: s.add("a", "\ud800", [1]),
        lambda s: s.set_weight("\ud800", 1.0),
        lambda s: s.service("\ud800"),
        lambda s: s.remove("\ud800"),
    ],
)
def test_schedulers_lone_surrogates_name_field(call: Callable[[Any], Any]) -> None:
    s = fairq.FCFS()
    with pytest.raises(ValueError) as ei:
        call(s)
    assert "request_id" in str(ei.value) or "client" in str(ei.value)
