"""fairq's incremental view of SGLang's waiting list (``fairq.sglang.queue``).

Each scheduling decision reads only what changed in SGLang's list since the
last one (the list's journal); these tests check that this view always
equals the list, with SGLang's real ``Req`` objects and, where they run on
a CPU, SGLang's real ``Scheduler`` methods that change the list. Run with
the SGLang venv's python; skipped where SGLang is not importable.
"""

from __future__ import annotations

import random
import types
from typing import Any

import pytest

try:
    import sglang.srt.managers.schedule_policy  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the venv
    pytest.skip(f"SGLang 0.5.23 is not importable here ({e})", allow_module_level=True)

from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.enginebench.harness.sglang import Engine, publish_server_args
from fairq.sglang.queue import TrackedAttribute, WaitingList

POLICIES = ["fairq-fcfs", "fairq-lpm", "fairq-vtc", "fairq-dlpm"]


def _view(e: Engine) -> set[str]:
    """The requests fairq believes are in SGLang's waiting list."""
    return set(e.fairq.waiting) | set(e.fairq.admitted)


def _listed(e: Engine) -> set[str]:
    rids = [r.rid for r in e.waiting]
    assert len(rids) == len(set(rids))
    return set(rids)


# -- the list and the attribute ---------------------------------------------------


class _Holder:
    q = TrackedAttribute("q")


def _net(events: list[tuple[int, Any]]) -> dict[int, int]:
    net: dict[int, int] = {}
    for sign, x in events:
        net[id(x)] = net.get(id(x), 0) + sign
    return {k: v for k, v in net.items() if v}


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 50)), max_size=40))
def test_journal_nets_to_the_membership_change(ops: list[tuple[int, int]]) -> None:
    """Whatever list operations and reassignments run, the journal's net
    change per object is exactly the list's change of membership."""
    objs = [object() for _ in range(300)]
    h = _Holder()
    h.q = []
    wl = TrackedAttribute.track(h, "q")
    wl.extend(objs[:10])
    journal = wl.journal
    assert journal is not None and journal.take() is None  # starts lost
    before = list(h.q)
    fresh = iter(objs[10:])
    for op, a in ops:
        q = h.q
        n = len(q)
        if op == 0:
            q.append(next(fresh))
        elif op == 1:
            q.extend([next(fresh) for _ in range(a % 3)])
        elif op == 2 and n:
            q.pop(a % n)
        elif op == 3:
            q.insert(a, next(fresh))
        elif op == 4 and n:
            q.remove(q[a % n])
        elif op == 5 and n:
            del q[a % n : a % n + 2]
        elif op == 6 and n:
            q[a % n] = next(fresh)
        elif op == 7:
            q[1:3] = [next(fresh)]
        elif op == 8:  # SGLang's admission: the head filtered out
            q.head = min(a % 4, n)
            taken = set(q[: a % 3])
            h.q = [x for x in q if x not in taken]
        elif op == 9:  # a reassignment anywhere
            keep = [x for i, x in enumerate(q) if (i + a) % 3]
            h.q = [*keep, next(fresh)]
        elif op == 10:
            q += [next(fresh)]
        elif op == 11:
            random.Random(a).shuffle(q)  # reordering: no change
            q.sort(key=id)
        elif op == 12:
            q.clear()
    after = h.q
    assert isinstance(after, WaitingList) and after.journal is journal
    events = journal.take()
    assert events is not None
    want = {id(x): -1 for x in before if x not in after}
    want.update({id(x): 1 for x in after if x not in before})
    assert _net(events) == want
    assert wl.journal is None or wl is after  # a replaced list journals nothing


