"""DRRQueue: worked examples, weighting, blocking, validation, limits."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fairq import DRRQueue, PolicyClass, QueueFull

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "policy-classes.yaml"


def two(q1: int, q2: int, o1: str = "fcfs", o2: str = "fcfs") -> DRRQueue:
    return DRRQueue([PolicyClass("a", q1, o1), PolicyClass("b", q2, o2)])


def snapshot(q: DRRQueue) -> Any:
    return (
        len(q),
        q.cursor,
        {n: (q.deficit(n), q.depth(n), q.head(n)) for n in q.class_names},
        q.stats(),
    )


# --- worked examples (ALGORITHMS.md section 2 / seed 001) -----------------


def test_worked_example_one_quantum_three_dispatches() -> None:
    q = DRRQueue([PolicyClass("x", 10), PolicyClass("y", 10)])
    for k in range(4):
        q.push(f"x{k}", "x", 3, arrival=float(k))
    q.push("y0", "y", 3, arrival=0.0)
    # grant one quantum: 10; dispatch 3 -> 7 (cursor stays on x)
    assert q.pop() == ("x", "x0")
    assert (q.deficit("x"), q.cursor) == (7, "x")
    assert q.pop() == ("x", "x1")
    assert (q.deficit("x"), q.cursor) == (4, "x")
    assert q.pop() == ("x", "x2")
    # next cost is 3 > 1: keep the remainder, advance the cursor
    assert (q.deficit("x"), q.cursor) == (1, "y")
    assert q.pop() == ("y", "y0")
    assert q.cursor == "x"
    # x: 1 + 10 >= 3 -> dispatch, 8 left, class empty -> reset
    assert q.pop() == ("x", "x3")
    assert q.deficit("x") == 0


def test_worked_example_bulk_credit() -> None:
    q = DRRQueue(
        [PolicyClass("standard", quantum=1000), PolicyClass("latency", quantum=2000, order="wspt")]
    )
    q.push("s", "standard", 7000, arrival=0.0)
    q.push("l", "latency", 9000, arrival=0.0)
    q.push("l2", "latency", 10**6, arrival=0.0)  # keeps latency non-empty
    assert q.cursor == "standard"
    # normal visit: 1000 / 2000; rounds needed 6 / 4; fast-forward 4 rounds
    assert q.pop() == ("latency", "l")
    assert q.deficit("standard") == 5000
    assert q.deficit("latency") == 1000  # 10000 - 9000 retained
    assert q.cursor == "standard"  # next latency head unaffordable: advance (wraps)


def test_bulk_credit_applies_to_every_dispatchable_class_only() -> None:
    q = DRRQueue([PolicyClass("a", 1000), PolicyClass("b", 2000), PolicyClass("c", 7)])
    q.push(1, "a", 7000)
    q.push(2, "b", 9000)
    q.push(3, "c", 10**9)
    assert q.pop(blocked={"c"}) == ("b", 2)
    assert q.deficit("c") == 0  # blocked: no quantum, no bulk credit
    assert q.deficit("a") == 5000


def test_single_class_is_a_plain_queue() -> None:
    q = DRRQueue()  # synthetic "default" class
    assert q.class_names == ["default"]
    for k, c in enumerate([5, 10**9, 1, 0, 42]):
        q.push(k, "default", c, arrival=float(k))
    assert [q.pop() for _ in range(5)] == [("default", k) for k in range(5)]
    assert q.pop() is None
    assert q.deficit("default") == 0


def test_huge_head_against_quantum_one_dispatches_in_one_pop() -> None:
    q = DRRQueue([PolicyClass("tiny", 1), PolicyClass("other", 1)])
    q.push("big", "tiny", 10**9)
    assert q.pop() == ("tiny", "big")
    q.push("big2", "tiny", 10**18)
    q.push("big3", "other", 10**18 - 5)
    assert q.pop() == ("other", "big3")
    assert q.deficit("tiny") == 10**18 - 5


# --- weighting ------------------------------------------------------------


def _serve(q: DRRQueue, pops: int) -> dict[str, int]:
    served: dict[str, int] = {n: 0 for n in q.class_names}
    for _ in range(pops):
        r = q.pop()
        assert r is not None
        served[r[0]] += r[1]
    return served


def test_quanta_1_to_3_give_cost_service_1_to_3() -> None:
    q = two(100, 300)
    for k in range(3000):
        q.push(50, "a", 50, arrival=float(k))
        q.push(50, "b", 50, arrival=float(k))
    s = _serve(q, 2000)
    assert s["b"] / s["a"] == pytest.approx(3.0, rel=0.02)


def test_quanta_512_to_128_about_4_to_1() -> None:
    q = two(512, 128)
    for k in range(5000):
        q.push(100, "a", 100, arrival=float(k))
        q.push(100, "b", 100, arrival=float(k))
    s = _serve(q, 3000)
    assert s["a"] / s["b"] == pytest.approx(4.0, rel=0.05)


def test_service_follows_quanta_not_request_counts() -> None:
    # a: small requests (cost 100), b: large ones (cost 5000); quanta 1:2
    q = two(1000, 2000)
    for k in range(10000):
        q.push(100, "a", 100, arrival=float(k))
    for k in range(1000):
        q.push(5000, "b", 5000, arrival=float(k))
    s = _serve(q, 5000)
    assert s["b"] / s["a"] == pytest.approx(2.0, rel=0.05)
    st = q.stats()
    assert st["a"]["dispatched"] > 20 * st["b"]["dispatched"]
    assert st["a"]["dispatched_cost"] == s["a"]


def test_blocked_class_never_accumulates_credit() -> None:
    q = two(10, 10)
    q.push("a0", "a", 25)
    for k in range(50):
        q.push(k, "b", 25, arrival=float(k))
    for _ in range(30):
        assert q.pop(blocked=frozenset({"a"}))[0] == "b"  # type: ignore[index]
        assert q.deficit("a") == 0
    assert q.pop(blocked={"a", "b"}) is None
    # predicate form, same rule
    for _ in range(5):
        r = q.pop(dispatchable=lambda name, item: name != "a")
        assert r is not None and r[0] == "b"
        assert q.deficit("a") == 0


def test_blocked_keeps_earned_credit() -> None:
    q = two(10, 10)
    q.push("a0", "a", 15)
    q.push("b0", "b", 15)
    q.push("b1", "b", 15)
    # a: +10 (not enough), b: +10, bulk 1 round: a 20 -> dispatch a... a first
    assert q.pop() == ("a", "a0")
    q.push("a1", "a", 100)
    d = q.deficit("b")
    assert q.pop(blocked={"b"}) == ("a", "a1")
    assert q.deficit("b") == d  # kept, not increased


def test_all_blocked_or_empty_returns_none_without_credit() -> None:
    q = two(10, 10)
    assert q.pop() is None
    q.push(1, "a", 5)
    before = snapshot(q)
    assert q.pop(blocked={"a"}) is None
    assert q.pop(dispatchable=lambda n, i: False) is None
    assert snapshot(q) == before


def test_cursor_rotates_so_order_is_not_a_preference() -> None:
    q = DRRQueue([PolicyClass(n, 10) for n in "abc"])
    for k in range(6):
        for n in "abc":
            q.push(f"{n}{k}", n, 10, arrival=float(k))
    got = [q.pop()[0] for _ in range(9)]  # type: ignore[index]
    assert got == list("abcabcabc")
    # a blocked class is skipped; the cursor still moves on
    assert q.cursor == "a"
    assert q.pop(blocked={"a"})[0] == "b"  # type: ignore[index]
    assert q.cursor == "c"
    assert q.pop()[0] == "c"  # type: ignore[index]
    assert q.pop()[0] == "a"  # type: ignore[index]


# --- ordering -------------------------------------------------------------


def test_fcfs_priority_jump_and_tiers() -> None:
    q = DRRQueue([PolicyClass("f", 10**6)])
    q.push("late", "f", 1, arrival=10.0)
    q.push("jumped", "f", 1, arrival=12.0, priority_jump=5.0)  # as if 7.0
    q.push("early", "f", 1, arrival=8.0)
    q.push("vip", "f", 1, arrival=99.0, strict_priority=2)
    q.push("tie", "f", 1, arrival=8.0)
    assert [q.pop()[1] for _ in range(5)] == ["vip", "jumped", "early", "tie", "late"]  # type: ignore[index]


def test_wspt_order() -> None:
    q = DRRQueue([PolicyClass("w", 10**9, "wspt")])
    q.push("long", "w", 1000)
    q.push("short", "w", 10)
    q.push("boosted", "w", 1000, priority_jump=199.0)  # 200/1000 > 1/10
    q.push("mid", "w", 100)
    assert [q.pop()[1] for _ in range(4)] == ["boosted", "short", "mid", "long"]  # type: ignore[index]


def test_default_arrival_is_monotonic_insertion_order() -> None:
    q = DRRQueue([PolicyClass("f", 100)])
    for k in range(20):
        q.push(k, "f", 1)
    assert [q.pop()[1] for _ in range(20)] == list(range(20))  # type: ignore[index]


# --- predicate semantics --------------------------------------------------


def test_predicate_called_at_most_once_per_class_per_pop() -> None:
    q = DRRQueue([PolicyClass(n, 1) for n in "abcd"])
    for n in "abcd":
        q.push(n, n, 10**6)
    calls: list[str] = []

    def pred(name: str, item: Any) -> bool:
        calls.append(name)
        return name != "c"

    r = q.pop(blocked={"d"}, dispatchable=pred)
    assert r == ("a", "a")
    assert sorted(calls) == ["a", "b", "c"]  # d blocked by the set: not asked


def test_predicate_exception_propagates_and_leaves_queue_unchanged() -> None:
    q = DRRQueue([PolicyClass(n, 3) for n in "abc"])
    for n in "abc":
        q.push(n, n, 10)
    q.push("a2", "a", 1)
    assert q.pop() is not None
    before = snapshot(q)

    def boom(name: str, item: Any) -> bool:
        if name == "a":
            raise RuntimeError("worker table unavailable")
        return False

    with pytest.raises(RuntimeError, match="worker table"):
        q.pop(dispatchable=boom)
    assert snapshot(q) == before
    with pytest.raises(TypeError):
        q.pop(dispatchable=lambda n: True)  # type: ignore[arg-type,misc]
    assert snapshot(q) == before


def test_predicate_exception_after_credit_was_added_rolls_it_back() -> None:
    q = DRRQueue([PolicyClass("a", 1), PolicyClass("b", 1), PolicyClass("e", 5)])
    q.push(1, "a", 10)
    q.push(2, "b", 10)
    before = snapshot(q)

    def bad(name: str, item: Any) -> bool:
        if name == "b":
            raise LookupError("b")
        return True  # "a" is asked first and receives a quantum

    with pytest.raises(LookupError):
        q.pop(dispatchable=bad)
    assert snapshot(q) == before and q.deficit("a") == 0


def test_predicate_reentrant_mutation_is_refused_and_rolled_back() -> None:
    q = DRRQueue([PolicyClass("a", 1), PolicyClass("b", 1)])
    q.push(1, "a", 10)
    q.push(2, "b", 10)
    before = snapshot(q)

    def sneaky(name: str, item: Any) -> bool:
        q.push(99, "a", 1)  # the queue is mid-pop: refused
        return True

    with pytest.raises(RuntimeError):
        q.pop(dispatchable=sneaky)
    assert snapshot(q) == before


def test_unknown_blocked_name_is_a_key_error() -> None:
    q = two(1, 1)
    q.push(1, "a", 1)
    before = snapshot(q)
    with pytest.raises(KeyError, match="nope"):
        q.pop(blocked={"nope"})
    with pytest.raises(TypeError):
        q.pop(blocked="a")  # type: ignore[arg-type]
    assert snapshot(q) == before


# --- remove / head --------------------------------------------------------


def test_remove_by_ticket() -> None:
    q = two(10, 10)
    t1 = q.push("x", "a", 5)
    t2 = q.push("y", "a", 5)
    assert q.head("a") == "x" and q.head_cost("a") == 5
    assert q.remove(t1) == "x"
    with pytest.raises(KeyError):
        q.remove(t1)
    assert q.head("a") == "y"
    assert q.remove(t2) == "y"
    assert q.head("b") is None and len(q) == 0


# --- bad input leaves the queue unchanged ---------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(class_name="zzz", cost=1), KeyError, "zzz"),
        (dict(class_name="a", cost=-1), ValueError, "cost"),
        (dict(class_name="a", cost=1.5), TypeError, "cost"),
        (dict(class_name="a", cost=True), TypeError, "cost"),
        (dict(class_name="a", cost=2**64), ValueError, "cost"),
        (dict(class_name="a", cost=1, priority_jump=math.nan), ValueError, "priority_jump"),
        (dict(class_name="a", cost=1, priority_jump=-1.0), ValueError, "priority_jump"),
        (dict(class_name="a", cost=1, priority_jump=math.inf), ValueError, "priority_jump"),
        (dict(class_name="a", cost=1, arrival=math.nan), ValueError, "arrival"),
        (dict(class_name="a", cost=1, strict_priority="hi"), TypeError, "strict_priority"),
    ],
)
def test_bad_push_leaves_queue_unchanged(kwargs: dict[str, Any], exc: type, match: str) -> None:
    q = two(10, 10)
    q.push("keep", "a", 3)
    before = snapshot(q)
    with pytest.raises(exc, match=match):
        q.push("bad", **kwargs)
    assert snapshot(q) == before


def test_queue_full_carries_its_fields_and_enqueues_nothing() -> None:
    q = DRRQueue(
        [
            PolicyClass("r", 10, max_queued_requests=2),
            PolicyClass("t", 10, max_queued_tokens=100),
        ]
    )
    q.push(1, "r", 1)
    q.push(2, "r", 1)
    before = snapshot(q)
    with pytest.raises(QueueFull) as ei:
        q.push(3, "r", 1)
    e = ei.value
    assert isinstance(e, RuntimeError)
    assert (e.class_name, e.limit, e.current, e.max) == ("r", "max_queued_requests", 3, 2)
    assert e.args[1:] == ("r", "max_queued_requests", 3, 2)
    assert "max_queued_requests" in str(e)
    assert str(e) == e.args[0]  # the message, not the args tuple
    assert snapshot(q) == before
    q.push(4, "t", 60)
    with pytest.raises(QueueFull) as ei:
        q.push(5, "t", 41)
    assert (ei.value.class_name, ei.value.limit, ei.value.current, ei.value.max) == (
        "t",
        "max_queued_tokens",
        101,
        100,
    )
    q.push(6, "t", 40)  # exactly at the limit is fine
    assert q.depth("t") == 2


# --- push_request classification ----------------------------------------

CONFIG: dict[str, Any] = {
    "default_family": "standard",
    "cache_buckets": [
        {"name": "cached", "min_tokens": 0},
        {"name": "uncached", "min_tokens": 1024},
    ],
    "policy_classes": [
        {
            "name": "std-cached",
            "policy_family": "standard",
            "cache_bucket": "cached",
            "queue_policy": "wspt",
            "quantum": 2048,
        },
        {
            "name": "std-uncached",
            "policy_family": "standard",
            "cache_bucket": "uncached",
            "queue_policy": "fcfs",
            "quantum": 512,
        },
        {
            "name": "batch-cached",
            "policy_family": "batch",
            "cache_bucket": "cached",
            "quantum": 256,
        },
        {
            "name": "batch-uncached",
            "policy_family": "batch",
            "cache_bucket": "uncached",
            "quantum": 128,
            "max_queued_requests": 1,
        },
        {"name": "admin", "quantum": 100},
    ],
}


def test_push_request_classifies_by_family_and_exact_uncached_tokens() -> None:
    q = DRRQueue.from_config(CONFIG)
    q.push_request("a", policy_family="standard", raw_isl_tokens=5000, cached_tokens=4000)
    q.push_request("b", policy_family="standard", raw_isl_tokens=5000, cached_tokens=3976)
    q.push_request("c", policy_family=None, raw_isl_tokens=10, cached_tokens=10)
    q.push_request("d", policy_family="batch", raw_isl_tokens=2000, cached_tokens=0)
    assert q.depth("std-cached") == 2  # 1000 < 1024 and 0
    assert q.depth("std-uncached") == 1  # exactly 1024
    assert q.depth("batch-uncached") == 1
    assert q.head_cost("std-cached") == 1  # fully cached: clamped cost 1 (WSPT first)
    assert q.classify("batch", 1023) == "batch-cached"
    q.push("e", "admin", 5)  # explicit class: by name only
    assert q.depth("admin") == 1


def test_push_request_errors_leave_queue_unchanged() -> None:
    q = DRRQueue.from_config(CONFIG)
    q.push_request("x", "batch", 5000, 0)
    before = snapshot(q)
    cases: list[tuple[dict[str, Any], type, str]] = [
        (dict(policy_family="nope", raw_isl_tokens=1, cached_tokens=0), KeyError, "nope"),
        (dict(policy_family="batch", raw_isl_tokens=-1, cached_tokens=0), ValueError, "raw_isl"),
        (dict(policy_family="batch", raw_isl_tokens=1, cached_tokens=-1), ValueError, "cached"),
        (dict(policy_family="batch", raw_isl_tokens=1, cached_tokens=2), ValueError, "cached"),
        (dict(policy_family="batch", raw_isl_tokens=1.0, cached_tokens=0), TypeError, "raw_isl"),
        (
            dict(policy_family="batch", raw_isl_tokens=5, cached_tokens=0, priority_jump=math.nan),
            ValueError,
            "priority_jump",
        ),
        (dict(policy_family="batch", raw_isl_tokens=5000, cached_tokens=0), QueueFull, "batch"),
    ]
    for kw, exc, match in cases:
        with pytest.raises(exc, match=match):
            q.push_request("bad", **kw)
        assert snapshot(q) == before


def test_no_config_routes_everything_to_default() -> None:
    q = DRRQueue()
    q.push_request("r", raw_isl_tokens=100, cached_tokens=40)
    assert q.depth("default") == 1 and q.head_cost("default") == 60
    with pytest.raises(KeyError):
        q.push_request("r", policy_family="standard", raw_isl_tokens=1, cached_tokens=0)


# --- configuration validation -------------------------------------------


def _cfg(**over: Any) -> dict[str, Any]:
    c = json.loads(json.dumps(CONFIG))
    c.update(over)
    return c


def _cls(i: int, **over: Any) -> dict[str, Any]:
    c = _cfg()
    c["policy_classes"][i].update(over)
    return c


@pytest.mark.parametrize(
    "cfg, match",
    [
        (_cls(0, quantum=0), r"policy_classes\[0\]\.quantum.*0"),
        (_cls(1, quantum=-5), r"policy_classes\[1\]\.quantum.*-5"),
        (_cls(1, quantum=1.5), r"quantum.*1\.5"),
        (_cls(1, quantum=True), r"quantum.*True"),
        (_cls(0, queue_policy="lifo"), r"queue_policy.*lifo"),
        (_cls(1, name="std-cached"), r"policy_classes\[1\]\.name.*std-cached.*duplicate"),
        (_cls(0, name=""), r"policy_classes\[0\]\.name"),
        (_cls(1, cache_bucket="cached"), r"standard.*cached.*exactly one"),
        (_cls(3, policy_family="standard"), r"exactly one"),
        (_cls(2, cache_bucket="warm"), r"cache_bucket.*warm"),
        (_cls(2, cache_bucket=None), r"cache_bucket.*required"),
        (_cls(4, cache_bucket="cached"), r"cache_bucket.*needs a policy_family"),
        (_cls(0, max_queued_requests=-1), r"max_queued_requests.*-1"),
        (_cls(0, max_queued_tokens="many"), r"max_queued_tokens.*many"),
        (_cls(0, weight=3), r"unknown field.*weight"),
        (
            _cfg(cache_buckets=[{"name": "cached", "min_tokens": 5}]),
            r"cache_buckets\[0\]\.min_tokens.*5",
        ),
        (
            _cfg(
                cache_buckets=[
                    {"name": "cached", "min_tokens": 0},
                    {"name": "uncached", "min_tokens": 0},
                ]
            ),
            r"cache_buckets\[1\]\.min_tokens.*0",
        ),
        (
            _cfg(
                cache_buckets=[
                    {"name": "cached", "min_tokens": 0},
                    {"name": "cached", "min_tokens": 10},
                ]
            ),
            r"cache_buckets.*cached.*duplicate",
        ),
        (_cfg(cache_buckets=[{"name": "x"}]), r"cache_buckets\[0\]"),
        (_cfg(default_family="premium"), r"default_family.*premium"),
        (_cfg(policy_classes=[]), r"policy_classes"),
        (_cfg(policy_class=[]), r"unknown policy config field.*policy_class"),
    ],
)
def test_invalid_config_rejected_naming_the_field(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DRRQueue.from_config(cfg)


def test_missing_pair_is_rejected() -> None:
    c = _cfg()
    del c["policy_classes"][3]
    with pytest.raises(ValueError, match="'batch' x cache_bucket 'uncached' has no class"):
        DRRQueue.from_config(c)


def test_policy_class_validation() -> None:
    with pytest.raises(ValueError, match="quantum"):
        PolicyClass("a", 0)
    with pytest.raises(ValueError, match="queue_policy.*'lifo'"):
        PolicyClass("a", 1, "lifo")
    with pytest.raises(ValueError, match="duplicate"):
        DRRQueue([PolicyClass("a", 1), PolicyClass("a", 2)])
    with pytest.raises(TypeError):
        DRRQueue.from_config([1, 2])  # type: ignore[arg-type]


def test_example_yaml_and_json_files(tmp_path: Path) -> None:
    q = DRRQueue.from_config(EXAMPLE)
    assert q.class_names[:2] == ["cached", "uncached"]
    q2 = DRRQueue.from_config(str(EXAMPLE))
    assert q2.class_names == q.class_names
    p = tmp_path / "p.json"
    p.write_text(json.dumps(CONFIG))
    assert DRRQueue.from_config(p).class_names == [c["name"] for c in CONFIG["policy_classes"]]
