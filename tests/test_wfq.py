"""fairq.WFQQueue: worked examples, fairness on random traces, errors, and a
hypothesis state machine against the pure-Python reference (tests/reference/wfq.py)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fairq import WFQQueue

from reference.wfq import RefWFQ


class Item:
    """A weak-referenceable item with no __eq__/__hash__ (identity only)."""

    def __init__(self, name: object) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Item({self.name!r})"


def drain(q: WFQQueue) -> list[object]:
    out = []
    while q:
        out.append(q.pop())
    return out


def test_worked_example_per_flow_chaining() -> None:
    q = WFQQueue()
    a = [Item(f"a{i}") for i in range(3)]
    b = Item("b")
    for x in a:
        q.add(x, tokens=10, flow="A")
    q.add(b, tokens=10, flow="B", arrival=1.0)
    assert [q.times(x) for x in a] == [(0.0, 10.0), (10.0, 20.0), (20.0, 30.0)]
    assert q.times(b) == (0.0, 10.0)
    assert list(q) == [a[0], b, a[1], a[2]]  # iteration does not consume
    assert len(q) == 4
    assert drain(q) == [a[0], b, a[1], a[2]]
    assert q.virtual_time == 20.0


def test_empty_pop_and_peek_raise_index_error() -> None:
    q = WFQQueue()
    with pytest.raises(IndexError):
        q.pop()
    with pytest.raises(IndexError):
        q.peek()
    assert not q and len(q) == 0


def test_equal_weights_single_flow_is_fcfs_for_any_sizes() -> None:
    rng = random.Random(1)
    q = WFQQueue()
    items = [Item(i) for i in range(200)]
    for i, x in enumerate(items):
        q.add(x, tokens=rng.randint(0, 500), flow="only", arrival=float(i))
    assert drain(q) == items


@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.integers(0, 100))
@settings(max_examples=60)
def test_equal_weights_equal_sizes_fcfs_within_flows(flows: list[int], size: int) -> None:
    # Each request is its own flow or shares one of a few clients; equal
    # weights and equal sizes: WFQ serves in arrival order.
    q = WFQQueue()
    items = [Item(i) for i in range(len(flows))]
    for i, (x, f) in enumerate(zip(items, flows, strict=True)):
        q.add(x, tokens=size, flow=None if f == 0 else f, arrival=float(i))
    # Within one client the order is FCFS; across clients interleaved by F.
    popped = drain(q)
    by_flow: dict[int, list[int]] = {}
    for x in popped:
        by_flow.setdefault(flows[x.name], []).append(x.name)
    for f, names in by_flow.items():
        if f != 0:
            assert names == sorted(names)
    if len(set(flows)) == 1 and flows[0] == 0:
        assert [x.name for x in popped] == list(range(len(flows)))


CLOCKS = ("start", "finish")
FLOWS_L: list[object] = [None, None, "a", "b"]


@pytest.mark.parametrize("clock", CLOCKS)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=30)
def test_weight_two_gets_twice_the_tokens_while_backlogged(clock: str, seed: int) -> None:
    # Flow "light" (weight 1) queues 5x more requests than flow "heavy"
    # (weight 2); sizes random. While both are backlogged, heavy's share is
    # 2x light's within the WFQ bound of one maximum request per flow.
    rng = random.Random(seed)
    lmax = 64
    q = WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    trace = [("light", 1.0)] * 500 + [("heavy", 2.0)] * 100
    rng.shuffle(trace)
    left = {"light": 0, "heavy": 0}
    for i, (flow, w) in enumerate(trace):
        tokens = rng.randint(1, lmax)
        q.add((flow, tokens, Item(i)), tokens=tokens, flow=flow, weight=w, arrival=float(i))
        left[flow] += 1
    served = {"light": 0, "heavy": 0}
    while left["light"] and left["heavy"]:
        flow, tokens, _ = q.pop()
        served[flow] += tokens
        left[flow] -= 1
    # Normalized service differs by at most one max-size request per flow.
    assert abs(served["heavy"] / 2.0 - served["light"] / 1.0) <= lmax / 1.0 + lmax / 2.0
    assert served["heavy"] > 0 and served["light"] > 0


def test_seed_per_request_formula_misses_the_share_per_flow_fixes_it() -> None:
    # Why ALGORITHMS.md section 3 chains F per flow: with the seed's formula
    # (every request starts at max(V, arrival), no F_last) service is not
    # proportional to weight: here the weight-2 client takes everything and
    # the weight-1 client nothing while both are backlogged.
    def seed_share() -> float:
        import heapq

        heap: list[tuple[float, int, str]] = []
        v, seq = 0.0, 0
        for flow, w, n in (("light", 1.0, 400), ("heavy", 2.0, 100)):
            for _ in range(n):
                s = max(v, 0.0)
                heapq.heappush(heap, (s + 10 / w, seq, flow))
                seq += 1
        served = {"light": 0, "heavy": 0}
        for _ in range(60):
            served[heapq.heappop(heap)[2]] += 10
        return served["light"] / 600

    assert seed_share() == 0.0  # weight-1 share should be 1/3
    q = WFQQueue()
    for flow, w, n in (("light", 1.0, 400), ("heavy", 2.0, 100)):
        for i in range(n):
            q.add((flow, i), tokens=10, flow=flow, weight=w)
    served = {"light": 0, "heavy": 0}
    for _ in range(60):
        served[q.pop()[0]] += 10
    assert served["heavy"] == 2 * served["light"]


def test_one_request_flows_are_ordered_by_normalized_size() -> None:
    # Contract consequence (ALGORITHMS.md section 3): a request that is its
    # own flow starts at V, and V only advances to popped start tags, so
    # such requests are served by tokens / weight (shortest first). Fairness
    # across clients needs a flow key.
    q = WFQQueue()
    for name, tokens in (("long", 900), ("short", 10), ("mid", 100)):
        q.add(name, tokens=tokens)
    assert drain(q) == ["short", "mid", "long"]
    assert q.virtual_time == 0.0


@pytest.mark.parametrize("clock", CLOCKS)
def test_weight_ratio_with_continuous_arrivals(clock: str) -> None:
    # Arrivals keep both flows backlogged while pops interleave with adds.
    rng = random.Random(7)
    q = WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    served = {"a": 0, "b": 0}
    n = 0

    def add(flow: str, w: float) -> None:
        nonlocal n
        t = rng.randint(1, 32)
        q.add((flow, t), tokens=t, flow=flow, weight=w, arrival=float(n))
        n += 1

    for _ in range(50):
        add("a", 1.0)
        add("b", 3.0)
    for _ in range(3000):
        for _ in range(rng.randint(0, 3)):
            add("a", 1.0)  # "a" floods the queue
        add("b", 3.0)
        flow, t = q.pop()
        served[flow] += t
    assert 2.8 < served["b"] / served["a"] < 3.2


@pytest.mark.parametrize("clock", CLOCKS)
def test_virtual_time_monotonic_on_random_ops(clock: str) -> None:
    rng = random.Random(3)
    q = WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    items: list[Item] = []
    v = q.virtual_time
    for i in range(3000):
        r = rng.random()
        if r < 0.5:
            x = Item(i)
            items.append(x)
            q.add(
                x,
                tokens=rng.randint(0, 100),
                flow=rng.choice([None, 1, 2, 3]),
                weight=rng.choice([0.5, 1.0, 4.0]),
            )
        elif r < 0.8 and q:
            x = q.peek()
            start, finish = q.times(x)
            assert q.pop() is x
            assert q.virtual_time == max(v, start if clock == "start" else finish)
        elif items:
            q.discard(rng.choice(items))
        assert q.virtual_time >= v
        v = q.virtual_time


def test_preemption_preserves_virtual_times_and_place() -> None:
    q = WFQQueue()
    xs = [Item(i) for i in range(6)]
    for i, x in enumerate(xs):
        q.add(x, tokens=10 * (i + 1), flow=i % 2, weight=1.0 + i % 2, arrival=float(i))
    before = {x.name: q.tags(x) for x in xs}
    order = list(q)
    first = q.pop()
    v = q.virtual_time
    q.add(Item("late"), tokens=1, flow=0)  # the flow moves on meanwhile
    assert q.remembers(first)
    q.prepend(first)
    assert q.tags(first) == before[first.name]
    assert q.virtual_time == v
    assert q.peek() is first
    assert [x for x in q if isinstance(x.name, int)] == order


def test_prepend_unknown_item_needs_tokens() -> None:
    q = WFQQueue()
    with pytest.raises(KeyError):
        q.prepend(Item("x"))
    q.prepend(5, tokens=3)  # ints are not weak-referenceable: fresh add
    assert q.pop() == 5
    assert not q.remembers(5)
    assert len(q) == 0


def test_update_remaining_rekeys_and_validates() -> None:
    q = WFQQueue()
    a, b = Item("a"), Item("b")
    q.add(a, tokens=100, flow="x")
    q.add(b, tokens=50, flow="y")
    assert q.peek() is b
    assert q.update_remaining(a, 10) == 10.0
    assert q.peek() is a
    assert q.flow_last_finish("x") == 100.0  # F_last is not rewound
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="remaining"):
            q.update_remaining(a, bad)
    assert q.times(a) == (0.0, 10.0)
    with pytest.raises(KeyError):
        q.update_remaining(Item("z"), 1)


def test_remove_is_by_identity_and_does_not_rewind() -> None:
    q = WFQQueue()
    a, b = Item("a"), Item("b")
    q.add(a, tokens=10, flow="c")
    q.add(b, tokens=10, flow="c")
    q.remove(b)
    with pytest.raises(ValueError):
        q.remove(b)
    assert not q.discard(b)
    assert q.flow_last_finish("c") == 20.0
    c = Item("c")
    q.add(c, tokens=10, flow="c")
    assert q.times(c) == (20.0, 30.0)
    assert b not in q and a in q


def test_duplicates_are_separate_entries() -> None:
    q = WFQQueue()
    a = Item("a")
    q.add(a, tokens=10)
    q.add(a, tokens=1)
    assert len(q) == 2
    assert q.times(a) == (0.0, 1.0)  # the first in queue order
    q.remove(a)
    assert q.times(a) == (0.0, 10.0)
    assert q.pop() is a and not q


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"weight": 0.0}, "weight"),
        ({"weight": -1.0}, "weight"),
        ({"weight": math.nan}, "weight"),
        ({"weight": math.inf}, "weight"),
        ({"weight": -math.inf}, "weight"),
        ({"tokens": -1}, "tokens"),
        ({"tokens": math.nan}, "tokens"),
        ({"tokens": math.inf}, "tokens"),
        ({"arrival": math.nan}, "arrival"),
        ({"tokens": 1e308, "weight": 1e-300}, "virtual finish"),
    ],
)
def test_bad_input_rejected_queue_unchanged(kwargs: dict[str, float], field: str) -> None:
    q = WFQQueue()
    a = Item("a")
    q.add(a, tokens=10, flow="f")
    q.pop()
    b = Item("b")
    q.add(b, tokens=5, flow="f")
    snapshot = (list(q), q.virtual_time, q.flow_last_finish("f"), q.flow_count, q.times(b))
    args: dict[str, float] = {"tokens": 1.0}
    args.update(kwargs)
    for flow in ("f", "new-flow", None):
        with pytest.raises(ValueError, match=field):
            q.add(Item("bad"), flow=flow, **args)  # type: ignore[arg-type]
        assert (list(q), q.virtual_time, q.flow_last_finish("f"), q.flow_count, q.times(b)) == (
            snapshot
        )
    assert q.flow_last_finish("new-flow") is None
    assert q.remembers(a)


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)], ids=["True", "False", "np.bool_"])
def test_bool_weight_and_tokens_are_refused(flag: object) -> None:
    """``weight=True`` is a mistake, not a weight of 1 (issue 20, item 5): every
    entry point that takes a weight refuses a bool, naming the field."""
    q = WFQQueue()
    for field in ("weight", "tokens", "arrival"):
        args: dict[str, object] = {"tokens": 1.0, field: flag}
        with pytest.raises(TypeError, match=f"{field} must be a number, got bool"):
            q.add(Item("x"), **args)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="weight must be a number, got bool"):
        q.check_adds([(None, 1.0, flag, 0.0)])
    with pytest.raises(TypeError, match="weight must be a number, got bool"):
        q.refund_flow("f", 1.0, flag)  # type: ignore[arg-type]
    assert len(q) == 0 and q.flow_count == 0


def test_unhashable_flow_is_type_error_and_unchanged() -> None:
    q = WFQQueue()
    with pytest.raises(TypeError):
        q.add(Item("x"), tokens=1, flow=[1, 2])
    assert len(q) == 0 and q.flow_count == 0


def test_popped_items_are_not_kept_alive() -> None:
    import gc
    import weakref

    q = WFQQueue()
    x = Item("x")
    r = weakref.ref(x)
    q.add(x, tokens=1)
    q.pop()
    del x
    gc.collect()
    assert r() is None


@pytest.mark.parametrize("clock", CLOCKS)
def test_one_shot_flows_are_garbage_collected(clock: str) -> None:
    q = WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    # Advance V past every earlier flow's F_last, repeatedly.
    for i in range(20_000):
        q.add(Item(i), tokens=1, flow=("client", i))
        q.add(Item(-i), tokens=1, flow="pace")
        q.add(Item(-i), tokens=1, flow="pace")
        while q:
            q.pop()
    assert q.flow_count < 5000
    # A dropped flow restarts at V, exactly like one never seen.
    x = Item("again")
    q.add(x, tokens=4, flow=("client", 5))
    assert q.times(x) == (q.virtual_time, q.virtual_time + 4)


# --------------------------------------------------------------------------
# virtual_clock: "start" (ALGORITHMS.md section 3) vs "finish" (self-clocked).


def test_virtual_clock_option_and_errors() -> None:
    assert WFQQueue().virtual_clock == "start"
    assert WFQQueue(virtual_clock="start").virtual_clock == "start"
    q = WFQQueue(virtual_clock="finish")
    assert q.virtual_clock == "finish"
    assert "virtual_clock='finish'" in repr(q) or 'virtual_clock="finish"' in repr(q)
    for bad in ("", "Start", "finish ", "scfq"):
        with pytest.raises(ValueError, match="virtual_clock") as e:
            WFQQueue(virtual_clock=bad)  # type: ignore[arg-type]
        assert repr(bad).strip("'") in str(e.value)
    assert WFQQueue(virtual_clock=None).virtual_clock == "start"  # type: ignore[arg-type]
    for bad_type in (1, 1.5, b"start"):
        with pytest.raises(TypeError, match="virtual_clock"):
            WFQQueue(virtual_clock=bad_type)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        WFQQueue("finish")  # type: ignore[call-arg]  # keyword-only


def test_finish_clock_worked_example() -> None:
    # Same adds as the section 3 worked example; pops advance V to F.
    q = WFQQueue(virtual_clock="finish")
    a = [Item(f"a{i}") for i in range(3)]
    b = Item("b")
    for x in a:
        q.add(x, tokens=10, flow="A")
    q.add(b, tokens=10, flow="B", arrival=1.0)
    assert q.pop() is a[0] and q.virtual_time == 10.0
    c = Item("c")  # its own flow: starts at V = 10 (under "start": 0)
    q.add(c, tokens=5, arrival=2.0)
    assert q.times(c) == (10.0, 15.0)
    q.prepend(a[0])  # preempted: old tags (F = 10 <= V), first again
    assert q.times(a[0]) == (0.0, 10.0) and q.virtual_time == 10.0
    assert drain(q) == [a[0], b, c, a[1], a[2]]
    assert q.virtual_time == 30.0


def long_vs_short_stream(clock: str, long_tokens: int, shorts: list[int], pops: int) -> int | None:
    """A long request that is its own flow, then before each pop one short
    request that is its own flow (sizes cycling through ``shorts``). Returns
    the pop (1-based) that returned the long request, or None."""
    q = WFQQueue(virtual_clock=clock)  # type: ignore[arg-type]
    long = Item("long")
    q.add(long, tokens=long_tokens)
    for i in range(pops):
        q.add(Item(i), tokens=shorts[i % len(shorts)], arrival=float(i + 1))
        if q.pop() is long:
            return i + 1
    assert long in q
    return None


def test_start_clock_hazard_long_request_starves() -> None:
    # The documented hazard of ALGORITHMS.md section 3: every request its
    # own flow (the vLLM drop-in default without client_id), a steady
    # stream of short ones: V never passes 0 and the long one never runs.
    q = WFQQueue()
    long = Item("long")
    q.add(long, tokens=1000)
    for i in range(10_000):
        q.add(Item(i), tokens=10)
        assert q.pop() is not long
    assert long in q and q.virtual_time == 0.0
    assert long_vs_short_stream("start", 1000, [10], 10_000) is None


def test_finish_clock_long_request_served_within_bound() -> None:
    # Each served short moves V to its finish tag (+10), so the long one
    # (F = 1000) comes out within ceil(1000 / 10) + 1 pops.
    n = long_vs_short_stream("finish", 1000, [10], 10_000)
    assert n is not None and n <= 101


@given(
    long_tokens=st.integers(0, 3000),
    shorts=st.lists(st.integers(1, 40), min_size=1, max_size=20),
)
@settings(max_examples=60)
def test_finish_clock_wait_bound_property(long_tokens: int, shorts: list[int]) -> None:
    bound = math.ceil(long_tokens / min(shorts)) + 1
    n = long_vs_short_stream("finish", long_tokens, shorts, bound + 5)
    assert n is not None and n <= bound


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "pop"]), st.integers(0, 50), st.sampled_from(FLOWS_L)),
        max_size=80,
    )
)
@settings(max_examples=80)
def test_finish_clock_later_arrivals_never_overtake_once_v_reached(
    ops: list[tuple[str, int, object]],
) -> None:
    # Under "finish": a request added while V >= F of a queued request x
    # (with positive size) is popped after x.
    q = WFQQueue(virtual_clock="finish")
    queued: list[Item] = []
    must_follow: dict[int, set[int]] = {}  # id(later) -> ids it must follow
    popped: set[int] = set()
    for i, (op, tokens, flow) in enumerate(ops):
        if op == "add":
            x = Item(i)
            v = q.virtual_time
            ahead = {id(y) for y in queued if q.times(y)[1] <= v}
            q.add(x, tokens=tokens + 1, flow=flow)
            queued.append(x)
            must_follow[id(x)] = ahead
        elif q:
            x = q.pop()
            queued.remove(x)
            assert must_follow[id(x)] <= popped
            popped.add(id(x))


# --------------------------------------------------------------------------
# Model test against the pure-Python reference (both virtual clocks).

FLOWS = st.sampled_from([None, "a", "b", "c", 7])
WEIGHTS = st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0])


class WFQMachine(RuleBasedStateMachine):
    """Random add/pop/remove/prepend/update sequences, compared step by step."""

    CLOCK = "start"

    @initialize()
    def setup(self) -> None:
        self.q = WFQQueue(virtual_clock=self.CLOCK)  # type: ignore[arg-type]
        self.ref = RefWFQ(virtual_clock=self.CLOCK)
        self.items: list[Item] = []
        self.popped: list[Item] = []
        self.v = 0.0

    @rule(flow=FLOWS, tokens=st.integers(0, 60), weight=WEIGHTS, arrival=st.integers(0, 5))
    def add(self, flow: object, tokens: int, weight: float, arrival: int) -> None:
        x = Item(len(self.items))
        self.items.append(x)
        self.q.add(x, tokens=tokens, flow=flow, weight=weight, arrival=float(arrival))
        self.ref.add(x, tokens, flow, weight, float(arrival))

    @rule()
    def pop(self) -> None:
        if not self.ref:
            with pytest.raises(IndexError):
                self.q.pop()
            return
        assert self.q.peek() is self.ref.peek()
        x = self.q.pop()
        assert x is self.ref.pop()
        self.popped.append(x)

    @precondition(lambda self: bool(self.items))
    @rule(i=st.integers(0, 10**6))
    def remove(self, i: int) -> None:
        x = self.items[i % len(self.items)]
        assert self.q.discard(x) == self.ref.discard(x)

    @precondition(lambda self: bool(self.popped))
    @rule(i=st.integers(0, 10**6))
    def preempt(self, i: int) -> None:
        x = self.popped.pop(i % len(self.popped))
        if id(x) in self.ref.departed and self.ref.departed[id(x)][0] is x:
            assert self.q.remembers(x)
            self.q.prepend(x)
            self.ref.prepend(x)

    @precondition(lambda self: len(self.ref) > 0)
    @rule(i=st.integers(0, 10**6), remaining=st.integers(0, 60))
    def update_remaining(self, i: int, remaining: int) -> None:
        x = self.ref.order()[i % len(self.ref)]
        assert self.q.update_remaining(x, remaining) == self.ref.update_remaining(x, remaining)

    @invariant()
    def same_state(self) -> None:
        assert len(self.q) == len(self.ref)
        assert self.q.virtual_time == self.ref.V
        assert self.q.virtual_time >= self.v
        self.v = self.q.virtual_time
        order = list(self.q)
        assert all(a is b for a, b in zip(order, self.ref.order(), strict=True))
        for x in order[:3]:
            t, r = self.q.tags(x), self.ref.tags(x)
            assert (t["start"], t["finish"], t["seq"], t["flow"]) == (
                r.start,
                r.finish,
                r.seq,
                r.flow,
            )


class WFQFinishMachine(WFQMachine):
    CLOCK = "finish"


WFQMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40)
WFQFinishMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40)
TestWFQModel = WFQMachine.TestCase
TestWFQModelFinishClock = WFQFinishMachine.TestCase
