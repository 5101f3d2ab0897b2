"""Threads and re-entrancy (issue 15, item 5).

What fairq guarantees: every call on a fairq object is atomic (it runs under
the GIL with the object borrowed), so several threads may share one object
and its state stays consistent. A call that runs Python code (a DRR
``dispatchable`` predicate, a vLLM request's attributes) keeps the object
borrowed meanwhile: calling the same object from inside that code raises a
``RuntimeError`` that says "re-entrant use", and calling it from another
thread at that moment raises ``RuntimeError`` too; neither changes anything.
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

    with pytest.raises(RuntimeError, match="re-entrant use of fairq.DRRQueue") as ei:
        q.pop(dispatchable=pred)
    assert "Already" in str(ei.value.__cause__)
    assert (q.stats(), q.cursor, len(q)) == before
    assert q.pop() == ("a", 1)  # and it still works


def test_request_attribute_that_reenters_gets_a_clear_error() -> None:
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

    with pytest.raises(RuntimeError, match=r"re-entrant use .* reading request.priority"):
        q.add_request(Sneaky("y"))
    assert [r.request_id for r in q] == ["x"]


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


def test_another_thread_during_a_callback_is_refused_cleanly() -> None:
    """While a DRR pop runs its (slow) predicate, another thread's call on the
    queue raises RuntimeError and changes nothing; the pop then completes."""
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
            q.push(2, "a", 1)
        except RuntimeError as e:
            seen.append(e)

    t = threading.Thread(target=other)
    t.start()
    assert q.pop(dispatchable=pred) == ("a", 1)
    t.join(5)
    assert len(seen) == 1 and len(q) == 0
