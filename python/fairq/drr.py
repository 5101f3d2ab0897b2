"""Deficit Round Robin across policy classes (ALGORITHMS.md section 2),
configured by NVIDIA Dynamo's router policy files.

:class:`DRRQueue` decides which *policy class* dispatches next with DRR and
lets each class's FCFS or WSPT heap (after strict-priority tiers) decide which
request inside it. Everything runs in the Rust core (``fairq._core._DRRCore``):
configuration resolution and validation, classification (family x uncached
bucket), limits, load-based dispatchability and the arbitration. This module
only reads files (JSON, or YAML with the ``yaml`` extra) and offers the
:class:`PolicyClass` / :class:`CacheBucket` objects.

Dynamo's schema (``lib/kv-router/src/scheduling/policy_config.rs``)::

    default_policy_family: standard      # these three together, or none
    uncached_isl_buckets:                # floors start at 0, strictly increasing
      - {min_tokens: 0, bucket: cached}
      - {min_tokens: 2048, bucket: uncached}
    policy_classes:                      # ring order
      - name: std-cached                 # [A-Za-z0-9_.-]+, unique
        policy_family: standard          # family and bucket, or neither
        cache_bucket: cached             #   (neither: an explicit class)
        queue_policy: wspt               # fcfs (default) | wspt
        quantum: 2048                    # integer > 0
        prefill_busy_threshold: 8192     # optional: busy above this many tokens
        prefill_busy_threshold_frac: 4.0 # optional: ... or above frac * max_num_batched_tokens
        busy_worker_ratio: 0.9           # optional: pool busy once 90% of workers are
        request_queue_limit_per_worker: 64          # optional limits, x num_workers
        raw_isl_token_queue_limit_per_worker: 65536
        cached_token_queue_limit_per_worker: 65536
    models:                              # optional: replaces the root for that model
      my-model: {default_policy_family: ..., uncached_isl_buckets: [...], policy_classes: [...]}

See ``examples/dynamo-policy.yaml``. fairq's earlier schema
(``default_family``, ``cache_buckets`` with ``name``, ``max_queued_requests``,
``max_queued_tokens``; ``examples/policy-classes.yaml``) keeps working; a
document mixing both is rejected with the renames that migrate it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from fairq._core import _drr_check_class, _DRRCore

__all__ = ["DRRQueue", "PolicyClass", "CacheBucket"]


@dataclass(frozen=True)
class PolicyClass:
    """One physical policy class (validated by the Rust core at construction).

    ``quantum``: credit (uncached tokens) earned per DRR ring visit, integer > 0.
    ``order``: within-class order, ``"fcfs"`` (earlier ``arrival -
    priority_jump`` first) or ``"wspt"`` (larger ``(1 + priority_jump) /
    cost`` first); strict-priority tiers always come first.
    ``policy_family`` / ``cache_bucket``: where ``push_request`` routes.
    ``prefill_busy_threshold`` / ``prefill_busy_threshold_frac`` /
    ``busy_worker_ratio``: when the class's worker pool counts as busy (see
    ``DRRQueue.pop``). ``*_per_worker`` limits are multiplied by the queue's
    ``num_workers`` and refuse a push once usage has reached them (Dynamo's
    rule); ``max_queued_requests`` / ``max_queued_tokens`` are absolute and
    refuse a push that would exceed them. A refused push raises
    :class:`fairq.QueueFull` and enqueues nothing.
    """

    name: str
    quantum: int
    order: str = "fcfs"
    policy_family: str | None = None
    cache_bucket: str | None = None
    max_queued_requests: int | None = None
    max_queued_tokens: int | None = None
    prefill_busy_threshold: int | None = None
    prefill_busy_threshold_frac: float | None = None
    busy_worker_ratio: float | None = None
    request_queue_limit_per_worker: int | None = None
    raw_isl_token_queue_limit_per_worker: int | None = None
    cached_token_queue_limit_per_worker: int | None = None

    def __post_init__(self) -> None:
        _drr_check_class(self._as_config())

    def _as_config(self) -> dict[str, Any]:
        """The class as a config mapping (``order`` is ``queue_policy`` there)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out["queue_policy" if f.name == "order" else f.name] = v
        return out


@dataclass(frozen=True)
class CacheBucket:
    """A cache bucket: requests with ``uncached_tokens >= min_tokens`` (and
    below the next floor) belong to it."""

    name: str
    min_tokens: int


def _read(source: str | os.PathLike[str]) -> Any:
    """The document in a ``.json`` file, else YAML; a malformed file is a
    ``ValueError`` naming the file and the line (``path:line: ...``)."""
    path = os.fspath(source)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - depends on env
        from fairq.extras import missing

        raise missing("yaml", "reading YAML policy configs", e) from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(e, "problem", None) or str(e)
        raise ValueError(f"{where}: not valid YAML ({problem})") from None


