"""Unit tests of fairq.vllm: worked examples, errors, bad input, conservation."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq.vllm as fv
from fairq.vllm import (
    FCFSRequestQueue,
    PriorityRequestQueue,
    RequestQueue,
    SchedulingPolicy,
    create_request_queue,
)

from reference.vllm import Req

BOTH = [FCFSRequestQueue, PriorityRequestQueue]


def reqs(n: int) -> list[Req]:
    return [Req(f"r{i}", 0, float(i)) for i in range(n)]


# ------------------------------------------------------------ interface ----


def test_import_does_not_import_vllm() -> None:
    """In a fresh interpreter (other tests may have imported vLLM here)."""
    import subprocess

    code = (
        "import sys, fairq.vllm.scheduler, fairq.vllm.fair, fairq.vllm.tenants; "
        "assert 'vllm.v1.core.sched.scheduler' not in sys.modules, 'imported vLLM'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("cls", BOTH)
def test_real_subclasses_of_the_abc(cls: Any) -> None:
    q = cls()
    assert isinstance(q, RequestQueue) and issubclass(cls, RequestQueue)
    assert not RequestQueue.__abstractmethods__ - set(dir(cls))


def test_abc_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError):
        RequestQueue()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("policy", "cls"),
    [
        (SchedulingPolicy.FCFS, FCFSRequestQueue),
        ("fcfs", FCFSRequestQueue),
        (SchedulingPolicy.PRIORITY, PriorityRequestQueue),
        ("priority", PriorityRequestQueue),
    ],
)
def test_create_request_queue(policy: Any, cls: Any) -> None:
    assert type(create_request_queue(policy)) is cls


def test_create_request_queue_accepts_foreign_enum() -> None:
    import enum

    class VllmPolicy(enum.Enum):
        FCFS = "fcfs"
        PRIORITY = "priority"

    assert isinstance(create_request_queue(VllmPolicy.PRIORITY), PriorityRequestQueue)


@pytest.mark.parametrize("bad", ["lifo", "bogus", "", 3, None])
def test_unknown_policy(bad: Any) -> None:
    """vLLM's message, then the names fairq knows (issue 20, item 5)."""
    known = "fcfs, priority, wfq, vtc, lpm, dlpm"
    with pytest.raises(ValueError, match=f"Unknown scheduling policy: .*policies: {known}"):
        create_request_queue(bad)


@pytest.mark.parametrize(
    ("name", "cls"), [("FCFS", FCFSRequestQueue), (" Priority ", PriorityRequestQueue)]
)
def test_policy_names_are_case_insensitive(name: str, cls: type) -> None:
    """As ``FAIRQ_VLLM_POLICY`` is: ``create_request_queue``, ``as_policy``
    and ``install`` accept any case."""
    assert type(create_request_queue(name)) is cls
    assert fv.as_policy(name) is fv.as_policy(name.strip().lower())


@pytest.mark.parametrize(
    ("policy", "options", "valid"),
    [
        ("wfq", {"quantum": 5}, "flow_key, default_weight, virtual_clock"),
        ("priority", {"quantum": 5}, "none"),
        ("fcfs", {"virtual_clock": "finish"}, "none"),
    ],
)
def test_unknown_queue_option_lists_the_valid_ones(
    policy: str, options: dict[str, Any], valid: str
) -> None:
    """Not ``WFQRequestQueue.__new__() got an unexpected keyword argument``."""
    key = next(iter(options))
    msg = rf"unknown option '{key}' for policy '{policy}' \(options: {valid}\)"
    with pytest.raises(TypeError, match=msg):
        create_request_queue(policy, **options)


def test_queue_options_are_the_constructor_keywords() -> None:
    import inspect

    from fairq.vllm.wfq import WFQRequestQueue

    params = list(inspect.signature(WFQRequestQueue.__init__).parameters)[1:]
    assert tuple(params) == fv.QUEUE_OPTIONS[SchedulingPolicy.WFQ]


