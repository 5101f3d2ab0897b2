"""Saving and restoring fairness state (issue 15, item 1): ``state_dict()`` /
``load_state_dict()`` of the local schedulers.

The property: run a random trace, save at a random point, build a fresh
scheduler, load, re-add the waiting requests in their original order, run the
rest; admissions, per-client service, counters / deficits and the final state
equal an uninterrupted twin's exactly (not approximately).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sched import OPS, PREFIXES

import fairq
from fairq import DLPM, FCFS, LPM, VTC, RadixTree

Sched = FCFS | LPM | VTC | DLPM


def make(policy: str, tree: RadixTree, quantum: float) -> Sched:
    if policy == "fcfs":
        return FCFS(tree)
    if policy == "lpm":
        return LPM(tree)
    if policy == "vtc":
        return VTC(tree, w_in=1.0, w_out=2.0)
    return DLPM(tree, quantum=quantum)


def observe(s: Sched) -> dict[str, Any]:
    """Everything a caller can read of the fairness state."""
    out: dict[str, Any] = {
        "clients": s.clients(),
        "service": [s.service(c) for c in s.clients()],
        "weight": [s.weight(c) for c in s.clients()],
        "waiting": [s.num_waiting(c) for c in s.clients()],
        "len": len(s),
        "running": s.num_running,
    }
    if isinstance(s, VTC):
        out["counter"] = [s.counter(c) for c in s.clients()]
    if isinstance(s, DLPM):
        out["deficit"] = [s.deficit(c) for c in s.clients()]
        out["refills"] = s.refills
    return out


def run_twins(policy: str, page: int, quantum: float, ops: list[Any], cut: int) -> None:
    # The engine's caches: the same operations reach both trees.
    trees = [RadixTree(capacity=40, page_size=page), RadixTree(capacity=40, page_size=page)]
    twin = make(policy, trees[0], quantum)  # never interrupted
    s = make(policy, trees[1], quantum)  # saved and restored at `cut`
    waiting: dict[Any, tuple[str, list[int], Any]] = {}  # in arrival order
    running: list[Any] = []
    prompts: dict[Any, list[int]] = {}
    n = 0
    cut = min(cut, len(ops))
    for i, op in enumerate([*ops, ("end",)]):
        if i == cut:
            state = json.loads(json.dumps(s.state_dict()))  # plain JSON round trip
            assert state == twin.state_dict()
            s = make(policy, trees[1], quantum * 7 + 1)  # options come from the state
            s.load_state_dict(state)
            for rid, (client, toks, item) in waiting.items():
                s.add(rid, client, toks, item=item)
            assert s.state_dict() == state
            assert observe(s) == observe(twin)
        kind = op[0]
        if kind == "add":
            _, client, p, suffix, _ = op
            toks = PREFIXES[p] + suffix
            rid: Any = n if n % 2 else f"r{n}"
            n += 1
            if not toks:  # refused (tests/test_sched.py checks it)
                continue
            for x in (twin, s):
                x.add(rid, client, toks, item=("item", rid))
            waiting[rid] = (client, toks, ("item", rid))
            prompts[rid] = toks
        elif kind == "insert":
            for t in trees:
                t.insert(PREFIXES[op[1]] + op[2])
        elif kind == "evict":
            for t in trees:
                t.evict(op[1])
        elif kind == "schedule":
            got = [
                [
                    (a.request_id, a.client, a.item, a.input_len, a.cached_len, a.extend_len)
                    for a in x.schedule(op[1], max_requests=op[2])
                ]
                for x in (twin, s)
            ]
            assert got[0] == got[1]
            for a in got[0]:
                del waiting[a[0]]
                running.append(a[0])
                for t in trees:
                    t.insert(prompts[a[0]])
        elif kind in ("charge", "finish", "recharge") and running:
            rid = running[op[1] % len(running)]
            if kind == "charge":
                for x in (twin, s):
                    x.charge_output(rid, op[2])
            elif kind == "finish":
                for x in (twin, s):
                    x.finish(rid)
                running.remove(rid)
            else:
                ext = op[2] % (len(prompts[rid]) + 1)
                assert twin.recharge_extend(rid, ext) == s.recharge_extend(rid, ext)
        elif kind == "remove" and waiting:
            rid = list(waiting)[op[1] % len(waiting)]
            assert twin.remove(rid) == s.remove(rid)
            del waiting[rid]
        elif kind == "weight":
            for x in (twin, s):
                x.set_weight(op[1], op[2])
        assert observe(s) == observe(twin)
    s._check()
    assert s.state_dict() == twin.state_dict()


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "vtc", "dlpm"])
@settings(max_examples=80)
@given(
    page=st.sampled_from([1, 2]),
    quantum=st.sampled_from([2.0**-4, 0.5, 3.0, 10.0, 1e9]),
    ops=st.lists(OPS, max_size=60),
    cut=st.integers(0, 60),
)
def test_restore_then_readd_equals_an_uninterrupted_twin(
    policy: str, page: int, quantum: float, ops: list[Any], cut: int
) -> None:
    run_twins(policy, page, quantum, ops, cut)


def test_vtc_client_waiting_at_save_is_not_lifted_on_readd() -> None:
    """The one rule a restore needs: in the uninterrupted scheduler a client
    that was waiting never went empty, so its re-add must not lift it."""
    s = VTC()
    s.add("a1", "a", [1] * 10)
    s.add("b1", "b", [1] * 10)
    s.add("b2", "b", [1] * 10)
    assert [a.request_id for a in s.schedule(10)] == ["a1"]  # a: 10, b: 0
    state = s.state_dict()
    assert [c["waiting"] for c in state["clients"]] == [0, 2]
    r = VTC()
    r.load_state_dict(state)
    r.add("b2", "b", [1] * 10)  # b was waiting: stays at 0, not lifted
    assert r.counter("b") == 0.0
    r.add("a2", "a", [1] * 10)  # a was not: lifted to min(b) = 0, keeps 10
    assert r.counter("a") == 10.0
    assert [a.request_id for a in r.schedule(10)] == ["b2"]


def test_running_requests_survive_a_restore() -> None:
    t = RadixTree()
    s = DLPM(t, quantum=100.0, w_e=1.0, w_q=2.0)
    s.set_weight("a", 2.0)
    s.add(7, "a", [1, 2, 3, 4])
    s.add("s\u00e9", "b", [5, 6])
    s.schedule(100)
    r = DLPM(RadixTree(), quantum=1.0)
    r.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert r.num_running == 2 and len(r) == 0
    assert r.charged_extend(7) == 4
    assert r.recharge_extend(7, 1) == 4  # the admission weight (2.0) came along
    s.recharge_extend(7, 1)
    for x in (s, r):
        x.charge_output("s\u00e9", 3)
        x.finish(7)
        x.finish("s\u00e9")
    assert r.state_dict() == s.state_dict()
    assert r.deficit("a") == s.deficit("a") and r.service("b") == s.service("b")


def test_state_is_plain_json_with_a_version() -> None:
    s = VTC(w_in=1.5, w_out=3.0)
    s.add(1, "x", [1, 2])
    state = s.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["format"] == "fairq.LocalScheduler" and state["version"] == 1
    assert state["policy"] == "vtc" and state["options"] == {"w_in": 1.5, "w_out": 3.0}
    assert state["clients"] == [
        {"name": "x", "weight": 1.0, "service": 0.0, "waiting": 1, "admitted": 0, "counter": 0.0}
    ]
    assert state["running"] == []


def _dlpm_state() -> dict[str, Any]:
    s = DLPM(RadixTree(), quantum=5.0)
    s.add(1, "a", [1, 2, 3])
    s.add(2, "b", [4])
    s.schedule(10)
    s.add(3, "a", [9])
    return s.state_dict()


def _with(state: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``state`` with ``path`` (``a.b[0].c``) set to ``value``
    (the sentinel ``DELETE`` removes the key)."""
    out = json.loads(json.dumps(state))
    node: Any = out
    parts = path.replace("[", ".[").split(".")
    for p in parts[:-1]:
        node = node[int(p[1:-1])] if p.startswith("[") else node[p]
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return out


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "exc", "words"),
    [
        ("version", 2, ValueError, "version is 2"),
        ("version", "1", ValueError, "version"),
        ("format", "fairq.WFQ", ValueError, "format"),
        ("policy", "vtc", ValueError, "policy is 'vtc'"),
        ("options.quantum", float("nan"), ValueError, "options.quantum must be a finite"),
        ("options.quantum", 0, ValueError, "options.quantum must be > 0"),
        ("options.w_q", DELETE, ValueError, "options.w_q is required"),
        ("options.colour", 1, ValueError, "unknown field 'colour'"),
        ("clients[0].deficit", float("nan"), ValueError, "clients[0].deficit must be a finite"),
        ("clients[0].deficit", float("inf"), ValueError, "clients[0].deficit"),
        ("clients[0].deficit", "1", ValueError, "clients[0].deficit must be a number"),
        ("clients[1].service", -1.0, ValueError, "clients[1].service must be >= 0"),
        ("clients[1].weight", 0.0, ValueError, "clients[1].weight must be > 0"),
        ("clients[1].waiting", -2, ValueError, "clients[1].waiting"),
        ("clients[1].counter", 1.0, ValueError, "unknown field 'counter'"),
        ("clients[1].name", "a", ValueError, "clients[1].name repeats client"),
        ("clients[1].name", 5, ValueError, "clients[1].name must be a string"),
        ("clients[0]", [], ValueError, "clients[0] must be a mapping"),
        ("running[0].request_id", 1.5, ValueError, "running[0].request_id"),
        ("running[0].request_id", 2**70, ValueError, "running[0].request_id"),
        ("running[1].request_id", 1, ValueError, "running[1].request_id repeats"),
        ("running[0].client", "zz", ValueError, "running[0].client names"),
        ("running[0].charged_extend", 99, ValueError, "running[0].charged_extend"),
        ("running[0].input_len", -1, ValueError, "running[0].input_len"),
        ("running[0].admission_weight", -1.0, ValueError, "admission_weight must be > 0"),
        ("refills", -1, ValueError, "refills"),
        ("refills", DELETE, ValueError, "refills is required"),
        ("extra", 1, ValueError, "unknown field 'extra'"),
    ],
)
def test_bad_state_names_the_field_and_changes_nothing(
    path: str, value: Any, exc: type[Exception], words: str
) -> None:
    bad = _with(_dlpm_state(), path, value)
    s = DLPM(RadixTree(), quantum=3.0)
    s.set_weight("z", 4.0)
    before = s.state_dict()
    with pytest.raises(exc) as ei:
        s.load_state_dict(bad)
    assert words in str(ei.value)
    assert s.state_dict() == before


