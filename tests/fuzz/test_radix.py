"""fairq.RadixTree under hostile input.

Part of the hostile-input suite; see :mod:`fuzz` for what every test checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fairq
from fairq._core import as_tokens

from fuzz.hostile import (
    FUZZ,
    PROBES,
    attempt,
    hostile,
    must_fail,
)


def tree_snap(t: Any) -> Any:
    return (
        t.size,
        t.evictable_size,
        t.num_nodes,
        len(t),
        [t.match(p) for p in PROBES],
        [t.match(p, namespace="ns") for p in PROBES],
    )


@FUZZ
@given(data=st.data(), cap=st.sampled_from([None, 8, 64]), page=st.sampled_from([1, 2]))
def test_radix_hostile(data: st.DataObject, cap: int | None, page: int) -> None:
    t = fairq.RadixTree(capacity=cap, page_size=page)
    t.insert([1, 2, 3, 4])
    t.insert([5, 6, 7, 8], namespace="ns")
    t.lock([1, 2, 3, 4])
    locks: list[tuple[str, tuple[Any, ...]]] = [("lock", ((1, 2, 3, 4), None))]

    def snap() -> Any:
        return tree_snap(t)

    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["match", "insert", "lock", "unlock", "evict", "valid"]))
        h = data.draw(hostile)
        use_ns = data.draw(st.booleans())
        args = (PROBES[0], h) if use_ns else (h,)
        if op == "evict":
            ok, e = attempt(snap, t.evict, h)
            if not ok and isinstance(e, ValueError):
                assert "n_tokens" in str(e), e
        elif op == "valid":
            t.insert([9, 9, 9, 9])
            assert t.match([9, 9, 9, 9]) in (0, 2, 4)
        else:
            ok, e = attempt(snap, getattr(t, op), *args)
            if ok and op in ("lock", "unlock"):
                ns = args[1] if len(args) > 1 else None
                locks.append((op, (tuple(as_tokens(args[0])), ns)))
            if not ok and isinstance(e, ValueError | TypeError):
                assert ("namespace" if use_ns else "tokens") in str(e), e
        t._check()
    # release every lock still held (an unlock releases the latest matching lock)
    held: list[tuple[Any, ...]] = []
    for op, args in locks:
        if op == "lock":
            held.append(args)
        else:
            held.remove(next(a for a in reversed(held) if a == args))
    for toks, ns in held:
        t.unlock(list(toks), ns)
    t.evict(10**9)
    assert t.evictable_size == t.size
    t._check()


def test_radix_messages_name_fields() -> None:
    t = fairq.RadixTree(capacity=10)
    t.insert([1, 2, 3])

    def snap() -> Any:
        return tree_snap(t)

    must_fail(snap, t.unlock, [1, 2, 3], exc=KeyError)
    must_fail(snap, t.insert, [1, 2**32], exc=ValueError, field="tokens")
    must_fail(snap, t.insert, [1], namespace=1.5, exc=TypeError, field="namespace")
    for n in (-1, 2**64, 2**200):
        must_fail(snap, t.evict, n, exc=ValueError, field="n_tokens")
    must_fail(snap, t.evict, 1.5, exc=TypeError, field="n_tokens")
    for bad in (-1, 2**64, 2**200):
        with pytest.raises(ValueError, match="capacity"):
            fairq.RadixTree(capacity=bad)
    for bad in (0, -1, 2**64, 2**200):
        with pytest.raises(ValueError, match="page_size"):
            fairq.RadixTree(page_size=bad)