def test_replacement_compares_only_the_head_window() -> None:
    objs = [object() for _ in range(1000)]
    h = _Holder()
    h.q = []
    wl = TrackedAttribute.track(h, "q")
    wl.extend(objs)
    assert wl.journal is not None
    wl.journal.take()
    wl.head = 8
    kept = [x for x in wl if x is not objs[3] and x is not objs[5]]
    h.q = kept
    assert h.q is wl and wl == kept and wl.journal is not None  # updated in place
    assert wl.journal.take() == [(-1, objs[3]), (-1, objs[5])]
    assert wl.head == 6
    wl.head = 2  # a stale window: the whole list is compared instead
    kept = [x for x in wl if x is not objs[500]] + [objs[3]]
    h.q = kept
    assert h.q is not wl and h.q == kept and wl.journal is None
    assert h.q.journal is not None
    assert _net(h.q.journal.take()) == {id(objs[500]): -1, id(objs[3]): 1}


def test_unread_journal_is_bounded() -> None:
    h = _Holder()
    h.q = []
    wl = TrackedAttribute.track(h, "q")
    wl.journal.take()  # type: ignore[union-attr]
    for i in range(5000):
        wl.append(i)
        wl.pop()
    assert wl.journal is not None and wl.journal.events is None  # lost: read all once


# -- fairq's view through the harness --------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_arrivals_aborts_and_retractions_are_read_from_the_journal(policy: str) -> None:
    """Arrivals mid-run, aborts of waiting requests (SGLang pops them) and
    retractions (SGLang appends them back) reach fairq through the journal:
    after the first decision, no decision reads the whole list."""
    e = Engine(policy, chunk_size=256, max_prefill_tokens=1024, kv_tokens=1 << 15)
    rng = random.Random(3)
    n = 0
    for i in range(30):
        e.request([rng.randrange(50) for _ in range(rng.randrange(20, 200))], rid=f"t{i % 3}:{i}")
        n += 1
    retracted, aborted = [], []
    for step in range(400):
        if not e.waiting and not e.running and e.chunked is None:
            break
        e.step()
        assert _view(e) == _listed(e)
        if step % 3 == 0 and step < 60:  # arrivals mid-run
            e.request([rng.randrange(50) for _ in range(40)], rid=f"late{step % 2}:{step}")
            n += 1
        fresh = [r for r in e.waiting if r.rid not in e.admissions]
        if step in (2, 5) and fresh:  # abort while waiting
            aborted.append(fresh[-1])
            e.abort(fresh[-1])
        if step in (4, 8, 12) and e.running:
            retracted.append(e.running[0])
            e.retract(e.running[0])
    e.policy.calc_priority(e.waiting, None)
    st_ = e.fairq
    assert len(aborted) == 2 and len(retracted) == 3
    assert all(r.rid not in e.admissions for r in aborted)
    assert all(e.admissions[r.rid] >= 2 for r in retracted)
    assert len(st_) == 0 and st_.left == n and not st_.tenant_of
    assert st_.full_reads == 1 and st_.journal_reads > 20


