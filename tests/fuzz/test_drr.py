"""fairq.DRRQueue, PolicyClass and DRR configs under hostile input.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairq
from fairq import QueueFull

from fuzz.hostile import (
    FUZZ,
    BadBool,
    BadIter,
    Boom,
    Item,
    Unhashable,
    attempt,
    check_exc,
    hostile,
    must_fail,
)


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
                    # the nested call finds the queue busy and says so; the
                    # pop propagates that error and changes nothing
                    assert "fairq.DRRQueue is busy" in str(e), e
                else:
                    check_exc(e, None, True)
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
        check_exc(e, None, False)
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
