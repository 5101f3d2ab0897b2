"""Prefix-cache model: a token radix tree (implemented in Rust).

``RadixTree(capacity=None, page_size=1)`` models an engine's prefix (KV) cache
over token ids. Tokens are a list of ints, a numpy integer array or a uint32
buffer; ids outside ``0..2**32-1`` raise ``ValueError``.

Semantics (see docs/design/core.md, "Prefix cache model"):

* ``match(tokens, namespace=None)``: longest cached prefix, in whole pages. A
  pure query: it does not refresh LRU stamps.
* ``insert(tokens, namespace=None)``: stores ``tokens`` truncated to whole
  pages and returns the length that was already present. It stamps every node
  on the path as most recently used. With a ``capacity``, least-recently-used
  unlocked leaves are evicted first (never the path being extended); if room
  is still short, only the whole pages that fit are stored (no error).
* ``lock(tokens)`` / ``unlock(tokens)``: reference-count the cached prefix of
  ``tokens`` so it cannot be evicted; ``lock`` also stamps the path. Each
  ``unlock`` releases one earlier ``lock`` of the same tokens and namespace
  (exactly the prefix that lock covered), ``KeyError`` if none is held.
* ``evict(n_tokens)``: frees whole unlocked leaves, least recently used first,
  until at least ``n_tokens`` are freed or nothing is evictable; returns the
  tokens freed (may exceed ``n_tokens``).
* ``namespace``: ``None``, a ``str`` or an ``int``; equal tokens under
  different namespaces never match.
"""

from __future__ import annotations

from fairq._core import RadixTree

__all__ = ["RadixTree"]