_op = st.one_of(
    st.tuples(st.just("arrive"), st.integers(0, 3), st.integers(1, 120)),
    st.tuples(st.just("arrive"), st.integers(0, 3), st.integers(1, 120)),
    st.tuples(st.just("step"), st.just(0), st.just(0)),
    st.tuples(st.just("retract"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("abort_waiting"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("abort_running"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("retract"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("step"), st.just(0), st.just(0)),
    st.tuples(st.just("decide"), st.just(0), st.just(0)),
    st.tuples(st.just("insert_head"), st.integers(0, 3), st.integers(1, 60)),
    st.tuples(st.just("reassign"), st.integers(0, 50), st.just(0)),
)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=60), policy=st.sampled_from(POLICIES))
def test_fairq_view_equals_sglangs_list(ops: list[tuple[str, int, int]], policy: str) -> None:
    """Random arrivals, aborts (waiting and running), retractions,
    admissions, finishes, and list changes SGLang makes elsewhere (an insert
    at the head as the disaggregation path does, a copy without one request
    and in another order): at every decision fairq's waiting requests are exactly SGLang's
    list, and when all is done each request left fairq exactly once."""
    e = Engine(policy, chunk_size=64, max_prefill_tokens=256, kv_tokens=1 << 12)
    rng = random.Random(len(ops))
    made = 0

    def new_req(t: int, n: int) -> Any:
        nonlocal made
        made += 1
        toks = [rng.randrange(8) for _ in range(n)]
        return e.request(toks, max_new_tokens=rng.randrange(1, 4), rid=f"t{t}:{made}")

    for op, a, b in ops:
        if op == "arrive":
            new_req(a, b)
        elif op == "abort_waiting" and e.waiting:
            e.abort(e.waiting[a % len(e.waiting)])
        elif op == "abort_running" and e.running:
            e.abort(e.running[a % len(e.running)])
        elif op == "retract" and e.running:
            e.retract(e.running[a % len(e.running)])
        elif op == "step":
            decides = bool(e.waiting) or e.chunked is not None
            e.step()
            if decides:
                assert _view(e) == _listed(e)
        elif op == "decide":
            e.policy.calc_priority(e.waiting, None)
            assert _view(e) == _listed(e)
        elif op == "insert_head":
            req = new_req(a, b)
            e.waiting.remove(req)
            e.waiting.insert(0, req)
        elif op == "reassign" and e.waiting:
            e.waiting = [r for i, r in enumerate(e.waiting) if i != a % len(e.waiting)][::-1]
            # the dropped one left without a finish reason, as SGLang's
            # abort_request leaves a waiting request (a retracted one too)
    e.run(max_steps=2000)
    st_ = e.fairq
    assert st_.full_reads == 1
    assert len(st_) == 0 and len(st_.sched) == 0 and st_.sched.num_running == 0
    assert st_.left == st_.added <= made and not st_.tenant_of


def test_lost_journal_reads_the_whole_list_once() -> None:
    """A journal dropped for growing unread (or any list fairq has not
    followed) makes the next decision read the whole list, then the journal
    again."""
    e = Engine("fairq-vtc")
    for i in range(6):
        e.request([1, 2, 3, i], rid=f"t{i % 2}:{i}")
    e.step()
    assert e.fairq.full_reads == 1
    e.request([4, 5], rid="t0:late")
    e.abort(e.waiting[0])
    assert e.waiting.journal is not None
    e.waiting.journal.events = None
    e.policy.calc_priority(e.waiting, None)
    assert e.fairq.full_reads == 2 and _view(e) == _listed(e)
    e.request([6], rid="t1:later")
    e.policy.calc_priority(e.waiting, None)
    assert e.fairq.full_reads == 2 and _view(e) == _listed(e)
    e.policy.calc_priority(list(e.waiting), None)  # a plain copy: read whole
    e.policy.calc_priority(e.waiting, None)  # and the journal is not trusted
    assert e.fairq.full_reads == 4
    e.run()
    assert len(e.fairq) == 0 and e.fairq.left == e.fairq.added == 8


def test_retracted_then_aborted_before_the_next_decision_leaves() -> None:
    """A running request retracted (back in the list) and aborted while
    waiting (popped, no finish reason, as SGLang's ``abort_request``) before
    fairq's next decision leaves fairq: the journal shows it re-entered."""
    e = Engine("fairq-fcfs")
    a = e.request([1, 2, 3], max_new_tokens=8, rid="t0:a")
    e.request([4, 5, 6], max_new_tokens=8, rid="t1:b")
    e.step()
    assert a in e.running
    e.retract(a)
    e.waiting.remove(a)  # SGLang's abort_request pops it; nothing is set
    e.policy.calc_priority(e.waiting, None)
    assert "t0:a" not in e.fairq.running and e.fairq.left == 1


# -- SGLang's own Scheduler methods ---------------------------------------------------


def _bare_fair_scheduler(sm: Any) -> Any:
    """An SGLang ``Scheduler`` (no model) with what ``init_schedule_policy``,
    ``_add_request_to_queue`` and ``abort_request`` read."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.mem_cache.radix_cache import RadixCache

    s = object.__new__(sm.Scheduler)
    s.schedule_policy = "fcfs"
    s.tree_cache = RadixCache.create_simulated()
    s.enable_hierarchical_cache = False
    s.enable_priority_scheduling = False
    s.schedule_low_priority_values_first = False
    s.waiting_queue = []  # as Scheduler.init_running_status, before the policy
    s.init_schedule_policy()
    s.abort_on_priority_when_disabled = False
    s.disaggregation_mode = DisaggregationMode.NULL
    s.max_queued_requests = None
    s.enable_hicache_storage = s.enable_lmcache = False
    s.processed_tokens_counter = 0
    s.chunked_req = None
    s.mm_receiver = None
    s.dllm_config = None
    s.beam_coordinator = types.SimpleNamespace(retire_group=lambda req: None)
    s.grammar_manager = types.SimpleNamespace(abort_requests=lambda recv: None)
    s.aborted: list[str] = []
    s.send_abort_output = lambda abort_req, req: s.aborted.append(req.rid)
    s._release_aborted_request = lambda req: None
    return s


def test_sglangs_scheduler_methods_reach_fairq() -> None:
    """``Scheduler._add_request_to_queue`` (arrivals, and retracted requests
    with ``is_retracted=True``), ``Scheduler.abort_request`` (a waiting
    request popped) and the admission's ``self.waiting_queue = [...]`` of
    SGLang 0.5.23, run on a scheduler with fairq installed, all reach fairq
    through the journal."""
    sm = pytest.importorskip("sglang.srt.managers.scheduler", reason="SGLang's Scheduler module")
    from sglang.srt.managers.io_struct import AbortReq

    import fairq.sglang

    publish_server_args()
    fairq.sglang.install("fairq-vtc")
    try:
        assert isinstance(vars(sm.Scheduler)["waiting_queue"], TrackedAttribute)
        s = _bare_fair_scheduler(sm)
        assert isinstance(s.waiting_queue, WaitingList)
        st_ = s.policy.fairq
        maker = Engine("fcfs")  # only to make real Reqs
        reqs = [maker.request([1, 2, 3, i], rid=f"t{i % 2}:{i}") for i in range(6)]
        for r in reqs[:4]:
            s._add_request_to_queue(r)
        s.policy.calc_priority(s.waiting_queue, None)
        assert set(st_.waiting) | set(st_.admitted) == {r.rid for r in reqs[:4]}
        assert st_.full_reads == 1
        try:
            s.abort_request(AbortReq(rid="t1:1"))
        except AttributeError:
            pass  # past the waiting list: in-flight batches this bare scheduler lacks
        assert s.aborted == ["t1:1"]
        for r in reqs[4:]:  # arrivals between decisions
            s._add_request_to_queue(r)
        s.policy.calc_priority(s.waiting_queue, None)
        assert set(st_.waiting) | set(st_.admitted) == {r.rid for r in reqs if r.rid != "t1:1"}
        # SGLang's adder takes the first admitted; the list is filtered
        first = s.waiting_queue[0]
        assert first.rid in st_.admitted
        first.prefix_len, first.extend_end = 0, len(first.origin_input_ids)
        st_.taken(first)
        can_run_set = {first}
        s.waiting_queue = [x for x in s.waiting_queue if x not in can_run_set]
        s.policy.calc_priority(s.waiting_queue, None)
        assert first.rid in st_.running and first.rid not in st_.waiting
        first.reset_for_retract()
        s._add_request_to_queue(first, is_retracted=True)  # retraction
        s.policy.calc_priority(s.waiting_queue, None)
        assert first.rid not in st_.running
        assert set(st_.waiting) | set(st_.admitted) == {r.rid for r in s.waiting_queue}
        assert st_.full_reads == 1 and st_.journal_reads == 3
    finally:
        fairq.sglang.uninstall()
    assert "waiting_queue" not in vars(sm.Scheduler)
    assert isinstance(s.waiting_queue, list)
