"""pytest plugin: run vLLM's own scheduler tests with fairq's scheduler classes.

Loaded with ``-p fairq_plugin`` (this folder on ``sys.path``) when pytest runs
vLLM's ``tests/v1/core/test_scheduler.py`` from the pinned release. Before any
test module imports them, vLLM's ``Scheduler`` and ``AsyncScheduler`` names are
replaced by ``fairq.vllm.scheduler.FairqScheduler`` and ``FairqAsyncScheduler``
(subclasses of the originals), so every scheduler the tests build is fairq's.
With ``FAIRQ_VLLM_POLICY`` unset the queues follow the policy each test
configures (vLLM's ``fcfs`` or ``priority``), as in a real deployment.
"""

from __future__ import annotations

import vllm.v1.core.sched.async_scheduler as _async_mod
import vllm.v1.core.sched.scheduler as _sched_mod

from fairq.vllm import scheduler as _fairq

_sched_mod.Scheduler = _fairq.FairqScheduler  # type: ignore[misc]
_async_mod.AsyncScheduler = _fairq.FairqAsyncScheduler  # type: ignore[misc]

_replaced: list[str] = []
_original_replace = _fairq.replace_queues


def _counting_replace(scheduler: object, policy: object, **options: object) -> list[str]:
    out = _original_replace(scheduler, policy, **options)  # type: ignore[arg-type]
    _replaced.append(f"{type(scheduler).__name__}:{getattr(policy, 'value', policy)}")
    return out


_fairq.replace_queues = _counting_replace  # type: ignore[assignment]


def pytest_terminal_summary(terminalreporter: object) -> None:
    """One line the fairq test reads: how many schedulers got fairq queues."""
    kinds = sorted(set(_replaced))
    print(f"\nFAIRQ-SCHEDULERS {len(_replaced)} {' '.join(kinds)}")