@pytest.mark.parametrize("state", [None, [], "x", 3, {}])
def test_state_that_is_not_a_document(state: Any) -> None:
    s = FCFS()
    with pytest.raises((TypeError, ValueError)):
        s.load_state_dict(state)
    assert s.clients() == []


def test_load_needs_an_empty_scheduler() -> None:
    s = LPM(RadixTree())
    s.add(1, "a", [1])
    state = LPM(RadixTree()).state_dict()
    with pytest.raises(ValueError, match="no requests; this one has 1 waiting"):
        s.load_state_dict(state)
    assert len(s) == 1


# ---- dispatchers ------------------------------------------------------------

DISPATCH_OPS = st.one_of(
    st.tuples(st.just("dispatch"), st.sampled_from("abc"), st.lists(st.integers(0, 3), max_size=8)),
    st.tuples(st.just("finish"), st.integers(0, 1000), st.integers(0, 30)),
    st.tuples(
        st.just("evict"),
        st.integers(0, 3),
        st.lists(st.integers(0, 3), max_size=8),
        st.integers(0, 8),
    ),
)


def _dispatcher(name: str, n: int, quantum: float) -> Any:
    from fairq.dispatch import make_dispatcher

    return make_dispatcher(name, n, worker_quantum=quantum, abs_threshold=2.0)


