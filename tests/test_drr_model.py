"""DRRQueue against the round-by-round reference model (tests/reference/drr.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fairq import DRRQueue, PolicyClass

from reference.drr import RefDRR

classes_st = st.lists(
    st.tuples(st.integers(1, 40), st.sampled_from(["fcfs", "wspt"])),
    min_size=1,
    max_size=5,
)

cost_st = st.one_of(st.integers(0, 60), st.integers(61, 3000))

op_st = st.one_of(
    st.tuples(
        st.just("push"),
        st.integers(0, 4),  # class (mod C)
        cost_st,
        st.integers(0, 2),  # strict priority tier
        st.sampled_from([0.0, 0.5, 3.0]),  # priority_jump
        st.integers(0, 20),  # arrival
    ),
    st.tuples(st.just("pop"), st.frozensets(st.integers(0, 4), max_size=3)),
    st.tuples(st.just("popf"), st.integers(0, 7)),  # predicate on item parity / class
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("raise"), st.integers(0, 4), st.integers(0, 7)),
)


class Boom(Exception):
    pass


def _check_same(q: DRRQueue, ref: RefDRR) -> None:
    assert len(q) == len(ref)
    for c in ref.classes:
        assert q.deficit(c.name) == c.deficit, c.name
        assert q.depth(c.name) == len(c.entries)
    assert q.cursor == ref.classes[ref.cursor].name


@settings(max_examples=150)
@given(classes=classes_st, ops=st.lists(op_st, max_size=60))
def test_matches_reference(classes: list[tuple[int, str]], ops: list[tuple[Any, ...]]) -> None:
    spec = [(f"c{i}", qn, o) for i, (qn, o) in enumerate(classes)]
    q = DRRQueue([PolicyClass(n, qn, o) for n, qn, o in spec])
    ref = RefDRR(spec)
    n = len(spec)
    live: list[int] = []
    item = 0
    popped = 0
    pushed = 0
    for op in ops:
        if op[0] == "push":
            _, ci, cost, tier, jump, arrival = op
            name = f"c{ci % n}"
            t1 = q.push(
                item, name, cost, strict_priority=tier, priority_jump=jump, arrival=float(arrival)
            )
            t2 = ref.push(name, item, cost, tier, jump, float(arrival))
            assert t1 == t2
            live.append(t1)
            item += 1
            pushed += 1
        elif op[0] == "pop":
            blocked = frozenset(f"c{b % n}" for b in op[1])
            got = q.pop(blocked=blocked)
            want = ref.pop(blocked=blocked)
            assert got == want
            popped += got is not None
        elif op[0] == "popf":
            mod = op[1]
            calls: list[str] = []

            def pred(name: str, it: int, mod: int = mod, calls: list[str] = calls) -> bool:
                calls.append(name)
                return (it + int(name[1:])) % 3 != mod % 3

            got = q.pop(dispatchable=pred)
            assert len(calls) == len(set(calls)), "predicate called twice for a class"
            want = ref.pop(
                dispatchable=lambda name, it, mod=mod: (it + int(name[1:])) % 3 != mod % 3
            )
            assert got == want
            popped += got is not None
        elif op[0] == "raise":
            # the predicate raises on its k-th call: the queue must be untouched
            k, mod = op[1], op[2]
            ncalls = [0]

            def bad(name: str, it: int, k: int = k, mod: int = mod, n_: list[int] = ncalls) -> bool:
                n_[0] += 1
                if n_[0] > k:
                    raise Boom
                return (it + int(name[1:])) % 3 != mod % 3

            try:
                got = q.pop(dispatchable=bad)
            except Boom:
                pass
            else:
                # fewer than k+1 calls were needed: an ordinary pop
                want = ref.pop(
                    dispatchable=lambda name, it, mod=mod: (it + int(name[1:])) % 3 != mod % 3
                )
                assert got == want
                popped += got is not None
        else:
            if not live:
                continue
            t = live[op[1] % len(live)]
            if t in ref.tickets:
                assert q.remove(t) == ref.remove(t)
                popped += 1
        _check_same(q, ref)
    # conservation: drain everything, nothing lost or duplicated
    rest = []
    while (x := q.pop()) is not None:
        assert x == ref.pop()
        rest.append(x[1])
    assert ref.pop() is None
    assert popped + len(rest) == pushed
    assert len(set(rest)) == len(rest)


@settings(max_examples=40)
@given(
    quanta=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    costs=st.lists(st.integers(1, 20_000), min_size=1, max_size=10),
)
def test_huge_costs_match_reference(quanta: list[int], costs: list[int]) -> None:
    """Large cost/quantum ratios: the O(C) bulk credit equals round-by-round.

    The reference loops once per virtual round, so keep ratios small here (test_drr.py covers 10^9).
    """
    spec = [(f"c{i}", qn, "fcfs") for i, qn in enumerate(quanta)]
    q = DRRQueue([PolicyClass(n, qn, o) for n, qn, o in spec])
    ref = RefDRR(spec)
    for k, cost in enumerate(costs):
        name = f"c{k % len(spec)}"
        q.push(k, name, cost, arrival=float(k))
        ref.push(name, k, cost, arrival=float(k))
    while (x := q.pop()) is not None:
        assert x == ref.pop()
        _check_same(q, ref)
    assert len(ref) == 0


@settings(max_examples=50)
@given(
    quanta=st.lists(st.integers(1, 50), min_size=1, max_size=5),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("push"), st.integers(0, 4), st.integers(0, 2000)),
            st.tuples(st.just("pop"), st.frozensets(st.integers(0, 4), max_size=2)),
        ),
        max_size=60,
    ),
)
def test_benchmark_baseline_is_the_same_algorithm(
    quanta: list[int], ops: list[tuple[Any, ...]]
) -> None:
    """The pure-Python baseline of `fairq bench --suite drr` dispatches exactly
    like DRRQueue, so the benchmark ratio compares like with like."""
    from fairq.benchmarks.drr import PyDRR

    n = len(quanta)
    q = DRRQueue([PolicyClass(f"c{i}", qn) for i, qn in enumerate(quanta)])
    b = PyDRR(quanta)
    for k, op in enumerate(ops):
        if op[0] == "push":
            name = f"c{op[1] % n}"
            q.push(k, name, op[2], arrival=float(k))
            b.push(k, name, op[2], arrival=float(k))
        else:
            blocked = frozenset(f"c{i % n}" for i in op[1])
            assert q.pop(blocked=blocked) == b.pop(blocked)
    assert [q.deficit(f"c{i}") for i in range(n)] == b.deficit


@settings(max_examples=150)
@given(
    quanta=st.lists(st.integers(1, 30), min_size=2, max_size=5),
    pushes=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 200)), min_size=2, max_size=25),
    warm_pops=st.integers(0, 6),
    k=st.integers(0, 5),
    mask=st.integers(0, 31),
)
def test_raising_predicate_leaves_state_identical(
    quanta: list[int], pushes: list[tuple[int, int]], warm_pops: int, k: int, mask: int
) -> None:
    n = len(quanta)
    spec = [(f"c{i}", qn, "fcfs") for i, qn in enumerate(quanta)]
    q = DRRQueue([PolicyClass(a, b, c) for a, b, c in spec])
    ref = RefDRR(spec)
    for t, (ci, cost) in enumerate(pushes):
        q.push(t, f"c{ci % n}", cost, arrival=float(t))
        ref.push(f"c{ci % n}", t, cost, arrival=float(t))
    for _ in range(warm_pops):
        assert q.pop() == ref.pop()
    calls = [0]

    def bad(name: str, it: int) -> bool:
        calls[0] += 1
        if calls[0] > k:
            raise Boom
        return bool(mask >> int(name[1:]) & 1)

    try:
        got = q.pop(dispatchable=bad)
    except Boom:
        _check_same(q, ref)
    else:
        assert got == ref.pop(dispatchable=lambda name, it: bool(mask >> int(name[1:]) & 1))
    _check_same(q, ref)
    while (x := q.pop()) is not None:
        assert x == ref.pop()
        _check_same(q, ref)
    assert len(ref) == 0
