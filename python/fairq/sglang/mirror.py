"""SGLang's prefix cache (``RadixCache``) as a ``fairq.RadixTree``.

fairq's LPM and DLPM match waiting requests against a fairq ``RadixTree``
(in Rust, incrementally: only requests whose prefix changed are re-matched).
:class:`RadixCacheMirror` keeps one equal to SGLang's own ``RadixCache``,
following every change SGLang makes to it at the one place SGLang reports
them: the cache's KV-event recorder (``cache.kv_events``:
``record_store(node)`` for each new node ``_insert_helper`` creates,
``record_remove(node)`` for each leaf ``evict`` deletes,
``record_all_cleared()`` on ``reset``). :meth:`attach` wraps that recorder;
the original still gets every call (and still publishes events only if
SGLang enabled them). Node splits move no tokens and report nothing.

So the prefix lengths fairq schedules by are SGLang's own cache contents,
page-aligned as SGLang aligns them, in the same namespaces (a request's
``extra_key``, which SGLang extends with its LoRA id, and ``cache_salt``),
obtained without calling ``match_prefix``: nothing in SGLang's tree is
allocated or split, no node's ``last_access_time`` (LRU order) or
``hit_count`` moves, and SGLang's cache statistics see nothing.

One difference stays: SGLang caps a request's match one token short of its
input (a prefill computes at least one token); fairq's match may cover the
whole prompt. fairq's provisional extend charge is corrected to what SGLang
admitted (``recharge_extend``), so the charges do not differ.
"""

from __future__ import annotations

import json
from typing import Any

import fairq

__all__ = ["RadixCacheMirror", "namespace_of", "path_tokens"]


def namespace_of(extra_key: Any, cache_salt: Any) -> str | None:
    """fairq's namespace for SGLang's ``(extra_key, cache_salt)`` pair (None:
    the shared one), so requests match only what SGLang would let them."""
    if extra_key is None and not cache_salt:
        return None
    return json.dumps([extra_key, cache_salt or None])


def path_tokens(node: Any) -> list[int]:
    """The tokens from SGLang's root to ``node`` (inclusive), read only."""
    parts = []
    while node is not None and node.parent is not None:
        parts.append(node.key.raw_token_ids())
        node = node.parent
    out: list[int] = []
    for p in reversed(parts):
        out.extend(p)
    return out


class _Recorder:
    """SGLang's KV-event recorder with the mirror told first."""

    def __init__(self, inner: Any, mirror: RadixCacheMirror) -> None:
        self._fairq_inner = inner
        self._fairq_mirror = mirror

    def record_store(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        self._fairq_mirror.stored(node)
        return self._fairq_inner.record_store(node, *args, **kwargs)

    def record_remove(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        self._fairq_mirror.removed(node)
        return self._fairq_inner.record_remove(node, *args, **kwargs)

    def record_all_cleared(self, *args: Any, **kwargs: Any) -> Any:
        self._fairq_mirror.cleared()
        return self._fairq_inner.record_all_cleared(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fairq_inner, name)


class RadixCacheMirror:
    """A ``fairq.RadixTree`` equal to one SGLang ``RadixCache`` (module doc)."""

    def __init__(self, page_size: int = 1) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        self.page_size = page_size
        self.tree = fairq.RadixTree(page_size=page_size)
        self.cache: Any = None
        #: changes applied (diagnostics)
        self.stores = 0
        self.removes = 0

    @classmethod
    def attach(cls, cache: Any) -> RadixCacheMirror:
        """A mirror following ``cache`` (an SGLang ``RadixCache``) from now
        on, filled with what it holds already. A cache whose keys are
        bigrams (EAGLE) or that has no KV-event recorder is a ``ValueError``."""
        if getattr(cache, "is_eagle", False):
            raise ValueError(
                "fairq's lpm/dlpm cannot mirror an EAGLE (bigram-keyed) RadixCache; "
                "use fairq-fcfs or fairq-vtc"
            )
        recorder = getattr(cache, "kv_events", None)
        if recorder is None or not hasattr(recorder, "record_store"):
            raise ValueError(
                f"{type(cache).__name__} has no KV-event recorder (kv_events) to follow; "
                "fairq's lpm/dlpm need SGLang's RadixCache"
            )
        m = cls(int(getattr(cache, "page_size", 1) or 1))
        m.cache = cache
        if not getattr(cache, "disable", False):
            m._load(cache.root_node)
        if isinstance(recorder, _Recorder):
            recorder = recorder._fairq_inner
        cache.kv_events = _Recorder(recorder, m)
        return m

    def detach(self) -> None:
        """Stop following the cache (its recorder is restored)."""
        cache = self.cache
        if cache is not None and isinstance(cache.kv_events, _Recorder):
            cache.kv_events = cache.kv_events._fairq_inner
        self.cache = None

    def _load(self, root: Any) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            kids = list(node.children.values())
            if not kids and node is not root:
                self.stored(node)
            stack.extend(kids)

    # -- the recorder's calls ------------------------------------------------
    def stored(self, node: Any) -> None:
        key = node.key
        self.tree.insert(path_tokens(node), namespace_of(key.extra_key, key.cache_salt))
        self.stores += 1

    def removed(self, node: Any) -> None:
        key = node.key
        toks = path_tokens(node)
        keep = len(toks) - len(key.raw_token_ids())
        self.tree.truncate(toks, keep, namespace_of(key.extra_key, key.cache_salt))
        self.removes += 1

    def cleared(self) -> None:
        self.tree.evict(self.tree.size)
        self.stores = self.removes = 0

    # -- reading ---------------------------------------------------------------
    def match(self, tokens: Any, extra_key: Any = None, cache_salt: Any = None) -> int:
        """Cached prefix length of ``tokens`` in SGLang's cache (page-aligned)."""
        return self.tree.match(list(tokens), namespace_of(extra_key, cache_salt))
