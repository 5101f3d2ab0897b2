"""fairq on Ray Serve (``pip install '.[ray]'``): D2LPM as a request router.

Quick start::

    from ray import serve
    from fairq.ray import ReplicaFeedback, fairq_router_config

    @serve.deployment(
        num_replicas=4,
        max_ongoing_requests=256,  # replicas queue fairly inside (their local scheduler)
        request_router_config=fairq_router_config(worker_quantum=4096),
    )
    class Engine:
        def __init__(self):
            self.feedback = ReplicaFeedback()

        async def __call__(self, body: dict) -> dict:
            out = ...  # run the engine (vLLM with fairq's scheduler, transformers, ...)
            self.feedback.record_finish(output_tokens=len(out))
            return {"text": out}

        def record_routing_stats(self) -> dict:
            return self.feedback.routing_stats()

Pieces:

- :class:`FairqD2LPMRouter` (:mod:`.router`): the ``RequestRouter`` subclass;
- :func:`fairq_router_config`: a validated ``RequestRouterConfig`` for it;
- :class:`RouterOptions` (:mod:`.options`): its options;
- :mod:`.extract`: tenant and prompt-token extractors for OpenAI-style bodies;
- :class:`ReplicaFeedback` (:mod:`.feedback`): finishes and evictions, replica side;
- :mod:`.engine`: a replica running transformers' continuous batching with
  ``fairq-dlpm`` (tests, ``fairq ray-bench``).

Only :class:`FairqD2LPMRouter` and :func:`fairq_router_config` import Ray.
"""

from __future__ import annotations

from typing import Any

from fairq.ray.extract import (
    PAGE_BYTES,
    default_tenant,
    default_tokens,
    text_to_pseudo_tokens,
)
from fairq.ray.feedback import FEEDBACK_KEY, ReplicaFeedback
from fairq.ray.options import RouterOptions

#: The router class as Ray's ``request_router_class`` import path.
ROUTER_PATH = "fairq.ray.router:FairqD2LPMRouter"

__all__ = [
    "FEEDBACK_KEY",
    "PAGE_BYTES",
    "ROUTER_PATH",
    "FairqD2LPMRouter",
    "ReplicaFeedback",
    "RouterOptions",
    "default_tenant",
    "default_tokens",
    "fairq_router_config",
    "text_to_pseudo_tokens",
]


def fairq_router_config(*, request_routing_stats_period_s: float = 1.0, **options: Any) -> Any:
    """A ``ray.serve.config.RequestRouterConfig`` that routes with D2LPM.

    ``options`` are :class:`RouterOptions` fields, validated here, in the
    caller's process (an error names the field) rather than later inside
    each router. ``request_routing_stats_period_s`` is how often replicas
    report finishes and evictions (the feedback delay; Ray's default is 10 s).
    """
    from ray.serve.config import RequestRouterConfig

    RouterOptions(**options)
    config: dict[str, Any] = {
        "request_router_class": ROUTER_PATH,
        "request_router_kwargs": dict(options),
        "request_routing_stats_period_s": request_routing_stats_period_s,
    }
    return RequestRouterConfig(**config)


def __getattr__(name: str) -> Any:
    if name == "FairqD2LPMRouter":
        from fairq.ray.router import FairqD2LPMRouter

        globals()[name] = FairqD2LPMRouter
        return FairqD2LPMRouter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
