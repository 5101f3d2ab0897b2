"""fairq: fair, prefix-aware request scheduling for LLM serving.

Hot paths (heaps, the deficit ring, the radix tree, per-client counters) live
in the Rust extension ``fairq._core``; this package holds configuration,
validation, integrations and orchestration.

Public names are imported lazily so ``import fairq`` stays cheap and optional
extras (YAML, matplotlib, transformers) load only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairq._core import QueueFull, policies
from fairq._core import __version__ as __version__
from fairq._lazy import lazy_attributes
from fairq._moved import install as _install_moved

# name -> module that defines it. Each feature module owns its names.
_LAZY: dict[str, str] = {
    # Deficit Round Robin across policy classes (fairq.drr)
    "DRRQueue": "fairq.drr",
    "PolicyClass": "fairq.drr",
    "CacheBucket": "fairq.drr",
    # Weighted Fair Queuing and the dual-phase queue
    "WFQQueue": "fairq.wfq",
    "DualPhaseQueue": "fairq.dualphase",
    "DualPhaseCollector": "fairq.dualphase",
    # Prefix cache model and local schedulers
    "RadixTree": "fairq.radix",
    "LocalScheduler": "fairq.sched",
    "PolicyInfo": "fairq.sched",
    "FCFS": "fairq.sched",
    "LPM": "fairq.sched",
    "VTC": "fairq.sched",
    "DLPM": "fairq.sched",
    "Admission": "fairq.sched",
    "make_scheduler": "fairq.sched",
    "StateField": "fairq.sched",
    "Scheduler": "fairq.sched",
    # Distributed dispatch
    "Dispatcher": "fairq.dispatch",
    "make_dispatcher": "fairq.dispatch",
    "D2LPM": "fairq.dispatch",
    "RoundRobin": "fairq.dispatch",
    "LeastLoaded": "fairq.dispatch",
    "ClientRoundRobin": "fairq.dispatch",
    "PrefixAffinity": "fairq.dispatch",
    "FirstPlacement": "fairq.dispatch",
}

# every registered local policy's class (``fairq.LAS`` ...), from the core's registry
_LAZY.update({p["class_name"]: "fairq._core" for p in policies() if p["class_name"] not in _LAZY})

_install_moved()  # old module paths (fairq.integrations.ray ...) keep importing

__all__ = ["QueueFull", "__version__", *sorted(_LAZY)]


__getattr__, __dir__ = lazy_attributes("fairq", _LAZY, globals())


if TYPE_CHECKING:  # pragma: no cover - type checkers see the real names
    from fairq.dispatch import D2LPM as D2LPM
    from fairq.dispatch import ClientRoundRobin as ClientRoundRobin
    from fairq.dispatch import Dispatcher as Dispatcher
    from fairq.dispatch import FirstPlacement as FirstPlacement
    from fairq.dispatch import LeastLoaded as LeastLoaded
    from fairq.dispatch import PrefixAffinity as PrefixAffinity
    from fairq.dispatch import RoundRobin as RoundRobin
    from fairq.dispatch import make_dispatcher as make_dispatcher
    from fairq.drr import CacheBucket as CacheBucket
    from fairq.drr import DRRQueue as DRRQueue
    from fairq.drr import PolicyClass as PolicyClass
    from fairq.dualphase import DualPhaseCollector as DualPhaseCollector
    from fairq.dualphase import DualPhaseQueue as DualPhaseQueue
    from fairq.radix import RadixTree as RadixTree
    from fairq.sched import DLPM as DLPM
    from fairq.sched import FCFS as FCFS
    from fairq.sched import LPM as LPM
    from fairq.sched import VTC as VTC
    from fairq.sched import Admission as Admission
    from fairq.sched import LocalScheduler as LocalScheduler
    from fairq.sched import PolicyInfo as PolicyInfo
    from fairq.sched import Scheduler as Scheduler
    from fairq.sched import StateField as StateField
    from fairq.sched import make_scheduler as make_scheduler
    from fairq.wfq import WFQQueue as WFQQueue
