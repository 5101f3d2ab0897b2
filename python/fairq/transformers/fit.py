"""One measured engine step (:class:`StepSample`), as fairq's transformers
schedulers record them (``EngineStats.steps``).

Fitting the simulator's step model to them is the simulator's business
(:func:`fairq.sim.fit.fit_step_time`); this module imports no simulator code.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StepSample"]


@dataclass(frozen=True)
class StepSample:
    """One measured engine step.

    Attributes:
        seconds: wall time of the step (schedule, forward, update).
        prefill_tokens: prompt tokens processed in the step (chunks included).
        batch_size: requests in the step.
        kv_tokens_read: KV-cache entries attended to (sum of context lengths).
    """

    seconds: float
    prefill_tokens: int
    batch_size: int
    kv_tokens_read: int
