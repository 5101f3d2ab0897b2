"""fairq.vllm queues vs the pure-Python reference: random operation sequences
must give identical results (by identity) and identical exceptions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fairq.vllm import FCFSRequestQueue, PriorityRequestQueue

from reference.vllm import RefFCFSRequestQueue, RefPriorityRequestQueue, Req

# Small value sets so ties (equal priority / arrival / id) are frequent.
priorities = st.one_of(st.integers(-2, 2), st.sampled_from([-1.5, 0.0, 0.5, 1.0, 2.5]))
arrivals = st.one_of(st.integers(0, 3), st.sampled_from([0.0, 0.25, 1.0, 2.5, float("inf")]))
request_ids = st.one_of(st.integers(-2, 3), st.sampled_from(["", "a", "b", "ab", "é", "z"]))
new_request = st.builds(Req, priorities, arrivals, request_ids)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except Exception as e:  # noqa: BLE001 - compared type and message
        return ("err", (type(e), str(e)))


class QueueMachine(RuleBasedStateMachine):
    fairq_cls: Any = FCFSRequestQueue
    ref_cls: Any = RefFCFSRequestQueue

    def __init__(self) -> None:
        super().__init__()
        self.q = self.fairq_cls()
        self.ref = self.ref_cls()
        self.pool: list[Req] = []

    def same(self, name: str, *args: Any) -> Any:
        a = outcome(getattr(self.q, name), *args)
        b = outcome(getattr(self.ref, name), *args)
        assert a[0] == b[0], (name, a, b)
        if a[0] == "ok":
            assert a[1] is b[1], (name, a, b)
        else:
            assert a[1] == b[1], (name, a, b)
        return a

    def pick(self, data: st.DataObject) -> Req:
        if self.pool and data.draw(st.booleans()):
            return data.draw(st.sampled_from(self.pool))
        r = data.draw(new_request)
        self.pool.append(r)
        return r

    def picks(self, data: st.DataObject) -> list[Req]:
        return [self.pick(data) for _ in range(data.draw(st.integers(0, 4)))]

    @rule(data=st.data())
    def add(self, data: st.DataObject) -> None:
        self.same("add_request", self.pick(data))

    @rule()
    def pop(self) -> None:
        self.same("pop_request")

    @rule()
    def peek(self) -> None:
        self.same("peek_request")

    @rule(data=st.data())
    def prepend(self, data: st.DataObject) -> None:
        self.same("prepend_request", self.pick(data))

    @rule(data=st.data(), as_tuple=st.booleans())
    def prepend_batch(self, data: st.DataObject, as_tuple: bool) -> None:
        rs = self.picks(data)
        self.same("prepend_requests", tuple(rs) if as_tuple else rs)

    @rule(data=st.data())
    def prepend_from_queue(self, data: st.DataObject) -> None:
        # vLLM passes another RequestQueue; each side gets its own kind.
        rs = self.picks(data)
        src_q, src_ref = self.fairq_cls(), self.ref_cls()
        for r in rs:
            if outcome(src_ref.add_request, r)[0] == "ok":
                src_q.add_request(r)
        self.same_with(("prepend_requests", src_q), ("prepend_requests", src_ref))

    def same_with(self, fa: tuple[str, Any], fb: tuple[str, Any]) -> None:
        a = outcome(getattr(self.q, fa[0]), fa[1])
        b = outcome(getattr(self.ref, fb[0]), fb[1])
        assert a[0] == b[0] and (a[0] == "ok" or a[1] == b[1]), (a, b)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        self.same("remove_request", self.pick(data))

    @rule(data=st.data(), as_set=st.booleans())
    def remove_batch(self, data: st.DataObject, as_set: bool) -> None:
        rs = self.picks(data)
        if as_set:
            self.same("remove_requests", set(rs))
        else:  # a one-shot iterator each
            self.same_with(("remove_requests", iter(rs)), ("remove_requests", iter(rs)))

    @precondition(lambda self: len(self.ref) > 0)
    @rule()
    def remove_all_via_self(self) -> None:
        self.same_with(("remove_requests", list(self.q)), ("remove_requests", list(self.ref)))

    @rule()
    def iterate(self) -> None:
        a, b = list(self.q), list(self.ref)
        assert len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True)), (a, b)
        # Iterating does not change the queue.
        assert [id(x) for x in self.q] == [id(x) for x in a]

    @rule(data=st.data())
    def contains(self, data: st.DataObject) -> None:
        r = self.pick(data)
        assert (r in self.q) == any(x is r for x in self.ref)

    @invariant()
    def sizes(self) -> None:
        assert len(self.q) == len(self.ref)
        assert bool(self.q) == bool(self.ref)


class PriorityMachine(QueueMachine):
    fairq_cls = PriorityRequestQueue
    ref_cls = RefPriorityRequestQueue


_settings = settings(max_examples=80, stateful_step_count=40)
TestFCFSMatchesReference = QueueMachine.TestCase
TestFCFSMatchesReference.settings = _settings
TestPriorityMatchesReference = PriorityMachine.TestCase
TestPriorityMatchesReference.settings = _settings


@pytest.mark.parametrize("cls", [FCFSRequestQueue, PriorityRequestQueue])
def test_prepend_requests_from_itself(cls: Any) -> None:
    q = cls()
    rs = [Req(str(i), 0, float(i)) for i in range(3)]
    for r in rs:
        q.add_request(r)
    if cls is FCFSRequestQueue:
        q.prepend_requests(q)  # like deque.extendleft(self)
        ref = RefFCFSRequestQueue(rs)
        ref.prepend_requests(ref)
        assert [id(x) for x in q] == [id(x) for x in ref]
    else:
        with pytest.raises(ValueError, match="already in the priority queue"):
            q.prepend_requests(q)
        assert len(q) == 3
    q.remove_requests(q)
    assert not q