def _observe_dispatcher(d: Any, n: int) -> dict[str, Any]:
    out = {
        "clients": d.clients(),
        "queue_sizes": d.queue_sizes,
        "dispatched": d.dispatched_counts,
        "len": len(d),
    }
    if d.policy == "D2LPM":
        out["deficits"] = [[d.deficit(c, w) for w in range(n)] for c in d.clients()]
    return out


@pytest.mark.parametrize("name", ["d2lpm", "affinity", "rr", "ll", "client-rr"])
@settings(max_examples=80)
@given(
    ops=st.lists(DISPATCH_OPS, max_size=60),
    n=st.integers(1, 4),
    quantum=st.sampled_from([1.0, 5.0, 40.0, float("inf")]),
    cut=st.integers(0, 60),
)
def test_dispatcher_restore_equals_an_uninterrupted_twin(
    name: str, ops: list[Any], n: int, quantum: float, cut: int
) -> None:
    twin = _dispatcher(name, n, quantum)
    d = _dispatcher(name, n, quantum)
    live: list[int] = []
    rid = 0
    for i, op in enumerate([*ops, ("end",)]):
        if i == min(cut, len(ops)):
            state = json.loads(json.dumps(d.state_dict()))
            assert state == twin.state_dict()
            d = _dispatcher(name, n, 3.0)  # options come from the state
            d.load_state_dict(state)
            assert d.state_dict() == state
        if op[0] == "dispatch":
            _, client, toks = op
            assert d.dispatch(rid, client, toks) == twin.dispatch(rid, client, toks)
            live.append(rid)
            rid += 1
        elif op[0] == "finish" and live:
            r = live.pop(op[1] % len(live))
            assert d.on_finish(r, op[2]) == twin.on_finish(r, op[2])
        elif op[0] == "evict":
            _, w, toks, kept = op
            assert d.on_evict(w % n, toks, kept) == twin.on_evict(w % n, toks, kept)
        assert _observe_dispatcher(d, n) == _observe_dispatcher(twin, n)
    for probe in ([0, 1, 2], [3, 3], [1], []):
        assert d.longest_match(probe) == twin.longest_match(probe)
    assert d.state_dict() == twin.state_dict()