def test_policy_values() -> None:
    assert [p.value for p in SchedulingPolicy] == ["fcfs", "priority", "wfq", "vtc", "lpm", "dlpm"]


@pytest.mark.parametrize("policy", ["vtc", "lpm", "dlpm"])
def test_fair_policies_are_not_standalone_queues(policy: str) -> None:
    from fairq.vllm import create_request_queue

    with pytest.raises(ValueError, match="inside vLLM's scheduler.*--scheduler-cls"):
        create_request_queue(policy)


def test_wfq_policy_is_imported_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    fake = types.ModuleType("fairq.vllm.wfq")

    class WFQRequestQueue:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

    fake.WFQRequestQueue = WFQRequestQueue  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fairq.vllm.wfq", fake)
    q = create_request_queue("wfq", default_weight=2.0)
    assert type(q) is WFQRequestQueue and q.kw == {"default_weight": 2.0}  # type: ignore[attr-defined]


# --------------------------------------------------------------- FCFS ----


def test_fcfs_worked_example_prepend_reverse() -> None:
    a, b, c, d = reqs(4)
    q = FCFSRequestQueue()
    q.add_request(d)
    q.prepend_requests([a, b, c])
    assert list(q) == [c, b, a, d]
    q.prepend_request(a)
    assert q.peek_request() is a and len(q) == 5
    assert [q.pop_request() for _ in range(5)] == [a, c, b, a, d]
    assert not q and len(q) == 0


def test_fcfs_duplicates_remove_first_occurrence() -> None:
    a, b = reqs(2)
    q = FCFSRequestQueue()
    for r in (a, b, a):
        q.add_request(r)
    q.remove_request(a)
    assert list(q) == [b, a]
    q.add_request(a)
    q.remove_requests([a])  # every occurrence, like vLLM's filter
    assert list(q) == [b]


def test_fcfs_empty_errors_match_vllm() -> None:
    q = FCFSRequestQueue()
    with pytest.raises(IndexError, match="^pop from an empty deque$"):
        q.pop_request()
    with pytest.raises(IndexError, match="^peek from an empty queue$"):
        q.peek_request()


def test_fcfs_remove_absent_matches_deque_message() -> None:
    from collections import deque

    r = Req("x", 0, 0.0)
    with pytest.raises(ValueError) as want:
        deque().remove(r)
    with pytest.raises(ValueError) as got:
        FCFSRequestQueue().remove_request(r)
    assert str(got.value) == str(want.value)


def test_identity_not_equality() -> None:
    class AlwaysEqual(Req):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = None  # type: ignore[assignment]  # unhashable

    x, y = AlwaysEqual("x", 0, 0.0), AlwaysEqual("y", 0, 0.0)
    for cls in BOTH:
        q = cls()
        q.add_request(x)
        assert y not in q and x in q
        with pytest.raises(ValueError):
            q.remove_request(y)
        q.remove_requests([y])  # unhashable is fine: identity
        assert list(q) == [x]


def test_iteration_is_a_snapshot() -> None:
    rs = reqs(4)
    for cls in BOTH:
        q = cls()
        for r in rs:
            q.add_request(r)
        seen = []
        for r in q:
            seen.append(r)
            q.remove_requests(rs)
        assert seen == rs and len(q) == 0


@pytest.mark.parametrize("cls", BOTH)
def test_cached_snapshot_follows_every_mutation(cls: Any) -> None:
    """Iteration reuses a cached snapshot only while the queue is unchanged."""
    a, b, c, d = reqs(4)
    q = cls()
    q.add_request(a)
    q.add_request(b)
    held = iter(q)  # an iterator taken before a mutation keeps its snapshot
    assert list(q) == list(q) == [a, b]
    mutations: list[tuple[Any, list[Any]]] = [
        (lambda: q.add_request(c), [a, b, c]),
        (lambda: q.pop_request(), [b, c]),
        (lambda: q.prepend_request(a), [a, b, c]),
        (lambda: q.prepend_requests([d]), [d, a, b, c]),
        (lambda: q.remove_request(b), [d, a, c]),
        (lambda: q.remove_requests([a, d]), [c]),
        (lambda: q.remove_requests([c]), []),
    ]
    for mutate, expected in mutations:
        list(q)  # cache the current state
        mutate()
        got = list(q)
        if cls is FCFSRequestQueue:
            assert got == expected
        else:  # priority order: reqs() are in ascending key order
            assert got == sorted(expected, key=lambda r: r.arrival_time)
        assert len(got) == len(q) and all(r in q for r in got)
    assert list(held) == [a, b]