class DRRQueue(_DRRCore):
    """Deficit Round Robin queue across policy classes.

    ``DRRQueue(classes, *, cache_buckets=None, default_family=None,
    num_workers=1)`` with :class:`PolicyClass` objects in ring order (fairq's
    schema); with no classes a single synthetic ``default`` class (FCFS,
    quantum 1) makes it an ordinary single queue. ``DRRQueue.from_config``
    reads Dynamo's schema (or fairq's). Items are arbitrary Python objects.

    Core methods (Rust): ``push(item, class_name, cost, strict_priority=0,
    priority_jump=0.0, arrival=None) -> ticket``; ``push_request(item,
    policy_family=None, raw_isl_tokens=0, cached_tokens=0, *, ...)``
    (classifies, then pushes); ``classify(policy_family, uncached_tokens)``;
    ``pop(blocked=None, dispatchable=None, *, active_prefill_tokens=None,
    max_num_batched_tokens=None) -> (class_name, item) | None``;
    ``remove(ticket)``, ``deficit(name)``, ``depth(name)``, ``head(name)``,
    ``head_cost(name)``, ``cursor``, ``class_names``, ``num_workers``
    (settable), ``stats()``, ``len()``. ``arrival`` defaults to
    ``time.monotonic()``; ``priority_jump`` is in seconds for FCFS classes
    and a weight boost for WSPT.

    ``pop`` with ``active_prefill_tokens`` (one int per eligible worker) and
    ``max_num_batched_tokens`` (an int, or one per worker) blocks every class
    whose worker pool is busy: a worker is busy above
    ``prefill_busy_threshold`` tokens or above ``prefill_busy_threshold_frac
    * max_num_batched_tokens``; the pool is busy when all workers are (or
    ``busy_worker_ratio`` of them); no worker: not blocked. Cost O(C + R*W)
    for C classes, W workers, R distinct threshold settings in the profile.
    """

    def __new__(
        cls,
        classes: Iterable[PolicyClass] | None = None,
        *,
        cache_buckets: Iterable[CacheBucket] | None = None,
        default_family: str | None = None,
        num_workers: int = 1,
    ) -> DRRQueue:
        cl = list(classes) if classes is not None else []
        if not cl and cache_buckets is None and default_family is None:
            return cast(DRRQueue, super().__new__(cls, None, None, num_workers))
        cfg: dict[str, Any] = {"policy_classes": []}
        for i, c in enumerate(cl):
            if not isinstance(c, PolicyClass):
                raise TypeError(
                    f"policy_classes[{i}] must be a PolicyClass, got {type(c).__name__}"
                )
            cfg["policy_classes"].append(c._as_config())
        if cache_buckets is not None:
            bl = list(cache_buckets)
            for i, b in enumerate(bl):
                if not isinstance(b, CacheBucket):
                    raise TypeError(
                        f"cache_buckets[{i}] must be a CacheBucket, got {type(b).__name__}"
                    )
            cfg["cache_buckets"] = [{"name": b.name, "min_tokens": b.min_tokens} for b in bl]
        if default_family is not None:
            cfg["default_family"] = default_family
        return cast(DRRQueue, super().__new__(cls, cfg, None, num_workers))

    @classmethod
    def from_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        model: str | None = None,
        num_workers: int = 1,
    ) -> DRRQueue:
        """Build from a policy document: a mapping, or a ``.json`` /
        ``.yaml`` / ``.yml`` file (YAML needs ``pip install '.[yaml]'``); a
        malformed file is a ``ValueError`` naming the file and line.

        ``model``: use that ``models:`` profile (it replaces the root
        wholesale); a model without one gets the root profile, or the
        synthetic ``default`` class when there is no root (Dynamo's order).
        ``num_workers``: eligible workers the per-worker limits scale with.
        Every invalid field raises ``ValueError`` (or ``TypeError``) naming
        its path, e.g. ``models.llama.policy_classes[2].quantum``.
        """
        cfg: Any = source if isinstance(source, Mapping) else _read(source)
        return cast(DRRQueue, _DRRCore.__new__(cls, cfg, model, num_workers, document=True))

    def _profile_data(self) -> dict[str, Any]:
        return cast(dict[str, Any], self._profile())

    @property
    def policy_classes(self) -> tuple[PolicyClass, ...]:
        """The resolved classes in ring order."""
        return tuple(
            PolicyClass(**{k: v for k, v in c.items() if v is not None})
            for c in self._profile_data()["classes"]
        )

    @property
    def cache_buckets(self) -> tuple[CacheBucket, ...]:
        """The resolved buckets (floors ascending; empty without buckets)."""
        return tuple(CacheBucket(n, m) for n, m in self._profile_data()["buckets"])

    @property
    def default_family(self) -> str | None:
        """Family used by ``push_request`` when ``policy_family`` is None."""
        return cast("str | None", self._profile_data()["default_family"])

    @property
    def schema(self) -> str:
        """``"dynamo"`` or ``"fairq"``: which schema the profile was read from."""
        return cast(str, self._profile_data()["schema"])

    def __repr__(self) -> str:
        st = self.stats()
        parts = ", ".join(
            f"{n}(q={s['quantum']}, {s['queue_policy']}, depth={s['depth']})" for n, s in st.items()
        )
        return f"DRRQueue([{parts}], len={len(self)})"
