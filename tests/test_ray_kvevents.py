"""fairq.ray.kvevents.BlockChains: vLLM's KV-cache events as
token-prefix evictions (no vLLM or ZMQ needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.ray.kvevents import BlockChains


@dataclass
class BlockStored:
    block_hashes: list[Any]
    parent_block_hash: Any
    token_ids: list[int]
    block_size: int


@dataclass
class BlockRemoved:
    block_hashes: list[Any]


@dataclass
class AllBlocksCleared:
    extra: list[Any] = field(default_factory=list)


def test_removed_block_reports_its_whole_prefix_and_what_stays() -> None:
    c = BlockChains()
    # a request cached 3 blocks of 2 tokens: 10 11 | 12 13 | 14 15
    c.apply(BlockStored([b"a", b"b", b"c"], None, [10, 11, 12, 13, 14, 15], 2))
    # another request shares the first block, then diverges: 20 21
    c.apply(BlockStored([b"d"], b"a", [20, 21], 2))
    assert len(c) == 4
    # vLLM evicts the tail first
    assert c.apply(BlockRemoved([b"c"])) == [([10, 11, 12, 13, 14, 15], 4)]
    assert c.apply(BlockRemoved([b"d"])) == [([10, 11, 20, 21], 2)]
    assert c.apply(BlockRemoved([b"b", b"a"])) == [([10, 11, 12, 13], 2), ([10, 11], 0)]
    assert len(c) == 0
    assert c.counters["reported"] == 4


def test_child_of_an_evicted_parent_reports_nothing() -> None:
    c = BlockChains()
    c.apply(BlockStored([1, 2], None, [5, 6, 7, 8], 2))
    assert c.apply(BlockRemoved([1])) == [([5, 6], 0)]  # the subtree left with it
    assert c.apply(BlockRemoved([2])) == []
    assert c.apply(BlockRemoved([99])) == []  # never seen: counted, not reported
    assert c.counters["unknown"] == 1
    assert len(c) == 0


def test_clear_reports_each_chain_root() -> None:
    c = BlockChains()
    c.apply(BlockStored([1, 2], None, [5, 6, 7, 8], 2))
    c.apply(BlockStored([3], None, [9, 9], 2))
    assert sorted(c.apply(AllBlocksCleared())) == [([5, 6], 0), ([9, 9], 0)]
    assert len(c) == 0


def test_short_event_is_rejected_whole() -> None:
    c = BlockChains()
    with pytest.raises(ValueError, match="3 tokens for 2 blocks of 2"):
        c.apply(BlockStored([1, 2], None, [1, 2, 3], 2))
    assert len(c) == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_reports_match_a_model_of_the_cache(data: st.DataObject) -> None:
    """Random store/evict sequences on a trie of blocks: every report names
    the exact prefix of the evicted block, ``kept`` is its parent's prefix
    length, and a block is reported iff all its ancestors were still held."""
    bs = 2
    c = BlockChains()
    held: dict[int, tuple[int | None, list[int]]] = {}  # the model: id -> (parent, prefix)
    next_id = 0
    for _ in range(data.draw(st.integers(1, 40))):
        if held and data.draw(st.booleans()):
            h = data.draw(st.sampled_from(sorted(held)))
            parent, prefix = held.pop(h)
            chain_ok = all(p in held for p in _ancestors(h, parent, held, c))
            got = c.apply(BlockRemoved([h]))
            if chain_ok:
                assert got == [(prefix, len(prefix) - bs)]
            else:
                assert got == []
        else:
            parent = data.draw(st.sampled_from([None, *sorted(held)]))
            base = [] if parent is None else held[parent][1]
            n = data.draw(st.integers(1, 3))
            ids = list(range(next_id, next_id + n))
            next_id += n
            toks = data.draw(st.lists(st.integers(0, 9), min_size=n * bs, max_size=n * bs))
            c.apply(BlockStored(ids, parent, toks, bs))
            prev = parent
            for i, h in enumerate(ids):
                held[h] = (prev, base + toks[: (i + 1) * bs])
                prev = h


def _ancestors(h: int, parent: int | None, held: dict[int, Any], c: BlockChains) -> list[int]:
    """The block's ancestors as the chain map records them (parents may
    already be gone from the model)."""
    out = []
    cur = parent
    while cur is not None:
        out.append(cur)
        entry = c._blocks.get(cur)
        if entry is None:
            break
        cur = entry[0]
    return out