@pytest.mark.parametrize("cls", BOTH)
def test_failed_mutation_keeps_snapshot_valid(cls: Any) -> None:
    a, b = reqs(2)
    q = cls()
    q.add_request(a)
    assert list(q) == [a]
    with pytest.raises(ValueError):
        q.remove_request(b)
    with pytest.raises(IndexError):
        cls().pop_request()
    assert list(q) == [a]


# ----------------------------------------------------------- priority ----


def test_priority_worked_example() -> None:
    a = Req("a", 1, 0.0)
    b = Req("b", 0, 5.0)
    c = Req("b", 0, 5.0)  # same key as b: insertion order
    d = Req("z", 0, 1.0)
    e = Req(7, 0, 5.0)  # int ids sort before str ids
    q = PriorityRequestQueue()
    for r in (a, b, c, d, e):
        q.add_request(r)
    assert list(q) == [d, e, b, c, a]
    assert list(q) == [d, e, b, c, a]  # unchanged by iteration
    assert q.peek_request() is d
    q.remove_request(b)
    assert [q.pop_request() for _ in range(len(q))] == [d, e, c, a]
    q.prepend_requests([a, b])
    q.prepend_request(d)
    assert list(q) == [d, b, a]


def test_priority_int_float_exact_order() -> None:
    big = 2**53 + 1
    x, y = Req("x", big, 0.0), Req("y", float(2**53), 0.0)
    z = Req("z", 1.5, 0.0)
    w = Req("w", True, 0.0)  # bool is an int
    q = PriorityRequestQueue()
    for r in (x, y, z, w):
        q.add_request(r)
    assert list(q) == [w, z, y, x]


def test_priority_keys_read_once() -> None:
    a, b = Req("a", 5, 0.0), Req("b", 1, 0.0)
    q = PriorityRequestQueue()
    q.add_request(a)
    q.add_request(b)
    a.priority = -100
    assert q.pop_request() is b


def test_priority_empty_errors_match_vllm() -> None:
    q = PriorityRequestQueue()
    with pytest.raises(IndexError, match="^pop from empty heap$"):
        q.pop_request()
    with pytest.raises(IndexError, match="^peek from empty heap$"):
        q.peek_request()
    with pytest.raises(ValueError, match=r"^list.remove\(x\): x not in list$"):
        q.remove_request(Req("x", 0, 0.0))


def contents(q: Any) -> list[int]:
    return [id(r) for r in q]


