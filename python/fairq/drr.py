"""Deficit Round Robin across policy classes (ALGORITHMS.md section 2).

:class:`DRRQueue` decides which *policy class* dispatches next with DRR and
lets each class's FCFS or WSPT heap (after strict-priority tiers) decide which
request inside it. The arbitration, the heaps and the deficits live in the
Rust core (``fairq._core._DRRCore``); this module adds the configuration layer:
:class:`PolicyClass`, cache buckets, policy families, ``from_config`` and
``push_request`` classification.

Configuration schema (YAML or a dict)::

    default_family: standard          # optional: family for policy_family=None
    cache_buckets:                     # optional; floors start at 0, strictly increasing
      - {name: cached, min_tokens: 0}
      - {name: uncached, min_tokens: 1024}
    policy_classes:                    # ring order
      - name: cached                   # unique
        policy_family: standard        # optional
        cache_bucket: cached           # optional (needs policy_family)
        queue_policy: wspt             # fcfs | wspt (default fcfs)
        quantum: 2048                  # integer > 0
        max_queued_requests: 1000      # optional integer >= 0
        max_queued_tokens: 4000000     # optional integer >= 0

Every ``policy_family x cache_bucket`` pair has exactly one class (without
``cache_buckets`` each family has exactly one class). A class with neither
family nor bucket is reachable only by name (``push(class_name=...)``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fairq._core import _DRRCore

__all__ = ["DRRQueue", "PolicyClass", "CacheBucket"]

_ORDERS = ("fcfs", "wspt")
_CLASS_KEYS = {
    "name",
    "policy_family",
    "cache_bucket",
    "queue_policy",
    "quantum",
    "max_queued_requests",
    "max_queued_tokens",
}
_TOP_KEYS = {"policy_classes", "cache_buckets", "default_family"}


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_name(field: str, v: object) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{field} must be a non-empty string, got {v!r}")
    return v


def _check_limit(field: str, v: object) -> int | None:
    if v is None:
        return None
    if not _is_int(v) or v < 0:  # type: ignore[operator]
        raise ValueError(f"{field} must be an integer >= 0 or None, got {v!r}")
    if v >= 2**64:  # type: ignore[operator]
        raise ValueError(f"{field} must be < 2**64, got {v!r}")
    return int(v)  # type: ignore[call-overload]


@dataclass(frozen=True)
class PolicyClass:
    """One physical policy class.

    ``quantum``: credit (uncached tokens) earned per DRR ring visit, integer > 0.
    ``order``: within-class order, ``"fcfs"`` (earlier ``arrival -
    priority_jump`` first) or ``"wspt"`` (larger ``(1 + priority_jump) /
    cost`` first); strict-priority tiers always come first.
    ``policy_family`` / ``cache_bucket``: where ``push_request`` routes.
    ``max_queued_requests`` / ``max_queued_tokens``: optional limits (the
    latter on the sum of queued scheduling costs, i.e. uncached tokens with a
    minimum of 1 each); a push over one raises :class:`fairq.QueueFull` and
    enqueues nothing.
    """

    name: str
    quantum: int
    order: str = "fcfs"
    policy_family: str | None = None
    cache_bucket: str | None = None
    max_queued_requests: int | None = None
    max_queued_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_name("name", self.name)
        if not _is_int(self.quantum) or self.quantum <= 0:
            raise ValueError(
                f"quantum must be an integer > 0, got {self.quantum!r} (class {self.name!r})"
            )
        if self.quantum >= 2**64:
            raise ValueError(f"quantum must be < 2**64, got {self.quantum!r}")
        if not isinstance(self.order, str) or self.order not in _ORDERS:
            raise ValueError(
                f"queue_policy must be 'fcfs' or 'wspt', got {self.order!r} (class {self.name!r})"
            )
        if self.policy_family is not None:
            _check_name("policy_family", self.policy_family)
        if self.cache_bucket is not None:
            _check_name("cache_bucket", self.cache_bucket)
            if self.policy_family is None:
                raise ValueError(
                    f"cache_bucket {self.cache_bucket!r} needs a policy_family "
                    f"(class {self.name!r})"
                )
        _check_limit("max_queued_requests", self.max_queued_requests)
        _check_limit("max_queued_tokens", self.max_queued_tokens)


@dataclass(frozen=True)
class CacheBucket:
    """A cache bucket: requests with ``uncached_tokens >= min_tokens`` (and
    below the next floor) belong to it."""

    name: str
    min_tokens: int


def _validate_routing(
    classes: Sequence[PolicyClass],
    buckets: Sequence[CacheBucket],
    default_family: str | None,
) -> dict[str, dict[str | None, str]]:
    """family -> bucket (None when no buckets) -> class name; raises ValueError."""
    for i, b in enumerate(buckets):
        if not isinstance(b, CacheBucket):
            raise TypeError(f"cache_buckets[{i}] must be a CacheBucket, got {type(b).__name__}")
        _check_name(f"cache_buckets[{i}].name", b.name)
        if not _is_int(b.min_tokens):
            raise ValueError(
                f"cache_buckets[{i}].min_tokens must be an integer, got {b.min_tokens!r}"
            )
        if i == 0 and b.min_tokens != 0:
            raise ValueError(
                f"cache_buckets[0].min_tokens must be 0 (floors start at 0), got {b.min_tokens!r}"
            )
        if i > 0 and b.min_tokens <= buckets[i - 1].min_tokens:
            raise ValueError(
                f"cache_buckets[{i}].min_tokens must be strictly greater than "
                f"{buckets[i - 1].min_tokens}, got {b.min_tokens!r}"
            )
    bucket_names = [b.name for b in buckets]
    if len(set(bucket_names)) != len(bucket_names):
        dup = next(n for n in bucket_names if bucket_names.count(n) > 1)
        raise ValueError(f"cache_buckets name {dup!r} is a duplicate")
    seen: set[str] = set()
    routes: dict[str, dict[str | None, str]] = {}
    for i, c in enumerate(classes):
        if not isinstance(c, PolicyClass):
            raise TypeError(f"policy_classes[{i}] must be a PolicyClass, got {type(c).__name__}")
        if c.name in seen:
            raise ValueError(f"policy_classes[{i}].name {c.name!r} is a duplicate class name")
        seen.add(c.name)
        if c.policy_family is None:
            continue
        if buckets and c.cache_bucket is None:
            raise ValueError(
                f"policy_classes[{i}].cache_bucket is required for family "
                f"{c.policy_family!r} when cache_buckets are configured, got None"
            )
        if c.cache_bucket is not None and c.cache_bucket not in bucket_names:
            raise ValueError(
                f"policy_classes[{i}].cache_bucket {c.cache_bucket!r} is not a configured "
                f"cache bucket (known: {bucket_names})"
            )
        fam = routes.setdefault(c.policy_family, {})
        if c.cache_bucket in fam:
            raise ValueError(
                f"policy_classes[{i}]: policy_family {c.policy_family!r} x cache_bucket "
                f"{c.cache_bucket!r} already has class {fam[c.cache_bucket]!r} "
                f"(each pair needs exactly one class)"
            )
        fam[c.cache_bucket] = c.name
    for fam_name, fam in routes.items():
        for bname in bucket_names:
            if bname not in fam:
                raise ValueError(
                    f"policy_family {fam_name!r} x cache_bucket {bname!r} has no class "
                    f"(each pair needs exactly one class)"
                )
    if default_family is not None:
        _check_name("default_family", default_family)
        if default_family not in routes:
            raise ValueError(
                f"default_family {default_family!r} is not the policy_family of any class "
                f"(known: {sorted(routes)})"
            )
    return routes


class DRRQueue(_DRRCore):
    """Deficit Round Robin queue across policy classes.

    ``DRRQueue(classes)`` with ``PolicyClass`` objects in ring order; with no
    classes a single synthetic ``default`` class (FCFS, quantum 1) makes it an
    ordinary single queue. Items are arbitrary Python objects.

    Core methods (implemented in Rust): ``push(item, class_name, cost,
    strict_priority=0, priority_jump=0.0, arrival=None) -> ticket``,
    ``pop(blocked=None, dispatchable=None) -> (class_name, item) | None``,
    ``remove(ticket)``, ``deficit(name)``, ``depth(name)``, ``head(name)``,
    ``head_cost(name)``, ``cursor``, ``class_names``, ``stats()``, ``len()``.
    ``arrival`` defaults to ``time.monotonic()`` (seconds) at push time;
    ``priority_jump`` is in seconds for FCFS classes and a weight boost for WSPT.
    """

    _classes: tuple[PolicyClass, ...]
    _buckets: tuple[CacheBucket, ...]
    _routes: dict[str, dict[str | None, str]]
    _default_family: str | None

    def __new__(
        cls,
        classes: Iterable[PolicyClass] | None = None,
        *,
        cache_buckets: Iterable[CacheBucket] | None = None,
        default_family: str | None = None,
    ) -> DRRQueue:
        cl = tuple(classes) if classes is not None else ()
        if not cl:
            cl = (PolicyClass("default", quantum=1, order="fcfs"),)
        buckets = tuple(cache_buckets) if cache_buckets is not None else ()
        routes = _validate_routing(cl, buckets, default_family)
        specs = [
            (c.name, c.quantum, c.order, c.max_queued_requests, c.max_queued_tokens) for c in cl
        ]
        self = cast(DRRQueue, super().__new__(cls, specs))
        self._classes = cl
        self._buckets = buckets
        self._routes = routes
        self._default_family = default_family
        return self

    @property
    def policy_classes(self) -> tuple[PolicyClass, ...]:
        """The configured classes in ring order."""
        return self._classes

    @property
    def cache_buckets(self) -> tuple[CacheBucket, ...]:
        """The configured cache buckets (floors ascending)."""
        return self._buckets

    @property
    def default_family(self) -> str | None:
        """Family used by ``push_request`` when ``policy_family`` is None."""
        return self._default_family

    @classmethod
    def from_config(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> DRRQueue:
        """Build from a config dict or a ``.yaml``/``.yml``/``.json`` file.

        YAML needs PyYAML (``pip install fairq[yaml]``), imported only here.
        Every invalid field raises ``ValueError`` (or ``TypeError``) naming it.
        """
        if isinstance(source, Mapping):
            cfg: Any = source
        else:
            path = os.fspath(source)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if path.endswith(".json"):
                cfg = json.loads(text)
            else:
                try:
                    import yaml
                except ImportError as e:  # pragma: no cover - depends on env
                    raise ImportError(
                        "reading YAML policy configs needs PyYAML: pip install 'fairq[yaml]'"
                    ) from e
                cfg = yaml.safe_load(text)
        return cls._from_dict(cfg)

    @classmethod
    def _from_dict(cls, cfg: Any) -> DRRQueue:
        if not isinstance(cfg, Mapping):
            raise TypeError(f"policy config must be a mapping, got {type(cfg).__name__}")
        for k in cfg:
            if k not in _TOP_KEYS:
                raise ValueError(f"unknown policy config field {k!r} (known: {sorted(_TOP_KEYS)})")
        raw_classes = cfg.get("policy_classes")
        if not isinstance(raw_classes, list) or not raw_classes:
            raise ValueError(f"policy_classes must be a non-empty list, got {raw_classes!r}")
        classes = []
        for i, rc in enumerate(raw_classes):
            f = f"policy_classes[{i}]"
            if not isinstance(rc, Mapping):
                raise ValueError(f"{f} must be a mapping, got {rc!r}")
            for k in rc:
                if k not in _CLASS_KEYS:
                    raise ValueError(f"{f}: unknown field {k!r} (known: {sorted(_CLASS_KEYS)})")
            name = _check_name(f"{f}.name", rc.get("name"))
            q = rc.get("quantum")
            if not isinstance(q, int) or isinstance(q, bool) or q <= 0:
                raise ValueError(f"{f}.quantum must be an integer > 0, got {q!r}")
            order = rc.get("queue_policy", "fcfs")
            if not isinstance(order, str) or order not in _ORDERS:
                raise ValueError(f"{f}.queue_policy must be 'fcfs' or 'wspt', got {order!r}")
            fam = rc.get("policy_family")
            if fam is not None:
                _check_name(f"{f}.policy_family", fam)
            bucket = rc.get("cache_bucket")
            if bucket is not None:
                _check_name(f"{f}.cache_bucket", bucket)
                if fam is None:
                    raise ValueError(f"{f}.cache_bucket {bucket!r} needs a policy_family")
            mr = _check_limit(f"{f}.max_queued_requests", rc.get("max_queued_requests"))
            mt = _check_limit(f"{f}.max_queued_tokens", rc.get("max_queued_tokens"))
            classes.append(PolicyClass(name, q, order, fam, bucket, mr, mt))
        raw_b = cfg.get("cache_buckets") or []
        if not isinstance(raw_b, list):
            raise ValueError(f"cache_buckets must be a list, got {raw_b!r}")
        buckets = []
        for i, rb in enumerate(raw_b):
            if not isinstance(rb, Mapping) or set(rb) != {"name", "min_tokens"}:
                raise ValueError(
                    f"cache_buckets[{i}] must be a mapping with name and min_tokens, got {rb!r}"
                )
            buckets.append(CacheBucket(rb["name"], rb["min_tokens"]))
        return cls(classes, cache_buckets=buckets, default_family=cfg.get("default_family"))

    def classify(self, policy_family: str | None, uncached_tokens: int) -> str:
        """Class name for a request of ``policy_family`` with exact
        ``uncached_tokens`` (highest bucket floor <= uncached)."""
        if policy_family is not None and not isinstance(policy_family, str):
            raise TypeError(
                f"policy_family must be a str or None, got {type(policy_family).__name__}"
            )
        if not _is_int(uncached_tokens):
            raise TypeError(f"uncached_tokens must be an int, got {uncached_tokens!r}")
        if uncached_tokens < 0:
            raise ValueError(f"uncached_tokens must be an integer >= 0, got {uncached_tokens!r}")
        fam = policy_family if policy_family is not None else self._default_family
        if fam is None:
            if "default" in self.class_names and not self._routes:
                return "default"
            raise ValueError("policy_family is required: no default_family is configured, got None")
        routes = self._routes.get(fam)
        if routes is None:
            raise KeyError(
                f"policy_family {fam!r} is not configured (known: {sorted(self._routes)})"
            )
        if not self._buckets:
            return routes[None]
        bucket = self._buckets[0].name
        for b in self._buckets:
            if b.min_tokens <= uncached_tokens:
                bucket = b.name
            else:
                break
        return routes[bucket]

    def push_request(
        self,
        item: Any,
        policy_family: str | None = None,
        raw_isl_tokens: int = 0,
        cached_tokens: int = 0,
        *,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int:
        """Snapshot ``uncached = raw_isl_tokens - cached_tokens``, classify by
        family and exact uncached tokens, and enqueue at cost ``max(1, uncached)``.
        Returns the ticket. Errors leave the queue unchanged."""
        for field, v in (("raw_isl_tokens", raw_isl_tokens), ("cached_tokens", cached_tokens)):
            if not _is_int(v):
                raise TypeError(f"{field} must be an int, got {v!r}")
            if v < 0:
                raise ValueError(f"{field} must be an integer >= 0, got {v!r}")
        if cached_tokens > raw_isl_tokens:
            raise ValueError(
                f"cached_tokens ({cached_tokens}) must not exceed raw_isl_tokens ({raw_isl_tokens})"
            )
        if isinstance(priority_jump, float) and math.isnan(priority_jump):
            raise ValueError("priority_jump must be a number >= 0, got NaN")
        name = self.classify(policy_family, raw_isl_tokens - cached_tokens)
        ticket: int = self._push_snapshot(
            item,
            name,
            raw_isl_tokens,
            cached_tokens,
            strict_priority=strict_priority,
            priority_jump=priority_jump,
            arrival=arrival,
        )
        return ticket

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{c.name}(q={c.quantum}, {c.order}, depth={self.depth(c.name)})" for c in self._classes
        )
        return f"DRRQueue([{parts}], len={len(self)})"
