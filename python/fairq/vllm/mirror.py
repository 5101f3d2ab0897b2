"""A mirror of vLLM's prefix cache in a ``fairq.RadixTree``, fed by vLLM's KV events.

LPM and DLPM order waiting requests by how many prompt tokens vLLM would
serve from its prefix cache. Asking vLLM for each waiting request at every
step would cost a hash-chain walk per request per step; instead fairq keeps a
token radix tree (``page_size`` = vLLM's block size) that holds exactly the
token paths of the blocks vLLM has cached, and its local schedulers re-match
only the requests parked on nodes that changed (``rust/sched/prefix.rs``).

The tree follows vLLM's own KV cache events, the interface external routers
(Dynamo's KV router among them) mirror vLLM's cache with:

* ``BlockStored(block_hashes, parent_block_hash, token_ids, ...)``: the path
  of the parent block plus ``token_ids`` is inserted;
* ``BlockRemoved(block_hashes)``: the block was evicted; the tree drops the
  path past the block's start (``RadixTree.truncate``): vLLM's match stops at
  the first missing block, so nothing after it can be matched either;
* ``AllBlocksCleared``: everything goes.

Reading the events allocates no block, touches no LRU order and records no
prefix-cache statistic. :meth:`PrefixCacheMirror.attach` turns the block
pool's event queue on if the deployment has not (vLLM then publishes them to
its configured publisher, the null one by default) and wraps the KV cache
manager's ``take_events`` so that every event is read before vLLM drains
it; :meth:`sync` also reads the ones queued since.

Namespaces: blocks of a LoRA adapter or a ``cache_salt`` live under their
own namespace (``lora=<name>;salt=<salt>``), like vLLM's hashes. Blocks with
multimodal or prompt-embedding extra keys, and events whose blocks are not
contiguous (sliding-window groups skip null blocks), are not mirrored: such
requests are matched as if nothing were cached (conservative; their charges
still come from what vLLM really computed). A block evicted and stored again
comes back alone: blocks after it that vLLM still holds reappear when
stored again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fairq

__all__ = ["PrefixCacheMirror", "request_namespace"]


@dataclass
class _Block:
    parent: Any
    #: the token path of the event that stored it (shared by that event's
    #: blocks); this block's path is ``chain[:end]``
    chain: list[int]
    end: int
    ns: str | None
    alive: bool = True
    #: hashes of the blocks stored after it (kept while any is known)
    kids: set[Any] = field(default_factory=set)


def _namespace(lora: str | None, salt: str | None) -> str | None:
    if not lora and not salt:
        return None
    return f"lora={lora or ''};salt={salt or ''}"


def request_namespace(request: Any) -> str | None | bool:
    """The mirror namespace of a vLLM request, or ``False`` when the mirror
    cannot match it (multimodal inputs or prompt embeddings)."""
    if getattr(request, "mm_features", None) or getattr(request, "prompt_embeds", None) is not None:
        return False
    lora = getattr(getattr(request, "lora_request", None), "lora_name", None)
    return _namespace(lora, getattr(request, "cache_salt", None))


class PrefixCacheMirror:
    """vLLM's prefix cache as a ``fairq.RadixTree`` (see the module doc)."""

    def __init__(self, block_size: int) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        self.block_size = block_size
        self.tree = fairq.RadixTree(page_size=block_size)
        self._blocks: dict[Any, _Block] = {}
        self._pool: Any = None
        self._seen: Any = None  # the event list last read
        self._pos = 0
        #: events applied / ignored (diagnostics)
        self.applied = 0
        self.skipped = 0

    # -- wiring -----------------------------------------------------------
    def attach(self, kv_cache_manager: Any) -> None:
        """Follow ``kv_cache_manager``'s block pool from now on."""
        pool = kv_cache_manager.block_pool
        pool.enable_kv_cache_events = True
        self._pool = pool
        original = kv_cache_manager.take_events

        def take_events() -> Any:
            self.sync()  # read everything queued before vLLM drains it
            events = original()
            self._seen, self._pos = None, 0
            return events

        kv_cache_manager.take_events = take_events

    def sync(self) -> None:
        """Apply the events queued since the last call."""
        if self._pool is None:
            return
        queue = self._pool.kv_event_queue
        if queue is not self._seen:
            self._seen, self._pos = queue, 0
        n = len(queue)
        for i in range(self._pos, n):
            self.apply(queue[i])
        self._pos = n

    # -- events -----------------------------------------------------------
    def apply(self, event: Any) -> None:
        """Apply one KV cache event (by class name, so any vLLM version's)."""
        kind = type(event).__name__
        if kind == "BlockStored":
            self._stored(event)
        elif kind == "BlockRemoved":
            for h in event.block_hashes:
                self._removed(h)
        elif kind == "AllBlocksCleared":
            self.clear()

    def _path(self, h: Any) -> list[int]:
        b = self._blocks[h]
        return b.chain[: b.end]

    def _stored(self, ev: Any) -> None:
        bs = self.block_size
        hashes = list(ev.block_hashes)
        tokens = list(ev.token_ids)
        extra = getattr(ev, "extra_keys", None) or []
        if (
            getattr(ev, "block_size", bs) != bs
            or len(tokens) != len(hashes) * bs
            or any(isinstance(k, tuple) for keys in extra if keys for k in keys)
        ):
            self.skipped += 1
            return
        parent = ev.parent_block_hash
        if parent is not None:
            pb = self._blocks.get(parent)
            if pb is None or not pb.alive:
                self.skipped += 1  # its chain is not in the mirror
                return
            ns = pb.ns
            prefix = self._path(parent)
        else:
            lora = getattr(ev, "lora_name", None)
            keys = list(extra[0]) if extra and extra[0] else []
            if lora and keys and keys[0] == lora:
                keys = keys[1:]
            salt = next((k for k in keys if isinstance(k, str)), None)
            ns = _namespace(lora, salt)
            prefix = []
        chain = prefix + tokens
        self.tree.insert(chain, namespace=ns)
        prev = parent
        base = len(prefix)
        for i, h in enumerate(hashes):
            old = self._blocks.get(h)
            if old is not None and old.alive:
                prev = h
                continue
            b = _Block(prev, chain, base + (i + 1) * bs, ns)
            if old is not None:  # stored again: keep the children it had
                b.kids = old.kids
            self._blocks[h] = b
            if prev is not None:
                self._blocks[prev].kids.add(h)
            prev = h
        self.applied += 1

    def _removed(self, h: Any) -> None:
        b = self._blocks.get(h)
        if b is None or not b.alive:
            return
        path = self._path(h)
        self.tree.truncate(path, len(path) - self.block_size, namespace=b.ns)
        b.alive = False
        self._collect(h)
        self.applied += 1

    def _collect(self, h: Any) -> None:
        """Forget dead blocks no live chain needs any more."""
        while h is not None:
            b = self._blocks.get(h)
            if b is None or b.alive or b.kids:
                return
            del self._blocks[h]
            parent = b.parent
            if parent is not None and parent in self._blocks:
                p = self._blocks[parent]
                p.kids.discard(h)
            h = parent

    def clear(self) -> None:
        """Drop everything (vLLM reset its prefix cache)."""
        for b in list(self._blocks.values()):
            if b.parent is None and b.alive:
                self.tree.truncate(b.chain[: b.end], 0, namespace=b.ns)
        self._blocks.clear()

    def __len__(self) -> int:
        """Blocks the mirror knows to be cached."""
        return sum(1 for b in self._blocks.values() if b.alive)
