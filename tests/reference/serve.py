"""A Ray Serve request router built as Ray's own router unit tests build
theirs: no cluster, Ray's fake deployment, no backoff to speak of
(tests/test_ray_router.py, tests/test_ray_ingress.py). Needs Ray Serve and
httpx (Ray's test utilities import it); callers skip without them."""

from __future__ import annotations

from typing import Any, TypeVar

from ray.serve._private.common import DeploymentHandleSource
from ray.serve._private.test_utils import FAKE_REPLICA_DEPLOYMENT_ID

R = TypeVar("R")


def new_router(cls: type[R], strict: bool = False) -> R:
    """``cls`` (a ``RequestRouter`` subclass) for Ray's fake deployment, as a
    replica's handle holds it; ``strict``: Ray's replica queue-length cache.
    Build it inside a running event loop (Serve does)."""
    kwargs: dict[str, Any] = dict(
        deployment_id=FAKE_REPLICA_DEPLOYMENT_ID,
        handle_source=DeploymentHandleSource.REPLICA,
        self_actor_id="fake-actor-id",
        self_actor_handle=None,
        use_replica_queue_len_cache=strict,
        initial_backoff_s=0.001,
        backoff_multiplier=1,
        max_backoff_s=0.001,
    )
    return cls(**kwargs)
