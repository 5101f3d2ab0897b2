"""fairq inside Hugging Face transformers' continuous batching (``fairq[engine]``).

Usage::

    from transformers import ContinuousBatchingConfig
    from fairq.integrations.transformers import register, scheduler_type

    register()  # "fairq-fcfs", "fairq-lpm", "fairq-vtc", "fairq-dlpm"
    cfg = ContinuousBatchingConfig(scheduler_type=scheduler_type("dlpm"))
    manager = model.init_continuous_batching(continuous_batching_config=cfg)
    manager.start()
    manager.add_request(prompt_ids, request_id="alice/1", max_new_tokens=32)

Clients come from request ids (``"alice/1"`` -> ``"alice"``; see
``ClientResolver``). The pure-Python parts (``ClientResolver``, the workload,
``fit_step_time``, ``jain_index``, the policy table) import without torch; the
scheduler classes import transformers on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from fairq.enginebench.workload import EngineRequest, multi_client_workload
from fairq.engineopts import POLICIES, check_policy, policy_options
from fairq.integrations.transformers.clients import ClientResolver
from fairq.integrations.transformers.fit import (
    StepSample,
    StepTimeModel,
    fit_step_time,
)
from fairq.sim.metrics import jain_index, percentile

_ENGINE_NAMES = {
    "FairqScheduler",
    "ObservedFIFOScheduler",
    "EngineStats",
    "RequestRecord",
    "register",
    "running_scheduler",
    "scheduler_class",
    "scheduler_type",
    "SUPPORTED_TRANSFORMERS",
}

__all__ = [
    "POLICIES",
    "ClientResolver",
    "EngineRequest",
    "StepSample",
    "StepTimeModel",
    "check_policy",
    "fit_step_time",
    "jain_index",
    "multi_client_workload",
    "percentile",
    "policy_options",
    *sorted(_ENGINE_NAMES),
]


def __getattr__(name: str) -> Any:
    if name in _ENGINE_NAMES:
        mod = importlib.import_module("fairq.integrations.transformers.scheduler")
        value = getattr(mod, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