def _d2lpm_state() -> dict[str, Any]:
    d = fairq.D2LPM(2, 10.0)
    d.dispatch(1, "a", [1, 2, 3])
    d.dispatch(2, "b", [1, 2])
    d.dispatch(3, "a", [7])
    return d.state_dict()


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        ("version", 0, "version is 0"),
        ("policy", "RoundRobin", "policy is 'RoundRobin'"),
        ("num_workers", 3, "num_workers is 3"),
        ("options.worker_quantum", 0.0, "options.worker_quantum"),
        ("options.w_e", float("nan"), "options.w_e"),
        ("clients[0].deficits", [1.0], "clients[0].deficits must list one deficit per worker"),
        ("clients[0].deficits[1]", float("nan"), "clients[0].deficits[1]"),
        ("clients[0].deficits[1]", float("-inf"), "clients[0].deficits[1] must not be -inf"),
        ("clients[1].name", "a", "clients[1].name repeats"),
        ("dispatched", [1], "dispatched must list one count per worker"),
        ("dispatched[0]", -1, "dispatched[0]"),
        ("inflight[0].worker", 2, "inflight[0].worker must be a worker in 0..2"),
        ("inflight[0].client", "q", "inflight[0].client names"),
        ("inflight[1].request_id", 1, "inflight[1].request_id repeats"),
        ("tree[0].tokens[0]", 2**32, "tree[0].tokens[0] must be < 2**32"),
        ("tree[0].workers", [5], "tree[0].workers[0]"),
        ("refills", "x", "refills"),
        ("cursor", 0, "unknown field 'cursor'"),
    ],
)
def test_bad_dispatcher_state_names_the_field_and_changes_nothing(
    path: str, value: Any, words: str
) -> None:
    bad = _with(_d2lpm_state(), path, value)
    d = fairq.D2LPM(2, 5.0)
    d.dispatch("x", "z", [9])
    d.on_finish("x", 1)
    before = d.state_dict()
    with pytest.raises(ValueError) as ei:
        d.load_state_dict(bad)
    assert words in str(ei.value)
    assert d.state_dict() == before


