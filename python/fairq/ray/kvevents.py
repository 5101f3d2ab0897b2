"""A replica's KV-cache evictions, from vLLM's own KV-cache events.

vLLM publishes what its prefix cache stores and frees (``kv_events_config``:
``BlockStored`` with each full block's hash, its parent's hash and its token
ids; ``BlockRemoved`` with the hashes of blocks it evicted;
``AllBlocksCleared``) on a ZMQ socket. The D2LPM router needs evictions as
*token prefixes* (``on_evict(worker, tokens, kept)``), so
:class:`BlockChains` keeps, for every block the engine holds, its parent and
its tokens, and turns a removed block into the whole prefix it ended
(``tokens``) and the part of it that is still cached (``kept``: the prefix
up to the block's parent).

A block whose parent was evicted before it stays in the map until the engine
frees it too, but reports nothing then: the parent's report already took the
whole subtree out of the router's view (a prefix cache can only hit a block
through its parent). The map holds at most the engine's number of KV blocks.

:class:`KVEventListener` subscribes to the engine's endpoint in a daemon
thread, decodes the batches with vLLM's own types and feeds
:class:`BlockChains`; each eviction goes to a callback (the replica's
:class:`~fairq.ray.feedback.ReplicaFeedback`). Only the
listener imports ZMQ and vLLM.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

logger = logging.getLogger("ray.serve")

#: ``(tokens, kept)``: the engine no longer caches ``tokens[kept:]``.
Eviction = tuple[list[int], int]


class BlockChains:
    """The engine's cached blocks as chains of token ids (see the module doc)."""

    def __init__(self) -> None:
        self._blocks: dict[Hashable, tuple[Hashable | None, list[int]]] = {}
        #: counters: blocks stored, removed, evictions reported, removals of
        #: blocks never seen stored (events missed), full clears
        self.counters: dict[str, int] = dict.fromkeys(
            ("stored", "removed", "reported", "unknown", "cleared"), 0
        )

    def __len__(self) -> int:
        return len(self._blocks)

    def stored(
        self,
        block_hashes: Sequence[Hashable],
        parent: Hashable | None,
        token_ids: Sequence[int],
        block_size: int,
    ) -> None:
        """Blocks ``block_hashes`` (a chain, each the next one's parent) were
        cached after ``parent``; ``token_ids`` are their tokens, ``block_size``
        per block."""
        if block_size <= 0 or len(token_ids) < block_size * len(block_hashes):
            raise ValueError(
                f"BlockStored carries {len(token_ids)} tokens for {len(block_hashes)} "
                f"blocks of {block_size}"
            )
        prev = parent
        for i, h in enumerate(block_hashes):
            self._blocks[h] = (
                prev,
                [int(t) for t in token_ids[i * block_size : (i + 1) * block_size]],
            )
            prev = h
            self.counters["stored"] += 1

    def _prefix(self, h: Hashable) -> list[int] | None:
        """The tokens from the root to block ``h`` inclusive (None if a block
        on the way is no longer held)."""
        parts: list[list[int]] = []
        cur: Hashable | None = h
        while cur is not None:
            entry = self._blocks.get(cur)
            if entry is None:
                return None
            parts.append(entry[1])
            cur = entry[0]
        return [t for part in reversed(parts) for t in part]

    def removed(self, block_hashes: Sequence[Hashable]) -> list[Eviction]:
        """Blocks ``block_hashes`` were evicted: the evictions to report."""
        out: list[Eviction] = []
        for h in block_hashes:
            if h not in self._blocks:
                self.counters["unknown"] += 1
                continue
            prefix = self._prefix(h)
            own = len(self._blocks[h][1])
            del self._blocks[h]
            self.counters["removed"] += 1
            if prefix is not None:
                out.append((prefix, len(prefix) - own))
                self.counters["reported"] += 1
        return out

    def cleared(self) -> list[Eviction]:
        """The engine dropped its whole cache: one eviction per chain root."""
        # Chains whose first block is gone were reported when it went.
        out: list[Eviction] = [
            (list(tokens), 0) for parent, tokens in self._blocks.values() if parent is None
        ]
        self._blocks.clear()
        self.counters["cleared"] += 1
        self.counters["reported"] += len(out)
        return out

    def apply(self, event: Any) -> list[Eviction]:
        """One decoded vLLM KV event (duck-typed on its class name)."""
        kind = type(event).__name__
        if kind == "BlockStored":
            self.stored(
                event.block_hashes, event.parent_block_hash, event.token_ids, event.block_size
            )
            return []
        if kind == "BlockRemoved":
            return self.removed(event.block_hashes)
        if kind == "AllBlocksCleared":
            return self.cleared()
        return []


class KVEventListener:
    """Subscribes to a vLLM engine's KV-event socket and reports evictions.

    ``endpoint``: the engine's ``kv_events_config.endpoint`` (this replica's
    own engine; an ``ipc://`` path on the same node). ``on_evict(tokens,
    kept)`` is called from the listener's thread. :meth:`close` stops it.
    """

    def __init__(
        self, endpoint: str, on_evict: Callable[[list[int], int], Any], topic: str = ""
    ) -> None:
        self.endpoint = endpoint
        self.chains = BlockChains()
        self.batches = 0
        self.errors = 0
        self._on_evict = on_evict
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fairq-kv-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        ctx: Any = zmq.Context.instance()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt_string(zmq.SUBSCRIBE, self._topic)
        sock.connect(self.endpoint)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(200):
                    continue
                parts = sock.recv_multipart()
                try:
                    batch = decoder.decode(parts[-1])
                    self.batches += 1
                    for ev in batch.events:
                        for tokens, kept in self.chains.apply(ev):
                            self._on_evict(tokens, kept)
                except Exception:  # a malformed batch must not stop the listener
                    self.errors += 1
                    logger.exception("fairq: could not apply a KV-event batch")
        finally:
            sock.close(linger=0)

    def close(self, timeout: float = 2.0) -> None:
        """Stop the listener thread."""
        self._stop.set()
        self._thread.join(timeout)