@pytest.mark.parametrize(
    ("attrs", "exc", "match"),
    [
        ({"arrival_time": 0.0, "request_id": "x"}, TypeError, "no attribute 'priority'"),
        ({"priority": 0, "request_id": "x"}, TypeError, "no attribute 'arrival_time'"),
        ({"priority": 0, "arrival_time": 0.0}, TypeError, "no attribute 'request_id'"),
        ({"priority": "0", "arrival_time": 0.0, "request_id": "x"}, TypeError, "priority must"),
        ({"priority": None, "arrival_time": 0.0, "request_id": "x"}, TypeError, "priority must"),
        ({"priority": 0, "arrival_time": "t", "request_id": "x"}, TypeError, "arrival_time must"),
        ({"priority": 0, "arrival_time": 0.0, "request_id": 1.5}, TypeError, "request_id must"),
        ({"priority": 0, "arrival_time": 0.0, "request_id": b"x"}, TypeError, "request_id must"),
        ({"priority": float("nan"), "arrival_time": 0.0, "request_id": "x"}, ValueError, "NaN"),
        ({"priority": 0, "arrival_time": float("nan"), "request_id": "x"}, ValueError, "NaN"),
        ({"priority": 2**63, "arrival_time": 0.0, "request_id": "x"}, ValueError, "priority"),
        ({"priority": 0, "arrival_time": 0.0, "request_id": -(2**64)}, ValueError, "request_id"),
    ],
)
def test_priority_bad_input_leaves_queue_unchanged(
    attrs: dict[str, Any], exc: Any, match: str
) -> None:
    class Obj:
        pass

    bad = Obj()
    for k, v in attrs.items():
        setattr(bad, k, v)
    q = PriorityRequestQueue()
    good = reqs(3)
    for r in good[:2]:
        q.add_request(r)
    before = contents(q)
    with pytest.raises(exc, match=match):
        q.add_request(bad)
    with pytest.raises(exc, match=match):
        q.prepend_request(bad)
    with pytest.raises(exc, match=match):
        q.prepend_requests([good[2], bad])  # all or nothing
    assert contents(q) == before and good[2] not in q


def test_priority_duplicate_is_value_error() -> None:
    a, b = reqs(2)
    q = PriorityRequestQueue()
    q.add_request(a)
    with pytest.raises(ValueError, match="already in the priority queue"):
        q.add_request(a)
    with pytest.raises(ValueError, match="already in the priority queue"):
        q.prepend_requests([b, b])
    with pytest.raises(ValueError, match="already in the priority queue"):
        q.prepend_requests([b, a])
    assert list(q) == [a]


def test_attribute_error_from_property_becomes_type_error_other_errors_propagate() -> None:
    class Weird:
        arrival_time = 0.0
        request_id = "w"

        @property
        def priority(self) -> int:
            raise RuntimeError("boom")

    q = PriorityRequestQueue()
    with pytest.raises(RuntimeError, match="boom"):
        q.add_request(Weird())
    assert not q


def test_failing_iterable_leaves_queue_unchanged() -> None:
    def gen() -> Any:
        yield Req("a", 0, 0.0)
        raise KeyError("stop")

    for cls in BOTH:
        q = cls()
        r = Req("x", 0, 0.0)
        q.add_request(r)
        with pytest.raises(KeyError):
            q.prepend_requests(gen())
        with pytest.raises(KeyError):
            q.remove_requests(gen())
        with pytest.raises(TypeError):
            q.prepend_requests(5)
        assert list(q) == [r]


# --------------------------------------------------- refs and garbage ----


@pytest.mark.parametrize("cls", BOTH)
def test_queue_keeps_requests_alive_and_releases_them(cls: Any) -> None:
    r = Req("x", 0, 0.0)
    ref = weakref.ref(r)
    q = cls()
    q.add_request(r)
    del r
    gc.collect()
    assert ref() is not None
    q.pop_request()
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("cls", BOTH)
def test_cycle_through_queue_is_collected(cls: Any) -> None:
    q = cls()
    r = Req("x", 0, 0.0)
    r.queue = q  # type: ignore[attr-defined]
    q.add_request(r)
    ref = weakref.ref(r)
    del q, r
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("cls", BOTH)
def test_cycle_through_cached_snapshot_is_collected(cls: Any) -> None:
    q = cls()
    r = Req("x", 0, 0.0)
    r.queue = q  # type: ignore[attr-defined]
    q.add_request(r)
    assert list(q) == [r]  # the queue now also holds r via its snapshot
    ref = weakref.ref(r)
    del q, r
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("cls", BOTH)
def test_snapshot_does_not_keep_popped_requests_alive(cls: Any) -> None:
    r = Req("x", 0, 0.0)
    ref = weakref.ref(r)
    q = cls()
    q.add_request(r)
    assert list(q) == [r]
    del r
    q.pop_request()
    assert ref() is None