def test_dispatcher_load_needs_nothing_in_flight() -> None:
    d = fairq.RoundRobin(2)
    d.dispatch(1, "a", [])
    with pytest.raises(ValueError, match="nothing in flight; this one has 1"):
        d.load_state_dict(fairq.RoundRobin(2).state_dict())
    assert len(d) == 1


# ---- DRR ----------------------------------------------------------------------

DRR_OPS = st.one_of(
    st.tuples(
        st.just("push"),
        st.integers(0, 4),
        st.one_of(st.integers(0, 60), st.integers(61, 3000)),
        st.integers(0, 2),
        st.sampled_from([0.0, 0.5, 3.0]),
        st.integers(0, 20),
    ),
    st.tuples(st.just("pop"), st.frozensets(st.integers(0, 4), max_size=3)),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("workers"), st.integers(1, 4)),
)


@settings(max_examples=150)
@given(
    classes=st.lists(
        st.tuples(st.integers(1, 40), st.sampled_from(["fcfs", "wspt"])), min_size=1, max_size=5
    ),
    ops=st.lists(DRR_OPS, max_size=60),
    cut=st.integers(0, 60),
)
def test_drr_restore_equals_an_uninterrupted_twin(
    classes: list[tuple[int, str]], ops: list[Any], cut: int
) -> None:
    from fairq import DRRQueue, PolicyClass

    def build() -> DRRQueue:
        return DRRQueue([PolicyClass(f"c{i}", q, o) for i, (q, o) in enumerate(classes)])

    twin, q = build(), build()
    n = len(classes)
    queued: dict[int, tuple[Any, ...]] = {}  # twin ticket -> push args, in push order
    tickets: dict[int, int] = {}  # twin ticket -> q's ticket
    for i, op in enumerate([*ops, ("end",)]):
        if i == min(cut, len(ops)):
            state = json.loads(json.dumps(q.state_dict()))
            assert state == twin.state_dict()
            q = build()
            q.load_state_dict(state)
            for t, args in queued.items():  # pushed again, in their original order
                tickets[t] = q.push(
                    *args[:3], strict_priority=args[3], priority_jump=args[4], arrival=args[5]
                )
            assert q.state_dict() == state
        if op[0] == "push":
            _, ci, cost, tier, jump, arrival = op
            args = (len(queued) + 1000 * i, f"c{ci % n}", cost, tier, jump, float(arrival))
            t = twin.push(*args[:3], strict_priority=tier, priority_jump=jump, arrival=args[5])
            tickets[t] = q.push(
                *args[:3], strict_priority=tier, priority_jump=jump, arrival=args[5]
            )
            queued[t] = args
        elif op[0] == "pop":
            blocked = frozenset(f"c{b % n}" for b in op[1])
            got = twin.pop(blocked=blocked)
            assert q.pop(blocked=blocked) == got
            if got is not None:
                t = next(t for t, a in queued.items() if a[0] == got[1])
                del queued[t]
        elif op[0] == "remove" and queued:
            t = list(queued)[op[1] % len(queued)]
            assert q.remove(tickets[t]) == twin.remove(t)
            del queued[t]
        elif op[0] == "workers":
            twin.num_workers = q.num_workers = op[1]
        assert q.stats() == twin.stats() and q.cursor == twin.cursor
    assert q.state_dict() == twin.state_dict()


