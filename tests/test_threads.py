"""Threads and re-entrancy (issue 15, item 5).

What fairq guarantees: every call on a fairq object is atomic (it runs under
the GIL with the object borrowed), so several threads may share one object
and its state stays consistent. Most objects run no Python code while
borrowed, so code they call (a vLLM request's attribute, a dual-phase request
id's ``__hash__``) may even use the same object. Two run user code
mid-operation: a DRR ``dispatchable`` predicate and a WFQ flow key's
``__hash__``. A call on that object made meanwhile, from that code or from
another thread, raises ``RuntimeError`` naming the object and "re-entrant use"
/ "concurrent use", and changes nothing (``rust/python/mod.rs::busy``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import fairq
from fairq.vllm import PriorityRequestQueue

from reference.vllm import Req


def test_drr_predicate_that_reenters_gets_a_clear_error() -> None:
    q = fairq.DRRQueue([fairq.PolicyClass("a", 10), fairq.PolicyClass("b", 10)])
    q.push(1, "a", 3)
    q.push(2, "b", 3)
    before = q.stats(), q.cursor, len(q)

    def pred(cls: str, item: Any) -> bool:
        q.pop()  # the queue is busy running this very predicate
        return True

    with pytest.raises(RuntimeError, match="fairq.DRRQueue is busy.*re-entrant use"):
        q.pop(dispatchable=pred)
    assert (q.stats(), q.cursor, len(q)) == before
    assert q.pop() == ("a", 1)  # and it still works


def test_request_attribute_that_uses_the_queue_works() -> None:
    """Request attributes are read before the queue is borrowed, so a
    property that uses the queue simply runs first (no error, no corruption)."""
    q = PriorityRequestQueue()
    q.add_request(Req("x", 0))

    class Sneaky(Req):
        @property
        def priority(self) -> int:  # type: ignore[override]
            q.pop_request()
            return 0

        @priority.setter
        def priority(self, v: Any) -> None:
            pass

    q.add_request(Sneaky("y"))
    assert [r.request_id for r in q] == ["y"]


def test_request_id_hash_that_uses_the_dual_phase_queue_works() -> None:
    q = fairq.DualPhaseQueue()
    q.add("a")

    calls = []

    class Rid:
        def __hash__(self) -> int:
            calls.append(1)
            q.add(f"in-hash-{len(calls)}")
            return 7

    r = Rid()
    q.add(r)
    assert r in q and len(q) == 2 + len(calls)  # "a", r, one id per hash call
    q.remove(r)
    assert r not in q and len(q) == 1 + len(calls)


def test_wfq_flow_key_hash_that_reenters_gets_a_clear_error() -> None:
    w = fairq.WFQQueue()
    w.add("a", tokens=3, flow="c")

    class Flow:
        def __hash__(self) -> int:
            w.pop()
            return 1

    with pytest.raises(RuntimeError, match="fairq.WFQQueue is busy"):
        w.add("b", tokens=3, flow=Flow())
    assert w.items() == ["a"]


@pytest.mark.parametrize("kind", ["vtc", "drr", "wfq", "d2lpm"])
def test_one_object_shared_by_threads_stays_consistent(kind: str) -> None:
    """Four threads hammer one object; afterwards every request added left
    exactly once and the object's own checks pass."""
    n_threads, per_thread = 4, 3000
    lock = threading.Lock()
    left: list[Any] = []
    errors: list[BaseException] = []
    if kind == "vtc":
        s = fairq.VTC()
    elif kind == "drr":
        q = fairq.DRRQueue([fairq.PolicyClass("a", 7), fairq.PolicyClass("b", 3)])
    elif kind == "wfq":
        w = fairq.WFQQueue()
    else:
        d = fairq.D2LPM(3, 50.0)

    def work(k: int) -> None:
        try:
            for i in range(per_thread):
                rid = f"{k}-{i}"
                if kind == "vtc":
                    s.add(rid, f"c{k}", [1, 2, i % 5])
                    out = [a.request_id for a in s.schedule(8)]
                    for r in out:
                        s.finish(r)
                elif kind == "drr":
                    q.push(rid, "ab"[i % 2], 1 + i % 5)
                    got = q.pop()
                    out = [got[1]] if got else []
                elif kind == "wfq":
                    w.add(rid, tokens=1 + i % 5, flow=k)
                    out = [w.pop()]
                else:
                    d.dispatch(rid, f"c{k}", [1, 2, i % 5])
                    d.on_finish(rid, 1)
                    out = [rid]
                with lock:
                    left.extend(out)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    # drain what is still queued, then check conservation
    if kind == "vtc":
        for a in s.schedule(10**9):
            s.finish(a.request_id)
            left.append(a.request_id)
        s._check()
    elif kind == "drr":
        while (got := q.pop()) is not None:
            left.append(got[1])
    elif kind == "wfq":
        while w:
            left.append(w.pop())
    added = {f"{k}-{i}" for k in range(n_threads) for i in range(per_thread)}
    assert len(left) == len(added) and set(left) == added


@pytest.mark.parametrize("call", ["push", "len", "stats", "state_dict"])
def test_another_thread_during_a_callback_is_refused_cleanly(call: str) -> None:
    """While a DRR pop runs its (slow) predicate, another thread's call on the
    queue raises a RuntimeError naming concurrent use and changes nothing;
    the pop then completes."""
    q = fairq.DRRQueue([fairq.PolicyClass("a", 10)])
    q.push(1, "a", 3)
    inside = threading.Event()
    seen: list[BaseException] = []

    def pred(cls: str, item: Any) -> bool:
        inside.set()
        time.sleep(0.3)  # releases the GIL: the other thread runs now
        return True

    def other() -> None:
        inside.wait(5)
        try:
            if call == "push":
                q.push(2, "a", 1)
            elif call == "len":
                len(q)
            elif call == "stats":
                q.stats()
            else:
                q.state_dict()
        except RuntimeError as e:
            seen.append(e)

    t = threading.Thread(target=other)
    t.start()
    assert q.pop(dispatchable=pred) == ("a", 1)
    t.join(5)
    assert len(seen) == 1 and len(q) == 0
    assert "fairq.DRRQueue is busy" in str(seen[0])
    assert "concurrent use" in str(seen[0])
