"""fairq's serving simulator: continuous-batching workers with a prefix
cache, a local scheduler each, and a dispatcher across them.

>>> from fairq.sim import SimConfig, make_workload, simulate, summarize
>>> wl = make_workload("qa", misbehave="S1", duration=5.0)
>>> m = summarize(simulate(wl, SimConfig(workers=1, policy="dlpm")))

``fairq simulate`` (:mod:`fairq.sim.cli`) runs the paper's comparison.
"""

from __future__ import annotations

from typing import Any

from fairq.sim.config import LOCAL_POLICIES, MEMORY_MODELS, SimConfig
from fairq.sim.engine import Simulator, simulate
from fairq.sim.metrics import (
    deprecated_name,
    jain_index,
    jain_on_demand,
    max_backlogged_gap,
    max_min_shares,
    percentile,
    service_over_time,
    summarize,
)
from fairq.sim.model import PRESETS, StepModel
from fairq.sim.workloads import (
    SimRequest,
    TraceError,
    Workload,
    load_trace,
    make_workload,
    parse_trace,
)

__all__ = [
    "LOCAL_POLICIES",
    "MEMORY_MODELS",
    "PRESETS",
    "SimConfig",
    "SimRequest",
    "Simulator",
    "StepModel",
    "TraceError",
    "Workload",
    "jain_index",
    "jain_on_demand",
    "load_trace",
    "make_workload",
    "max_backlogged_gap",
    "max_min_shares",
    "parse_trace",
    "percentile",
    "service_over_time",
    "simulate",
    "summarize",
]


def __getattr__(name: str) -> Any:
    return deprecated_name(__name__, name)  # jain -> jain_index