def test_drr_state_checks_the_ring_and_changes_nothing() -> None:
    from fairq import DRRQueue, PolicyClass

    q = DRRQueue([PolicyClass("a", 10), PolicyClass("b", 20)])
    q.push("x", "a", 15)
    q.push("y", "a", 15)
    assert q.pop() == ("a", "x")  # a earned 20 over two visits, spent 15
    state = q.state_dict()
    assert state["cursor"] == "b" and state["classes"][0]["deficit"] == 5
    other = DRRQueue([PolicyClass("a", 10), PolicyClass("c", 20)])
    with pytest.raises(ValueError, match=r"classes\[1\].name is 'b', but class 1 of this queue"):
        other.load_state_dict(state)
    for path, value, words in [
        ("classes[0].quantum", 11, "classes[0].quantum is 11"),
        ("classes[0].deficit", -1, "classes[0].deficit must be an integer >= 0"),
        ("classes", [], "classes lists 0 classes"),
        ("cursor", "zz", "cursor names"),
        ("retained", 1, "retained must be a bool"),
        ("version", 9, "version is 9"),
    ]:
        fresh = DRRQueue([PolicyClass("a", 10), PolicyClass("b", 20)])
        before = fresh.state_dict()
        with pytest.raises(ValueError) as ei:
            fresh.load_state_dict(_with(state, path, value))
        assert words in str(ei.value)
        assert fresh.state_dict() == before
    busy = DRRQueue([PolicyClass("a", 10), PolicyClass("b", 20)])
    busy.push("y", "b", 1)
    with pytest.raises(ValueError, match="empty queue; this one holds 1"):
        busy.load_state_dict(state)


# ---- WFQ ------------------------------------------------------------------------

WFQ_OPS = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(["a", "b", 7, None]),
        st.sampled_from([0.0, 1.0, 5.0, 40.0]),
        st.sampled_from([0.5, 1.0, 3.0]),
        st.integers(0, 5),
    ),
    st.tuples(st.just("pop"), st.none(), st.none(), st.none(), st.none()),
    st.tuples(st.just("remove"), st.integers(0, 100), st.none(), st.none(), st.none()),
    st.tuples(
        st.just("partial"), st.integers(0, 100), st.sampled_from([0.0, 2.0]), st.none(), st.none()
    ),
)


class Item:
    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Item) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


@settings(max_examples=150)
@given(
    clock=st.sampled_from(["start", "finish"]),
    ops=st.lists(WFQ_OPS, max_size=60),
    cut=st.integers(0, 60),
)
def test_wfq_restore_equals_an_uninterrupted_twin(clock: str, ops: list[Any], cut: int) -> None:
    from fairq import WFQQueue

    twin = WFQQueue(virtual_clock=clock)
    q = WFQQueue(virtual_clock=clock)
    other = "finish" if clock == "start" else "start"
    queued: dict[int, tuple[Any, ...]] = {}  # n -> add args (arrival order)
    twin_items: dict[int, Item] = {}
    items: dict[int, Item] = {}
    n = 0
    for i, op in enumerate([*ops, ("end",)]):
        if i == min(cut, len(ops)):
            state = json.loads(json.dumps(q.state_dict()))
            assert state == twin.state_dict()
            q = WFQQueue(virtual_clock=other)  # the clock comes from the state
            q.load_state_dict(state)
            assert q.pending_readds == len(queued)
            items = {}
            for k, (flow, tokens, weight, arrival) in queued.items():
                items[k] = Item(k)  # the caller's objects are new after a restart
                q.add(items[k], tokens=tokens, flow=flow, weight=weight, arrival=arrival)
            assert q.pending_readds == 0
            assert q.state_dict() == state
        if op[0] == "add":
            _, flow, tokens, weight, arrival = op
            for qq, store in ((twin, twin_items), (q, items)):
                store[n] = Item(n)
                qq.add(store[n], tokens=tokens, flow=flow, weight=weight, arrival=float(arrival))
            queued[n] = (flow, tokens, weight, float(arrival))
            n += 1
        elif op[0] == "pop" and queued:
            got = twin.pop()
            assert q.pop() == got
            del queued[got.n]
        elif op[0] == "remove" and queued:
            k = list(queued)[op[1] % len(queued)]
            twin.remove(twin_items[k])
            q.remove(items[k])
            del queued[k]
        elif op[0] == "partial" and queued:
            k = list(queued)[op[1] % len(queued)]
            assert twin.update_remaining(twin_items[k], op[2]) == q.update_remaining(
                items[k], op[2]
            )
            queued[k] = (queued[k][0], op[2], *queued[k][2:])
        assert q.virtual_time == twin.virtual_time and len(q) == len(twin)
        assert [x.n for x in q.items()] == [x.n for x in twin.items()]
    assert q.state_dict() == twin.state_dict()


