"""DRRQueue against the round-by-round reference model (tests/reference/drr.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fairq import DRRQueue, PolicyClass

from reference.drr import RefClassifier, RefDRR

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


# --- a Dynamo profile: classification, per-worker limits, load blocking ---

RULES = [
    {},
    {"prefill_busy_threshold": 50},
    {"prefill_busy_threshold_frac": 1.5},
    {"prefill_busy_threshold": 80, "prefill_busy_threshold_frac": 0.5},
    {"prefill_busy_threshold": 50, "busy_worker_ratio": 0.5},
    {"prefill_busy_threshold_frac": 1.0, "busy_worker_ratio": 0.34},
]
LIMIT_KINDS = [
    "request_queue_limit_per_worker",
    "raw_isl_token_queue_limit_per_worker",
    "cached_token_queue_limit_per_worker",
]


@st.composite
def dynamo_profiles(draw: st.DrawFn) -> tuple[dict[str, Any], RefDRR, RefClassifier]:
    fams = ["f0", "f1"][: draw(st.integers(1, 2))]
    nb = draw(st.integers(1, 3))
    floors = [0]
    for _ in range(nb - 1):
        floors.append(floors[-1] + draw(st.integers(1, 40)))
    buckets = [(f"b{k}", fl) for k, fl in enumerate(floors)]
    raw_classes: list[dict[str, Any]] = []
    for fam in fams:
        for b, _ in buckets:
            raw_classes.append({"name": f"{fam}-{b}", "policy_family": fam, "cache_bucket": b})
    if draw(st.booleans()):
        raw_classes.append({"name": "x"})
    order = draw(st.permutations(range(len(raw_classes))))
    classes = [raw_classes[i] for i in order]
    for c in classes:
        c["quantum"] = draw(st.integers(1, 60))
        c["queue_policy"] = draw(st.sampled_from(["fcfs", "wspt"]))
        c.update(draw(st.sampled_from(RULES)))
        for kind in LIMIT_KINDS:
            if draw(st.integers(0, 3)) == 0:
                c[kind] = draw(st.integers(0, 120 if "token" in kind else 3))
    cfg = {
        "default_policy_family": draw(st.sampled_from(fams)),
        "uncached_isl_buckets": [{"min_tokens": fl, "bucket": b} for b, fl in buckets],
        "policy_classes": classes,
    }
    ref = RefDRR([(c["name"], c["quantum"], c["queue_policy"]) for c in classes])
    for rc, c in zip(ref.classes, classes, strict=True):
        rc.threshold = c.get("prefill_busy_threshold")
        rc.frac = c.get("prefill_busy_threshold_frac")
        rc.ratio = c.get("busy_worker_ratio")
        rc.limits = {k: c[k] for k in LIMIT_KINDS if k in c}
    clf = RefClassifier(
        cfg["default_policy_family"],  # type: ignore[arg-type]
        buckets,
        [(c["name"], c.get("policy_family"), c.get("cache_bucket")) for c in classes],
    )
    return cfg, ref, clf


dyn_op = st.one_of(
    st.tuples(
        st.just("push"),
        st.sampled_from([None, "f0", "f1", "x", "", "nope", "f0-b0"]),
        st.integers(0, 100),  # raw
        st.integers(0, 100),  # cached (clamped to raw)
    ),
    st.tuples(
        st.just("pop"),
        st.lists(st.integers(0, 120), max_size=4),  # active prefill tokens per worker
        st.one_of(st.integers(1, 100), st.lists(st.integers(1, 100), min_size=4, max_size=4)),
    ),
    st.tuples(
        st.just("edge"),  # uncached tokens at a bucket floor, or one below / above
        st.sampled_from([None, "f0", "f1"]),
        st.integers(0, 2),  # bucket
        st.integers(-1, 1),
    ),
    st.tuples(st.just("plain_pop")),
    st.tuples(st.just("workers"), st.integers(0, 3)),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
)


@settings(max_examples=200)
@given(profile=dynamo_profiles(), ops=st.lists(dyn_op, max_size=50))
def test_dynamo_profile_matches_reference(
    profile: tuple[dict[str, Any], RefDRR, RefClassifier], ops: list[tuple[Any, ...]]
) -> None:
    from fairq import QueueFull

    cfg, ref, clf = profile
    q = DRRQueue.from_config(cfg)
    assert q.schema == "dynamo"
    live: list[int] = []
    pushed = popped = 0
    floors = [b["min_tokens"] for b in cfg["uncached_isl_buckets"]]
    for k, op in enumerate(ops):
        if op[0] == "edge":
            _, fam, b, delta = op
            op = ("push", fam, max(0, floors[b % len(floors)] + delta), 0)
        if op[0] == "push":
            _, fam, raw, cached = op
            cached = min(cached, raw)
            name = clf.classify(fam, raw - cached)
            assert q.classify(fam, raw - cached) == name
            kind = ref.full(name)
            if kind is not None:
                before = (len(q), q.stats())
                try:
                    q.push_request(k, fam, raw, cached, arrival=float(k))
                except QueueFull as e:
                    assert (e.class_name, e.limit) == (name, kind)
                else:
                    raise AssertionError(f"{name} accepted past {kind}")
                assert (len(q), q.stats()) == before
                continue
            t = q.push_request(k, fam, raw, cached, arrival=float(k))
            assert t == ref.push(name, k, raw - cached, arrival=float(k), raw=raw, cached=cached)
            live.append(t)
            pushed += 1
        elif op[0] == "pop":
            _, tokens, mx = op
            maxes = mx[: len(tokens)] if isinstance(mx, list) else [mx] * len(tokens)
            arg: Any = mx[: len(tokens)] if isinstance(mx, list) else mx
            got = q.pop(active_prefill_tokens=tokens, max_num_batched_tokens=arg)
            assert got == ref.pop(load=(tokens, maxes))
            popped += got is not None
        elif op[0] == "plain_pop":
            got = q.pop()
            assert got == ref.pop()
            popped += got is not None
        elif op[0] == "workers":
            q.num_workers = op[1]
            ref.num_workers = op[1]
        elif live:
            t = live[op[1] % len(live)]
            if t in ref.tickets:
                assert q.remove(t) == ref.remove(t)
                popped += 1
        _check_same(q, ref)
        for c in ref.classes:
            st_ = q.stats()[c.name]
            assert (st_["queued_raw_isl_tokens"], st_["queued_cached_tokens"]) == (c.raw, c.cached)
    while (x := q.pop()) is not None:
        assert x == ref.pop()
        popped += 1
    assert ref.pop() is None and popped == pushed