# -------------------------------------------------------- conservation ----


@settings(max_examples=60)
@given(
    ops=st.lists(st.tuples(st.sampled_from("apPrRi"), st.integers(0, 30)), max_size=80),
    policy=st.sampled_from([SchedulingPolicy.FCFS, SchedulingPolicy.PRIORITY]),
)
def test_conservation(ops: list[tuple[str, int]], policy: SchedulingPolicy) -> None:
    """Every request added is returned by pop or removed exactly once."""
    q = create_request_queue(policy)
    made: list[Req] = []
    out: list[int] = []
    for op, k in ops:
        if op == "a":
            r = Req(f"r{len(made)}", k % 3, float(k % 5))
            made.append(r)
            q.add_request(r)
        elif op == "p" and q:
            out.append(id(q.pop_request()))
        elif op == "P":
            rs = [Req(f"r{len(made) + i}", 0, 0.0) for i in range(k % 4)]
            made.extend(rs)
            q.prepend_requests(rs)
        elif op == "r" and made:
            r = made[k % len(made)]
            if r in q:
                q.remove_request(r)
                out.append(id(r))
        elif op == "R" and made:
            rs = made[k % len(made) :: 3]
            present = [r for r in rs if r in q]
            q.remove_requests(rs)
            out.extend(id(r) for r in present)
        elif op == "i":
            assert len(list(q)) == len(q)
    while q:
        out.append(id(q.pop_request()))
    assert sorted(out) == sorted(id(r) for r in made)


def test_module_dir_lists_public_names() -> None:
    assert {"FCFSRequestQueue", "install", "create_request_queue"} <= set(dir(fv))
    with pytest.raises(AttributeError):
        fv.nope  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize("cls", BOTH)
def test_del_of_removed_request_may_touch_the_queue(
    cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    errors: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", errors.append)
    q = cls()

    class Touchy(Req):
        def __del__(self) -> None:
            seen.append(len(q))

    q.add_request(Touchy("a", 0, 0.0))
    q.add_request(Touchy("b", 0, 1.0))
    q.remove_request(next(iter(q)))
    q.remove_requests(list(q))
    gc.collect()
    assert seen == [1, 0] and not errors


@settings(max_examples=200)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 5)),
            st.tuples(st.just("appendleft"), st.integers(0, 5)),
            st.tuples(st.just("popleft"), st.none()),
            st.tuples(st.just("remove"), st.integers(0, 5)),
        ),
        max_size=40,
    ),
    probes=st.lists(st.integers(-45, 45), max_size=12),
)
def test_fcfs_indexing_is_deque_indexing(ops: list[Any], probes: list[int]) -> None:
    """``queue[i]`` as vLLM's deque (its own scheduler tests index the waiting
    queue): negative indices, ``IndexError`` out of range (issue 11, item 9)."""
    from collections import deque

    objs = [Req(f"r{i}") for i in range(6)]
    q = FCFSRequestQueue()
    d: deque[Any] = deque()
    for op, x in ops:
        if op == "append":
            q.add_request(objs[x])
            d.append(objs[x])
        elif op == "appendleft":
            q.prepend_request(objs[x])
            d.appendleft(objs[x])
        elif op == "popleft" and d:
            assert q.pop_request() is d.popleft()
        elif op == "remove" and objs[x] in d:
            q.remove_request(objs[x])
            d.remove(objs[x])
    for i in [*probes, 0, -1, len(d), -len(d), -len(d) - 1]:
        try:
            want = d[i]
        except IndexError as e:
            with pytest.raises(IndexError, match=str(e)):
                q[i]
        else:
            assert q[i] is want
    with pytest.raises(TypeError, match="sequence index must be integer, not 'str'"):
        q["0"]  # type: ignore[index]
    with pytest.raises(TypeError):
        q[0:1]  # type: ignore[index]
    if len(d) > 1:
        import numpy as np

        assert q[np.int64(0)] is d[0]
        assert q[True] is d[True]  # bool is an int index, as for deque