def test_wfq_readd_must_be_the_next_waiting_item() -> None:
    from fairq import WFQQueue

    q = WFQQueue()
    q.add("x", tokens=10, flow="a")
    q.add("y", tokens=4, flow="b", weight=2.0)
    state = q.state_dict()
    assert [w["flow"] for w in state["waiting"]] == ["a", "b"]
    r = WFQQueue()
    r.load_state_dict(state)
    with pytest.raises(ValueError, match=r"not waiting\[0\] of the loaded state"):
        r.add("y", tokens=4, flow="b", weight=2.0)
    assert len(r) == 0 and r.pending_readds == 2
    r.add("x", tokens=10, flow="a")
    r.add("y", tokens=4, flow="b", weight=2.0)
    assert r.state_dict() == state
    with pytest.raises(ValueError, match="flow .* cannot be saved"):
        w = WFQQueue()
        w.add("z", tokens=1, flow=("tuple", "key"))
        w.state_dict()


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        ("virtual_time", float("nan"), "virtual_time must be a finite"),
        ("virtual_clock", "later", "virtual_clock must be 'start' or 'finish'"),
        ("flows[0].flow", [1], "flows[0].flow must be a string or an integer"),
        ("flows[1].flow", "b", "flows[1].flow repeats"),  # flows by F_last: b, a
        ("flows[0].last_finish", float("inf"), "flows[0].last_finish"),
        ("waiting[0].weight", 0.0, "waiting[0].weight must be > 0"),
        ("waiting[0].finish", -1.0, "waiting[0].finish"),
        ("waiting[0].remaining", -1.0, "waiting[0].remaining must be >= 0"),
        ("waiting[1].flow", "zz", "waiting[1].flow names 'zz'"),
        ("waiting[0].colour", 1, "unknown field 'colour'"),
        ("version", 3, "version is 3"),
    ],
)
def test_bad_wfq_state_names_the_field_and_changes_nothing(
    path: str, value: Any, words: str
) -> None:
    from fairq import WFQQueue

    q = WFQQueue()
    q.add("x", tokens=10, flow="a")
    q.add("y", tokens=4, flow="b")
    bad = _with(q.state_dict(), path, value)
    fresh = WFQQueue(virtual_clock="finish")
    fresh.add("old", tokens=1, flow="c")
    fresh.pop()
    before = fresh.state_dict()
    with pytest.raises(ValueError) as ei:
        fresh.load_state_dict(bad)
    assert words in str(ei.value)
    assert fresh.state_dict() == before and fresh.pending_readds == 0


