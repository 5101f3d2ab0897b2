"""fairq inside Hugging Face transformers' continuous batching (``fairq[engine]``).

Usage::

    from transformers import ContinuousBatchingConfig
    from fairq.transformers import register, scheduler_type

    register()  # "fairq-fcfs", "fairq-lpm", "fairq-vtc", "fairq-dlpm"
    cfg = ContinuousBatchingConfig(scheduler_type=scheduler_type("dlpm"))
    manager = model.init_continuous_batching(continuous_batching_config=cfg)
    manager.start()
    manager.add_request(prompt_ids, request_id="alice/1", max_new_tokens=32)

Clients (tenants) come from request ids (``"alice/1"`` -> ``"alice"``; see
``TenantResolver``, also named ``ClientResolver``). Options are every
engine's (``FairOptions``: the policy's own, ``tenant_weights``, ``tenant``,
``state_file``, ``state_interval_s``), given to ``register(options=...)``.
The pure-Python parts (the resolver, the options, ``StepSample``, the policy
table) import without torch; the scheduler classes import transformers on
first use.

The integration imports no bench or simulator code. The names this package
exported before they moved to their homes (the workload:
:mod:`fairq.enginebench.workload`; ``jain_index``, ``percentile``:
:mod:`fairq.sim.metrics`; ``fit_step_time``, ``StepTimeModel``:
:mod:`fairq.sim.fit`) still resolve here, imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from fairq.engineopts import POLICIES, check_policy, policy_options
from fairq.transformers.clients import ClientResolver
from fairq.transformers.fit import StepSample
from fairq.transformers.tenants import (
    FAIR_POLICIES,
    FairOptions,
    TenantResolver,
    make_options,
)

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

#: Names exported here before they moved out of the integration: where each
#: lives now (resolved on first use, so importing the integration imports
#: neither the benches nor the simulator).
_MOVED = {
    "EngineRequest": "fairq.enginebench.workload",
    "multi_client_workload": "fairq.enginebench.workload",
    "jain_index": "fairq.sim.metrics",
    "percentile": "fairq.sim.metrics",
    "StepTimeModel": "fairq.sim.fit",
    "fit_step_time": "fairq.sim.fit",
}

__all__ = [
    "FAIR_POLICIES",
    "POLICIES",
    "ClientResolver",
    "FairOptions",
    "TenantResolver",
    "make_options",
    "StepSample",
    "check_policy",
    "policy_options",
    *sorted(_ENGINE_NAMES),
]


def __getattr__(name: str) -> Any:
    if name in _ENGINE_NAMES:
        home = "fairq.transformers.scheduler"
    elif name in _MOVED:
        home = _MOVED[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _ENGINE_NAMES | set(_MOVED))
