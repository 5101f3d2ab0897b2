"""Local schedulers: worked examples, errors, conservation, and hypothesis
model tests of FCFS/LPM/VTC/DLPM against tests/reference/sched.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq import DLPM, FCFS, LPM, VTC, RadixTree

from reference.sched import RefSched

Sched = FCFS | LPM | VTC | DLPM


def ids(adm: list[fairq.Admission]) -> list[Any]:
    return [a.request_id for a in adm]


# ------------------------------------------------------------ worked examples


def test_lpm_orders_by_longest_match_then_arrival() -> None:
    t = RadixTree()
    t.insert([1, 2, 3, 4])
    s = LPM(t)
    s.add("none", "a", [9, 9])
    s.add("two", "a", [1, 2, 7])
    s.add("four", "b", [1, 2, 3, 4, 5])
    s.add("two-b", "b", [1, 2, 8])
    adm = s.schedule(100)
    assert ids(adm) == ["four", "two", "two-b", "none"]
    assert [(a.input_len, a.cached_len, a.extend_len) for a in adm][0] == (5, 4, 1)
    assert s.num_running == 4 and len(s) == 0


def test_lpm_skips_what_does_not_fit() -> None:
    t = RadixTree()
    s = LPM(t)
    s.add(1, "a", [1] * 10)
    s.add(2, "a", [2] * 3)
    assert ids(s.schedule(5)) == [2]
    assert len(s) == 1


def test_lpm_sees_inserts_and_evictions_made_by_the_engine() -> None:
    t = RadixTree()
    s = LPM(t)
    s.add("x", "a", [5, 6, 7, 8])
    s.add("y", "a", [1, 2, 3])
    t.insert([5, 6, 7])
    s._check()
    assert ids(s.schedule(1, max_requests=1)) == ["x"]
    s.add("z", "a", [5, 6, 7, 9])
    t.evict(100)
    t.insert([1, 2])
    s._check()
    adm = s.schedule(100)
    assert ids(adm) == ["y", "z"] and adm[0].cached_len == 2 and adm[1].cached_len == 0


def test_fcfs_stops_at_first_non_fit() -> None:
    s = FCFS()
    s.add(1, "a", [1, 2, 3])
    s.add(2, "a", [1] * 10)
    s.add(3, "a", [1])
    assert ids(s.schedule(5)) == [1]
    assert ids(s.schedule(100)) == [2, 3]


def test_fcfs_reports_cached_len_with_tree() -> None:
    t = RadixTree()
    t.insert([1, 2])
    s = FCFS(t)
    s.add(1, "a", [1, 2, 3])
    (a,) = s.schedule(1)
    assert (a.cached_len, a.extend_len) == (2, 1)


def test_vtc_lift_and_min_counter() -> None:
    s = VTC()
    s.add(1, "a", [0] * 10)
    s.add(2, "a", [0] * 10)
    assert ids(s.schedule(10)) == [1]
    assert s.counter("a") == 10.0
    s.charge_output(1, 5)
    assert s.counter("a") == 20.0
    # b becomes backlogged: lifted to min over other waiting clients (a: 20)
    s.add(3, "b", [0] * 4)
    assert s.counter("b") == 20.0
    # tie at 20: first-seen client (a) goes first; then b (20 < 30)
    assert ids(s.schedule(100)) == [2, 3]
    assert s.counter("a") == 30.0 and s.counter("b") == 24.0
    # a client with nothing waiting is not lifted by itself
    s.add(4, "c", [0])
    assert s.counter("c") == 0.0


def test_vtc_stops_at_first_non_fit() -> None:
    s = VTC()
    s.add(1, "a", [0] * 10)
    s.add(2, "b", [0] * 1)
    # a (counter 0, first seen) is picked first and does not fit: stop (with
    # the oversize rule off, nothing at all)
    assert s.schedule(5, oversize_budget=0) == []
    # the rule on (the default): a's request never fits a 5-token step, so it
    # is admitted alone, charged as usual; b's goes next
    assert ids(s.schedule(5)) == [1] and s.counter("a") == 10.0
    assert ids(s.schedule(5)) == [2]


def test_vtc_weights() -> None:
    s = VTC(w_in=1.0, w_out=2.0)
    s.set_weight("a", 2.0)
    s.add(1, "a", [0] * 10)
    s.schedule(100)
    s.charge_output(1, 3)
    assert s.counter("a") == 10 / 2 + 6 / 2
    assert s.service("a") == 10 + 6


def test_dlpm_refill_and_deficit() -> None:
    t = RadixTree()
    s = DLPM(t, quantum=5)
    s.add(1, "a", [1] * 4)
    s.add(2, "a", [1] * 4)
    s.add(3, "b", [2] * 4)
    # first request (a, q=0) triggers a refill: everyone gets +5
    adm = s.schedule(100)
    # a: 5 -> 1 after r1, r2 admitted (q=1>0) -> -3; b: 5 -> 1
    assert ids(adm) == [1, 2, 3]
    assert s.deficit("a") == -3 and s.deficit("b") == 1 and s.refills == 1
    s.charge_output(3, 2)
    assert s.deficit("b") == -3
    assert s.service("b") == 4 + 4


def test_dlpm_skips_clients_without_credit() -> None:
    t = RadixTree()
    t.insert([1] * 8)
    s = DLPM(t, quantum=4)
    for i in range(3):
        s.add(f"a{i}", "a", [1] * 8 + [i] * 4)  # long match, extend 4
    s.add("b0", "b", [2] * 4)
    adm = s.schedule(100)
    # walk 1: a0 admitted (q 4 -> 0); a1, a2 skipped (b still has credit); b0
    # admitted (b: 0). Walk 2 (Algorithm 1 repeats the walk): a1 refills
    # (a 4, b 4), admitted (a: 0); a2: no waiting client has credit (b waits
    # for nothing), refill (a: 4), admitted.
    assert ids(adm) == ["a0", "b0", "a1", "a2"]
    assert len(s) == 0
    assert s.deficit("a") == 0 and s.deficit("b") == 4 and s.refills == 3


def test_dlpm_tiny_quantum_admits_like_lpm() -> None:
    """Work-conserving: with Q_u far below a request's cost, DLPM still fills
    the budget every step (refills are applied in bulk, walks repeated)."""
    t = RadixTree()
    d, lp = DLPM(t, quantum=1e-3), LPM(t)
    for s in (d, lp):
        for i in range(40):
            s.add(i, "abcd"[i % 4], [1000 + i] * 10)
    for _ in range(4):
        got = d.schedule(95)
        assert len(got) == len(lp.schedule(95)) == 9
        d._check()
    assert d.refills > 10_000  # virtual refills: ~10 / 1e-3 per refill event
    rest = len(d)
    assert len(d.schedule(10**6)) == rest == 4


def test_dlpm_credit_client_that_does_not_fit_blocks_refills_for_one_call() -> None:
    """The one non-work-conserving case, kept for Theorem 4.1: a waiting client
    with q > 0 whose requests do not fit blocks the refill others need; the
    oversize rule then admits its request alone, which ends the block."""
    t = RadixTree()
    s = DLPM(t, quantum=5)
    s.add("a0", "a", [1] * 4)
    s.add("a1", "a", [2] * 4)
    s.add("b0", "b", [3] * 50)
    assert ids(s.schedule(10)) == ["a0", "a1"]  # a: 5 -> 1 -> -3; b: 5
    s.add("a2", "a", [4] * 2)
    # a2 fits, but a has no credit and b blocks: with the rule off, nothing
    assert s.schedule(10, oversize_budget=0) == []
    assert s.refills == 1
    # on: b0 (50 > 10, it never fits) goes alone, b: 5 - 50
    assert ids(s.schedule(10)) == ["b0"] and s.deficit("b") == -45
    # nobody waiting has credit: a refill (a: 2, b: -40), then a2
    assert ids(s.schedule(10)) == ["a2"] and s.refills == 2
    assert s.deficit("a") == 0 and s.deficit("b") == -40


def test_huge_quantum_is_lpm() -> None:
    t = RadixTree()
    t.insert([1, 2, 3])
    d, lp = DLPM(t, quantum=1e18), LPM(t)
    for s in (d, lp):
        s.add(1, "a", [9])
        s.add(2, "b", [1, 2, 3, 4])
        s.add(3, "a", [1, 2, 5])
    assert ids(d.schedule(100)) == ids(lp.schedule(100)) == [2, 3, 1]


# ------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "make", [FCFS, lambda: LPM(RadixTree()), VTC, lambda: DLPM(RadixTree(), 10)]
)
def test_errors_leave_state_unchanged(make: Any) -> None:
    s = make()
    s.add("r", "a", [1, 2], item="payload")
    with pytest.raises(ValueError, match="request_id"):
        s.add("r", "b", [3])
    with pytest.raises(ValueError, match="tokens"):
        s.add("q", "a", [1, -5])
    with pytest.raises(TypeError, match="request_id"):
        s.add(1.5, "a", [1])
    with pytest.raises(TypeError, match="namespace"):
        s.add("q", "a", [1], namespace=[1])
    with pytest.raises(KeyError):
        s.remove("nope")
    with pytest.raises(KeyError):
        s.finish("r")  # waiting, not running
    with pytest.raises(KeyError):
        s.charge_output("r")
    with pytest.raises(ValueError, match="weight"):
        s.set_weight("a", 0.0)
    with pytest.raises(ValueError, match="weight"):
        s.set_weight("a", float("nan"))
    with pytest.raises(ValueError, match="token_budget"):
        s.schedule(-1)
    with pytest.raises(ValueError, match="max_requests"):
        s.schedule(10, max_requests=-1)
    assert len(s) == 1 and s.num_running == 0
    s._check()
    (a,) = s.schedule(10)
    assert a.item == "payload" and a.request_id == "r" and a.client == "a"
    with pytest.raises(KeyError):
        s.remove("r")  # running, not waiting
    with pytest.raises(ValueError, match="n_tokens"):
        s.charge_output("r", -1)
    s.finish("r")
    with pytest.raises(KeyError):
        s.finish("r")
    s._check()


@pytest.mark.parametrize(
    "make", [FCFS, lambda: LPM(RadixTree()), VTC, lambda: DLPM(RadixTree(), 10)]
)
def test_recharge_extend_errors_leave_state_unchanged(make: Any) -> None:
    s = make()
    s.add("r", "a", [1, 2, 3], item="payload")
    s.add("w", "a", [4])
    assert ids(s.schedule(3)) == ["r"]
    before = (s.service("a"), getattr(s, "deficit", s.service)("a"), s.charged_extend("r"))
    with pytest.raises(KeyError):
        s.recharge_extend("w", 0)  # waiting, not running
    with pytest.raises(KeyError):
        s.recharge_extend("nope", 0)
    with pytest.raises(KeyError):
        s.charged_extend("w")
    with pytest.raises(ValueError, match="extend_len"):
        s.recharge_extend("r", -1)
    with pytest.raises(ValueError, match="extend_len = 4"):
        s.recharge_extend("r", 4)  # input_len is 3
    with pytest.raises(TypeError, match="request_id"):
        s.recharge_extend(1.5, 1)
    assert before == (s.service("a"), getattr(s, "deficit", s.service)("a"), s.charged_extend("r"))
    assert len(s) == 1 and s.num_running == 1
    s._check()
    s.finish("r")
    with pytest.raises(KeyError):
        s.recharge_extend("r", 1)  # finished


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "vtc", "dlpm"])
def test_recharge_extend_replaces_the_admission_charge(policy: str) -> None:
    t = RadixTree()
    t.insert([1, 2, 3, 4])
    s, _ = make_pair(policy, t, quantum=100.0)
    s.set_weight("a", 2.0)
    s.add("r", "a", [1, 2, 3, 4, 5, 6])
    (a,) = s.schedule(100)
    assert (a.cached_len, a.extend_len) == (4, 2) and s.charged_extend("r") == 2
    counter = s.counter("a") if isinstance(s, VTC) else 0.0
    deficit = s.deficit("a") if isinstance(s, DLPM) else 0.0
    # the engine matched only 1 token (evicted pages): 5 extend tokens, not 2
    assert s.recharge_extend("r", 5) == 2
    assert s.charged_extend("r") == 5
    assert s.service("a") == 5.0  # w_e (w_in) = 1
    if isinstance(s, VTC):
        assert s.counter("a") == counter  # VTC charges input_len regardless
    if isinstance(s, DLPM):
        assert s.deficit("a") == deficit - 3 / 2.0  # w_e * delta / weight
    assert s.recharge_extend("r", 0) == 5  # fully cached after all
    assert s.service("a") == 0.0
    s.charge_output("r", 3)
    assert s.service("a") == 6.0
    s.finish("r")
    s._check()


def test_bad_constructor_args() -> None:
    with pytest.raises(ValueError, match="quantum"):
        DLPM(RadixTree(), quantum=0)
    with pytest.raises(ValueError, match="w_out"):
        VTC(w_out=-1)
    with pytest.raises(TypeError):
        LPM()  # type: ignore[call-arg]


def test_remove_returns_item_and_unknown_client_queries() -> None:
    s = DLPM(RadixTree(), quantum=3)
    s.add(7, "a", [1], item={"x": 1})
    assert s.remove(7) == {"x": 1}
    assert len(s) == 0
    assert s.service("ghost") == 0.0 and s.deficit("ghost") == 0.0
    assert s.clients() == ["a"]


# ------------------------------------------------------------ model tests

PREFIXES = [[1, 2, 3, 4], [1, 2, 5, 5], [7, 7, 7, 7, 7, 7], []]
CLIENTS = ["a", "b", "c"]
# schedule's oversize_budget: default (unlimited), off, or caps around the
# prompt lengths (up to 11 tokens here, budgets 0..25)
OVERSIZE_BUDGETS = st.sampled_from([None, None, 0, 3, 8, 30])

OPS = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(CLIENTS),
        st.integers(0, len(PREFIXES) - 1),
        st.lists(st.integers(0, 3), max_size=5),
        st.sampled_from([None, None, "ns"]),
    ),
    st.tuples(
        st.just("add"),
        st.sampled_from(CLIENTS),
        st.integers(0, 3),
        st.lists(st.integers(0, 3), max_size=5),
        st.none(),
    ),
    st.tuples(
        st.just("insert"),
        st.integers(0, len(PREFIXES) - 1),
        st.lists(st.integers(0, 3), max_size=5),
        st.none(),
        st.none(),
    ),
    st.tuples(st.just("evict"), st.integers(0, 8), st.none(), st.none(), st.none()),
    st.tuples(
        st.just("schedule"),
        st.integers(0, 25),
        st.sampled_from([None, 1, 2, 5]),
        OVERSIZE_BUDGETS,
        st.none(),
    ),
    st.tuples(st.just("schedule"), st.integers(0, 25), st.none(), st.none(), st.none()),
    st.tuples(
        st.just("within"),
        st.integers(0, 25),
        st.sampled_from([None, 1, 2, 5]),
        OVERSIZE_BUDGETS,
        st.none(),
    ),
    st.tuples(st.just("charge"), st.integers(0, 50), st.integers(0, 4), st.none(), st.none()),
    st.tuples(st.just("finish"), st.integers(0, 50), st.none(), st.none(), st.none()),
    st.tuples(st.just("recharge"), st.integers(0, 50), st.integers(0, 12), st.none(), st.none()),
    st.tuples(st.just("remove"), st.integers(0, 50), st.none(), st.none(), st.none()),
    st.tuples(
        st.just("weight"),
        st.sampled_from(CLIENTS),
        st.sampled_from([0.5, 1.0, 3.0]),
        st.none(),
        st.none(),
    ),
)


def make_pair(policy: str, tree: RadixTree, quantum: float) -> tuple[Sched, RefSched]:
    def match(tokens: Any, ns: Any) -> int:
        return tree.match(tokens, namespace=ns)

    if policy == "fcfs":
        return FCFS(tree), RefSched("fcfs", match)
    if policy == "lpm":
        return LPM(tree), RefSched("lpm", match)
    if policy == "lpm-sglang":  # SGLang's rule, with a threshold small traces cross
        return (
            LPM(tree, stop_at_unfit=True, fcfs_above=3),
            RefSched("lpm", match, stop_at_unfit=True, fcfs_above=3),
        )
    if policy == "lpm-fcfs":  # the fallback alone: skips what does not fit
        return LPM(tree, fcfs_above=2), RefSched("lpm", match, fcfs_above=2)
    if policy == "vtc":
        return VTC(tree, w_in=1.0, w_out=2.0), RefSched("vtc", match, w_in=1.0, w_out=2.0)
    if policy == "dlpm-auto":  # the automatic quantum, starting from `quantum`
        return (
            DLPM(tree, quantum=quantum, quantum_scale=0.5),
            RefSched("dlpm", match, quantum=quantum, quantum_scale=0.5),
        )
    if policy == "dlpm-strict":
        return (
            DLPM(tree, quantum=quantum, strict_credit=True),
            RefSched("dlpm", match, quantum=quantum, strict_credit=True),
        )
    return DLPM(tree, quantum=quantum), RefSched("dlpm", match, quantum=quantum)


def run_trace(policy: str, page: int, quantum: float, ops: list[tuple[Any, ...]]) -> None:
    tree = RadixTree(capacity=40, page_size=page)
    s, ref = make_pair(policy, tree, quantum)
    n = 0
    insert_admitted = True
    prompts: dict[Any, tuple[list[int], Any]] = {}
    added: set[Any] = set()
    done: set[Any] = set()
    for op in ops:
        kind = op[0]
        if kind == "add":
            _, client, p, suffix, ns = op
            toks = PREFIXES[p] + suffix
            rid: Any = n if n % 2 else f"r{n}"
            n += 1
            if not toks:  # an empty prompt is refused; nothing changes
                before = (s.state_dict(), len(s))
                with pytest.raises(ValueError, match="prompt is empty"):
                    s.add(rid, client, toks, item=("item", rid), namespace=ns)
                assert (s.state_dict(), len(s)) == before
                continue
            prompts[rid] = (toks, ns)
            s.add(rid, client, toks, item=("item", rid), namespace=ns)
            ref.add(rid, client, toks, ("item", rid), ns)
            added.add(rid)
        elif kind == "insert":
            tree.insert(PREFIXES[op[1]] + op[2])
        elif kind == "evict":
            tree.evict(op[1])
        elif kind in ("schedule", "within"):
            refills = ref.refills
            if kind == "schedule":
                adm = s.schedule(op[1], max_requests=op[2], oversize_budget=op[3])
                want = ref.schedule(op[1], op[2], oversize_budget=op[3])
            else:
                adm = s.schedule_within_credit(op[1], max_requests=op[2], oversize_budget=op[3])
                want = ref.schedule_within_credit(op[1], op[2], op[3])
                assert ref.refills == refills
            # within the budget, or one request alone that exceeds it
            assert sum(a.extend_len for a in adm) <= op[1] or len(adm) == 1
            got = [
                (a.request_id, a.client, a.item, a.input_len, a.cached_len, a.extend_len)
                for a in adm
            ]
            assert got == want
            for a in got:  # the engine caches admitted prompts after prefill
                assert a[0] not in done
                if insert_admitted:
                    tree.insert(prompts[a[0]][0], namespace=prompts[a[0]][1])
        elif kind in ("charge", "finish") and ref.running:
            rid = sorted(ref.running, key=str)[op[1] % len(ref.running)]
            if kind == "charge":
                s.charge_output(rid, op[2])
                ref.charge_output(rid, op[2])
            else:
                s.finish(rid)
                ref.finish(rid)
                done.add(rid)
        elif kind == "recharge" and ref.running:
            # the engine's real prefix match differs from the tree's prediction
            rid = sorted(ref.running, key=str)[op[1] % len(ref.running)]
            ext = op[2] % (ref.charged[rid][1] + 1)
            assert s.charged_extend(rid) == ref.charged[rid][0]
            assert s.recharge_extend(rid, ext) == ref.recharge_extend(rid, ext)
        elif kind == "remove" and ref.waiting:
            rid = sorted(ref.waiting, key=str)[op[1] % len(ref.waiting)]
            assert s.remove(rid) == ref.remove(rid)
            done.add(rid)
        elif kind == "weight":
            s.set_weight(op[1], op[2])
            ref.set_weight(op[1], op[2])
        assert len(s) == len(ref.waiting)
        assert s.num_running == len(ref.running)
        s._check()
    # conservation: every request is waiting, running or done, exactly once
    assert set(ref.waiting) | set(ref.running) | done == added
    assert not (set(ref.waiting) & set(ref.running))
    assert s.clients() == list(ref.clients)
    for c in ref.clients:
        assert s.service(c) == pytest.approx(ref.clients[c].service)
        if isinstance(s, VTC):
            assert s.counter(c) == pytest.approx(ref.clients[c].counter)
        if isinstance(s, DLPM):
            assert s.deficit(c) == pytest.approx(ref.clients[c].deficit)
    if isinstance(s, DLPM):
        assert s.refills == ref.refills
        assert s.quantum == ref.auto.value()


@pytest.mark.parametrize(
    "policy", ["fcfs", "lpm", "lpm-sglang", "lpm-fcfs", "vtc", "dlpm", "dlpm-auto", "dlpm-strict"]
)
@settings(max_examples=80)
@given(
    page=st.sampled_from([1, 2]),
    quantum=st.sampled_from([2.0**-4, 0.5, 3.0, 10.0, 1e9]),
    ops=st.lists(OPS, max_size=60),
)
def test_matches_reference(
    policy: str, page: int, quantum: float, ops: list[tuple[Any, ...]]
) -> None:
    run_trace(policy, page, quantum, ops)


def test_scheduler_that_fell_behind_the_change_log_rematches_everything() -> None:
    t = RadixTree()
    s = LPM(t)
    s.add("x", "a", [1, 2, 3])
    s.add("y", "a", [5, 6])
    for i in range(70_000):  # more changes than the log keeps
        t.insert([100 + i])
    t.insert([5, 6])
    t.evict(10**9)
    t.insert([1, 2])
    s._check()
    adm = s.schedule(100)
    assert [(a.request_id, a.cached_len) for a in adm] == [("x", 2), ("y", 0)]
    s._check()


def test_two_schedulers_share_one_tree() -> None:
    t = RadixTree()
    a, b = LPM(t), DLPM(t, quantum=100)
    for s in (a, b):
        s.add(1, "c", [1, 2, 3])
        s.add(2, "c", [4, 5, 6])
    t.insert([4, 5])
    assert [x.request_id for x in a.schedule(100)] == [2, 1]
    t.evict(10)
    t.insert([1, 2, 3])
    assert [x.request_id for x in b.schedule(100)] == [1, 2]
    a._check()
    b._check()


def test_numpy_integer_request_ids_are_ints() -> None:
    import numpy as np

    s = FCFS()
    s.add(np.int64(5), "a", [1])
    with pytest.raises(ValueError, match="request_id"):
        s.add(5, "a", [1])
    with pytest.raises(ValueError, match="request_id"):
        s.add(2**70, "a", [1])
    with pytest.raises(TypeError, match="request_id"):
        s.add(True, "a", [1])
    (a,) = s.schedule(10)
    assert a.request_id == 5 and type(a.request_id) is int
