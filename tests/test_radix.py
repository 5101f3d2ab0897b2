"""RadixTree: worked examples, errors, and a hypothesis model test."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq import RadixTree

from reference.radix import RefRadix


def test_basic_match_insert() -> None:
    t = RadixTree()
    assert t.insert([1, 2, 3, 4]) == 0
    assert t.match([1, 2, 3, 4, 5]) == 4
    assert t.match([1, 2, 9]) == 2
    assert t.insert([1, 2, 9]) == 2
    assert t.size == len(t) == 5
    assert t.match([]) == 0
    assert t.capacity is None and t.page_size == 1


def test_token_inputs() -> None:
    t = RadixTree()
    t.insert(np.array([5, 6, 7], dtype=np.int64))
    assert t.match(np.array([5, 6, 7], dtype=np.uint32)) == 3
    assert t.match(np.array([5, 6], dtype=np.uint32).tobytes()) == 2
    assert t.match((5, 6, 8)) == 2


def test_bad_input_leaves_tree_unchanged() -> None:
    t = RadixTree(capacity=10)
    t.insert([1, 2, 3])
    with pytest.raises(ValueError, match="tokens"):
        t.insert([1, -1])
    with pytest.raises(ValueError, match="tokens"):
        t.insert(np.array([1, 2**40]))
    with pytest.raises(TypeError, match="tokens"):
        t.insert(["a"])
    with pytest.raises(TypeError, match="namespace"):
        t.insert([1], namespace=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_tokens"):
        t.evict(-1)
    with pytest.raises(KeyError):
        t.unlock([1, 2, 3])
    with pytest.raises(ValueError, match="page_size"):
        RadixTree(page_size=0)
    with pytest.raises(ValueError, match="capacity"):
        RadixTree(capacity=-1)
    assert t.size == 3 and t.match([1, 2, 3]) == 3
    t._check()


def test_namespaces_never_share() -> None:
    t = RadixTree()
    t.insert([1, 2, 3], namespace="lora-a")
    assert t.match([1, 2, 3]) == 0
    assert t.match([1, 2, 3], namespace="lora-b") == 0
    assert t.match([1, 2, 3], namespace=7) == 0
    assert t.match([1, 2, 3], namespace="lora-a") == 3
    t.insert([1, 2], namespace=7)
    assert t.match([1, 2, 3], namespace=7) == 2


def test_pages() -> None:
    t = RadixTree(page_size=4)
    assert t.insert(list(range(10))) == 0
    assert t.size == 8
    assert t.match(list(range(7))) == 4
    assert t.match([0, 1, 2, 3, 4, 5, 6, 99]) == 4
    assert t.insert([0, 1, 2, 3, 4, 5, 9, 9]) == 4
    assert t.size == 12
    t._check()


def test_evict_lru_order_and_locks() -> None:
    t = RadixTree()
    t.insert([1, 2, 3])
    t.insert([1, 2, 4])
    t.insert([5, 6])
    assert t.lock([1, 2, 4, 9]) == 3  # locks [1,2] and [4]
    assert t.evictable_size == 3
    assert t.evict(1) == 1  # [3]: least recently used
    assert t.match([1, 2, 3]) == 2
    assert t.evict(1) == 2  # whole leaf [5, 6]
    assert t.evict(100) == 0  # the rest is locked
    t.unlock([1, 2, 4, 9])
    assert t.evict(100) == 3
    assert t.size == 0
    t._check()


def test_unlock_releases_what_lock_took_even_after_growth() -> None:
    t = RadixTree()
    t.insert([1, 2])
    assert t.lock([1, 2, 3, 4]) == 2
    t.insert([1, 2, 3, 4])  # the prefix grew while locked
    assert t.evictable_size == 2
    t.unlock([1, 2, 3, 4])
    assert t.evictable_size == 4
    t._check()


def test_capacity_evicts_lru_then_truncates() -> None:
    t = RadixTree(capacity=6)
    t.insert([1, 2, 3])
    t.insert([4, 5, 6])
    t.insert([7, 8])  # evicts [1,2,3] (LRU)
    assert t.match([1, 2, 3]) == 0 and t.match([4, 5, 6]) == 3 and t.size == 5
    t.lock([4, 5, 6])
    t.lock([7, 8])
    t.insert([9, 9, 9, 9])  # nothing evictable: only 1 token fits
    assert t.size == 6 and t.match([9, 9, 9, 9]) == 1
    t._check()


def test_insert_never_evicts_its_own_path() -> None:
    t = RadixTree(capacity=4)
    t.insert([1, 2, 3])
    t.insert([1, 2, 3, 4, 5, 6])  # [1,2,3] is the only leaf but is being extended
    assert t.match([1, 2, 3, 4, 5, 6]) == 4
    t._check()


def test_evicted_nodes_are_freed() -> None:
    t = RadixTree()
    base = t.num_nodes
    for i in range(200):
        t.insert([i, i + 1, i + 2])
    t.evict(10**9)
    assert base == 0
    assert t.size == 0 and t.num_nodes == 1  # the default root only
    t._check()


def test_exported() -> None:
    assert fairq.RadixTree is RadixTree


# ---------------------------------------------------------------- model test

ALPHA = st.integers(0, 2)
TOKS = st.lists(ALPHA, max_size=9)
NS = st.sampled_from([None, "a", 3])
OP = st.one_of(
    st.tuples(st.just("insert"), TOKS, NS),
    st.tuples(st.just("insert"), TOKS, NS),
    st.tuples(st.just("lock"), TOKS, NS),
    st.tuples(st.just("unlock"), st.integers(0, 10), NS),
    st.tuples(st.just("evict"), st.integers(0, 12), NS),
    st.tuples(st.just("match"), TOKS, NS),
)


@settings(max_examples=150)
@given(
    cap=st.one_of(st.none(), st.integers(0, 30)),
    page=st.sampled_from([1, 2, 3]),
    ops=st.lists(OP, max_size=40),
    probes=st.lists(TOKS, min_size=1, max_size=6),
)
def test_model(
    cap: int | None, page: int, ops: list[tuple[str, object, object]], probes: list[list[int]]
) -> None:
    t = RadixTree(capacity=cap, page_size=page)
    ref = RefRadix(capacity=cap, page_size=page)
    held: list[tuple[list[int], object]] = []
    for op, arg, ns in ops:
        if op == "insert":
            assert isinstance(arg, list)
            got = t.insert(arg, namespace=ns)  # type: ignore[arg-type]
            assert got == ref.insert(arg, ns, size_after=t.size)
        elif op == "lock":
            assert isinstance(arg, list)
            got = t.lock(arg, namespace=ns)  # type: ignore[arg-type]
            assert got == ref.lock(arg, ns)
            held.append((arg, ns))
        elif op == "unlock":
            assert isinstance(arg, int)
            if held:
                toks, hns = held.pop(arg % len(held))
                t.unlock(toks, namespace=hns)  # type: ignore[arg-type]
                ref.unlock(toks, hns)
        elif op == "evict":
            assert isinstance(arg, int)
            before = t.evictable_size
            freed = t.evict(arg)
            assert freed >= min(arg, before)
            assert freed <= before
            ref.evict_exactly(freed)
        else:
            assert isinstance(arg, list)
            assert t.match(arg, namespace=ns) == ref.match(arg, ns)  # type: ignore[arg-type]
        assert t.size == ref.size
        assert t.evictable_size == ref.evictable_size
        t._check()
    for p in probes:
        for ns in (None, "a", 3):
            assert t.match(p, namespace=ns) == ref.match(p, ns)