def test_vllm_wfq_queue_restores_through_the_same_state() -> None:
    """``fairq.vllm``'s WFQ request queue is a WFQQueue: after a restart vLLM's
    waiting requests go back in with ``add_request``, in their order."""
    from fairq.vllm.wfq import WFQRequestQueue

    from reference.vllm import Req

    def reqs() -> list[Req]:
        return [
            Req(f"r{i}", arrival_time=float(i), prompt=10 + 7 * i, client_id="ab"[i % 2])
            for i in range(6)
        ]

    twin, q = WFQRequestQueue(), WFQRequestQueue()
    for x in (twin, q):
        for r in reqs():
            x.add_request(r)
        x.pop_request()
    state = json.loads(json.dumps(q.state_dict()))
    restored = WFQRequestQueue()
    restored.load_state_dict(state)
    for r in reqs()[1:]:  # the waiting ones, oldest first (r0 was popped)
        restored.add_request(r)
    assert restored.state_dict() == twin.state_dict()
    assert [r.request_id for r in restored] == [r.request_id for r in twin]
    while twin:
        assert restored.pop_request().request_id == twin.pop_request().request_id


# ---- dual-phase ---------------------------------------------------------------

DUAL_OPS = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["think", "output"]), st.none()),
    st.tuples(st.just("event"), st.integers(0, 100), st.none()),
    st.tuples(st.just("remove"), st.integers(0, 100), st.none()),
    st.tuples(st.just("schedule"), st.integers(0, 4), st.integers(0, 6)),
)


@settings(max_examples=150)
@given(
    reservation=st.integers(0, 2),
    ops=st.lists(DUAL_OPS, max_size=60),
    cut=st.integers(0, 60),
)
def test_dualphase_restore_equals_an_uninterrupted_twin(
    reservation: int, ops: list[Any], cut: int
) -> None:
    from fairq import DualPhaseQueue

    twin = DualPhaseQueue(1.5, reservation)
    q = DualPhaseQueue(1.5, reservation)
    n = 0
    for i, op in enumerate([*ops, ("end",)]):
        if i == min(cut, len(ops)):
            state = json.loads(json.dumps(q.state_dict()))
            assert state == twin.state_dict()
            order = {p: q.ids(p) for p in ("think", "output")}
            q = DualPhaseQueue(3.0, 0)  # options come from the state
            q.load_state_dict(state)
            for phase in ("think", "output"):  # each phase in queue order
                for rid in order[phase]:
                    q.add(rid, item=("item", rid), phase=phase)
            assert q.state_dict() == state
        live = twin.ids("think") + twin.ids("output")
        if op[0] == "add":
            for x in (twin, q):
                x.add(n, item=("item", n), phase=op[1])
            n += 1
        elif op[0] == "event" and live:
            rid = live[op[1] % len(live)]
            assert twin.on_phase_event(rid) == q.on_phase_event(rid)
        elif op[0] == "remove" and live:
            rid = live[op[1] % len(live)]
            assert twin.remove(rid) == q.remove(rid)
        elif op[0] == "schedule":
            assert q.schedule_phases(op[1], op[2]) == twin.schedule_phases(op[1], op[2])
        assert q.metrics() == twin.metrics()
    assert q.state_dict() == twin.state_dict()


def test_bad_dualphase_state() -> None:
    from fairq import DualPhaseQueue

    q = DualPhaseQueue()
    q.add(1)
    q.schedule(1, 1)
    state = q.state_dict()
    for path, value, words in [
        ("think_batch_multiplier", 0.5, "think_batch_multiplier must be a finite number >= 1.0"),
        ("metrics.schedule_calls", -1, "metrics.schedule_calls"),
        ("metrics.extra", 1, "unknown field 'extra'"),
        ("think[0]", 99, "think[0] (99) is after metrics.schedule_calls"),
        ("format", "x", "format must be"),
    ]:
        fresh = DualPhaseQueue()
        with pytest.raises(ValueError) as ei:
            fresh.load_state_dict(_with(state, path, value))
        assert words in str(ei.value)
        assert fresh.state_dict() == DualPhaseQueue().state_dict()
    with pytest.raises(ValueError, match="empty queue"):
        q.load_state_dict(state)
