"""Step-time model fitting (pure Python + numpy).

The simulator models one engine step with the linear model of
:mod:`fairq.sim.model` (``t = c0 + c_prefill * prefill_tokens + c_decode *
batch_size + c_kv * kv_tokens_read``). ``fit_step_time`` finds the constants
by least squares on measured steps so the simulator's defaults can be
calibrated against a real engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from fairq.sim.fit import nnls
from fairq.sim.model import STEP_COSTS, step_time


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


@dataclass(frozen=True)
class StepTimeModel:
    """Fitted ``t = c0 + c_prefill*P + c_decode*B + c_kv*K`` (seconds)."""

    c0: float
    c_prefill: float
    c_decode: float
    c_kv: float
    r2: float
    n_steps: int

    def predict(self, prefill_tokens: float, batch_size: float, kv_tokens_read: float) -> float:
        """Predicted step time in seconds (:func:`fairq.sim.model.step_time`)."""
        return step_time(self, prefill_tokens, batch_size, kv_tokens_read)

    def as_dict(self) -> dict[str, float]:
        """Plain dict (for JSON)."""
        return {k: float(v) for k, v in asdict(self).items()}

    def simulate_args(self) -> str:
        """The ``fairq simulate`` options that use these constants."""
        return " ".join(f"--model {k}={getattr(self, k):.6g}" for k in STEP_COSTS)


def fit_step_time(samples: Sequence[StepSample], nonnegative: bool = True) -> StepTimeModel:
    """Least-squares fit of the step-time constants.

    Needs at least 4 steps. With ``nonnegative`` (default) every constant is
    constrained to be >= 0 (exact NNLS over column subsets), as the simulator
    requires; otherwise plain least squares (minimum-norm when the steps never
    vary in some column, e.g. no prefill at all).

    Raises:
        ValueError: fewer than 4 samples, or a non-finite / negative value.
    """
    if len(samples) < 4:
        raise ValueError(f"samples: need at least 4 measured steps to fit, got {len(samples)}")
    rows = []
    ys = []
    for i, s in enumerate(samples):
        values = (s.seconds, s.prefill_tokens, s.batch_size, s.kv_tokens_read)
        if any(not math.isfinite(float(v)) or float(v) < 0 for v in values):
            raise ValueError(f"samples[{i}]: values must be finite and >= 0, got {s!r}")
        rows.append((1.0, float(s.prefill_tokens), float(s.batch_size), float(s.kv_tokens_read)))
        ys.append(float(s.seconds))
    a = np.asarray(rows, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if nonnegative:
        # the one exact NNLS of the step-model fits (fairq.sim.fit)
        coef = nnls(a, y)
    else:
        # scaled so the solve is well conditioned (token counts dwarf the intercept)
        scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
        coef_scaled, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
        coef = coef_scaled / scale
    pred = a @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    c0, cp, cd, ck = (float(c) for c in coef)
    return StepTimeModel(c0, cp, cd, ck, r2, len(samples))
