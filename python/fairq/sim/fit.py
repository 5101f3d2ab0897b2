"""Fit the step-time model (:mod:`fairq.sim.model`) to measured engine steps.

Pure numpy: the measurement lives with the engine benches
(:mod:`fairq.enginebench.stepfit` runs vLLM's engine and records each step);
this module takes its steps and returns the constants of

* the **linear** model: ``t = c0 + c_prefill * P + c_decode * B + c_kv * K +
  c_attn * A`` (``c_weights`` folded into ``c0``), and
* the **roofline** model: ``t = c0 + max(c_weights + c_kv * K, c_prefill * P
  + c_decode * B + c_attn * A)``,

where ``P`` are the prefill tokens computed in the step, ``B`` the decoding
requests, ``K`` the KV tokens those decodes read (their context lengths) and
``A`` the causal (query, key) pairs of the prefill chunks
(:func:`fairq.sim.model.attn_pairs`).

Both fits are non-negative least squares (every constant >= 0, as
:class:`~fairq.sim.model.StepModel` requires) of the *relative* error by
default: each step's row is divided by its measured time, so a 2 ms decode
step counts as much as a 200 ms prefill and the fit minimises what the error
report states (absolute percentage error). NNLS is exact: the optimum is an
unconstrained least-squares solution on some subset of the columns with all
coefficients >= 0, and with at most 6 constants every subset is tried.

The roofline model is piecewise linear; :func:`fit_roofline` alternates:
given which side of the ``max`` each step is on, the model is linear (NNLS);
given the constants, each step goes to its larger side; repeated from
several starting assignments until the assignment stops changing, keeping
the constants with the smallest true (``max``) loss.

:func:`holdout` is the error report: the design points are split into two
interleaved halves (every other point in measurement order, so both halves
span the design), each half is fitted and evaluated on the other, and the
absolute percentage errors of both are pooled (median, p90, max).

:func:`fit_step_time` is the four-constant form (``t = c0 + c_prefill * P +
c_decode * B + c_kv * K``, plain NNLS of the absolute error) that ``fairq
engine-bench --engine transformers`` fits to the steps fairq's transformers
schedulers record (:class:`StepTimeModel`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any, Protocol

import numpy as np

from fairq.sim.model import STEP_COSTS, StepModel, step_time

__all__ = [
    "LINEAR_TERMS",
    "ROOFLINE_TERMS",
    "Step",
    "ErrorReport",
    "nnls",
    "fit_linear",
    "fit_roofline",
    "predict",
    "errors",
    "split_halves",
    "holdout",
    "fit_report",
    "as_model",
    "MeasuredStep",
    "StepTimeModel",
    "fit_step_time",
]

#: The constants each form fits (``c_weights`` only exists in the roofline form).
LINEAR_TERMS = ("c0", "c_prefill", "c_decode", "c_kv", "c_attn")
ROOFLINE_TERMS = ("c0", "c_weights", "c_kv", "c_prefill", "c_decode", "c_attn")


@dataclass(frozen=True)
class Step:
    """One measured engine step (or the median of repeats of one shape).

    ``prefill_tokens``: prompt tokens computed; ``batch_size``: requests
    decoding one token; ``kv_tokens_read``: their context tokens;
    ``attn_pairs``: causal (query, key) pairs of the prefill chunks;
    ``seconds``: the step's wall time. ``label``: the design point it
    measures (free text, for reports)."""

    prefill_tokens: int
    batch_size: int
    kv_tokens_read: int
    attn_pairs: int
    seconds: float
    label: str = ""

    def __post_init__(self) -> None:
        for name in ("prefill_tokens", "batch_size", "kv_tokens_read", "attn_pairs", "seconds"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"Step.{name} must be a finite number >= 0, got {v!r}")
        if self.seconds <= 0:
            raise ValueError(f"Step.seconds must be > 0, got {self.seconds!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``argmin ||a x - y||`` subject to ``x >= 0``, exactly, by trying the
    least-squares solution on every subset of columns (for the few columns
    of a step model: 2^6 - 1 solves). Columns are scaled to unit maximum
    first (token counts dwarf the intercept); an all-zero column gets 0."""
    a = np.asarray(a, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = a.shape[1]
    scale = np.abs(a).max(axis=0)
    live = [j for j in range(n) if scale[j] > 0]
    a_s = a[:, live] / scale[live]
    best_res = float(np.sum(y**2))  # x = 0
    best = np.zeros(len(live))
    for k in range(1, len(live) + 1):
        for cols in combinations(range(len(live)), k):
            sub, *_ = np.linalg.lstsq(a_s[:, cols], y, rcond=None)
            if np.any(sub < 0):
                continue
            x = np.zeros(len(live))
            x[list(cols)] = sub
            res = float(np.sum((y - a_s @ x) ** 2))
            # strictly better, relative to the best so far (an absolute
            # floor would hide every fit of data below ~3e-8 s)
            if res < best_res - 1e-15 * best_res:
                best_res, best = res, x
    out = np.zeros(n)
    out[live] = best / scale[live]
    return out


def _columns(steps: Sequence[Step]) -> tuple[np.ndarray, ...]:
    p = np.array([s.prefill_tokens for s in steps], dtype=np.float64)
    b = np.array([s.batch_size for s in steps], dtype=np.float64)
    k = np.array([s.kv_tokens_read for s in steps], dtype=np.float64)
    a = np.array([s.attn_pairs for s in steps], dtype=np.float64)
    y = np.array([s.seconds for s in steps], dtype=np.float64)
    return p, b, k, a, y


def _solve(design: np.ndarray, y: np.ndarray, relative: bool) -> np.ndarray:
    w = 1.0 / y if relative else np.ones_like(y)
    return nnls(design * w[:, None], y * w)


def _need(steps: Sequence[Step], k: int) -> None:
    if len(steps) < k:
        raise ValueError(f"need at least {k} measured steps to fit, got {len(steps)}")


def fit_linear(steps: Sequence[Step], *, relative: bool = True) -> dict[str, float]:
    """The linear model's constants (:data:`LINEAR_TERMS`), NNLS; ``relative``:
    minimise squared relative error (default), else squared seconds."""
    _need(steps, 2)
    p, b, k, a, y = _columns(steps)
    design = np.column_stack([np.ones_like(y), p, b, k, a])
    coef = _solve(design, y, relative)
    return {name: float(c) for name, c in zip(LINEAR_TERMS, coef, strict=True)}


def _roofline_sides(
    c: Mapping[str, float], p: np.ndarray, b: np.ndarray, k: np.ndarray, a: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(memory, compute) of each step under the roofline constants ``c``."""
    memory = c["c_weights"] + c["c_kv"] * k
    compute = c["c_prefill"] * p + c["c_decode"] * b + c["c_attn"] * a
    return memory, compute


def fit_roofline(
    steps: Sequence[Step], *, relative: bool = True, max_iter: int = 50
) -> dict[str, float]:
    """The roofline model's constants (:data:`ROOFLINE_TERMS`) by alternating
    assignment (module doc): NNLS with each step on one side of the ``max``,
    then each step moved to its larger side, until nothing moves (at most
    ``max_iter`` rounds per start). Starts: every step memory-bound, every
    step compute-bound, steps with prefill compute-bound and the rest
    memory-bound, and the sides the linear fit's terms say."""
    _need(steps, 2)
    p, b, k, a, y = _columns(steps)
    ones = np.ones_like(y)
    w = 1.0 / y if relative else ones

    def loss(c: Mapping[str, float]) -> float:
        mem, comp = _roofline_sides(c, p, b, k, a)
        return float(np.sum(((c["c0"] + np.maximum(mem, comp) - y) * w) ** 2))

    lin = fit_linear(steps, relative=relative)
    lin_mem = lin["c_kv"] * k
    lin_comp = lin["c_prefill"] * p + lin["c_decode"] * b + lin["c_attn"] * a
    starts = [
        np.ones_like(y, dtype=bool),
        np.zeros_like(y, dtype=bool),
        p == 0,
        lin_mem >= lin_comp,
    ]
    best: tuple[float, dict[str, float]] | None = None
    for mem_side in starts:
        seen: set[bytes] = set()
        for _ in range(max_iter):
            m = mem_side.astype(np.float64)
            design = np.column_stack([ones, m, m * k, (1 - m) * p, (1 - m) * b, (1 - m) * a])
            coef = _solve(design, y, relative)
            c = {name: float(v) for name, v in zip(ROOFLINE_TERMS, coef, strict=True)}
            cur = loss(c)
            if best is None or cur < best[0]:
                best = (cur, c)
            seen.add(mem_side.tobytes())
            mem, comp = _roofline_sides(c, p, b, k, a)
            nxt = mem >= comp
            if nxt.tobytes() in seen:
                break
            mem_side = nxt
    assert best is not None
    return best[1]


def as_model(costs: Mapping[str, float], *, roofline: bool, **limits: int) -> StepModel:
    """A :class:`StepModel` with the fitted ``costs`` (missing ones 0) and the
    engine's ``limits`` (``kv_capacity``, ``prefill_budget``, ``max_running``)."""
    kw: dict[str, Any] = dict.fromkeys(("c_weights", "c_attn"), 0.0)
    kw.update({k: float(v) for k, v in costs.items()})
    return StepModel(roofline=int(roofline), **kw, **limits)


def predict(model: Any, steps: Sequence[Step]) -> np.ndarray:
    """Each step's time under ``model`` (:func:`fairq.sim.model.step_time`)."""
    return np.array(
        [
            step_time(model, s.prefill_tokens, s.batch_size, s.kv_tokens_read, s.attn_pairs)
            for s in steps
        ],
        dtype=np.float64,
    )


@dataclass(frozen=True)
class ErrorReport:
    """Absolute percentage errors of predicted step times (percent)."""

    n: int
    median_ape: float
    p90_ape: float
    max_ape: float
    #: mean signed error (percent): > 0, the model predicts slower steps
    bias: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def errors(
    predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray
) -> ErrorReport:
    """The error report of ``predicted`` against ``measured`` seconds:
    ``100 |pred - meas| / meas`` per step; median and p90 linearly
    interpolated (numpy's default percentile)."""
    pred = np.asarray(predicted, dtype=np.float64)
    meas = np.asarray(measured, dtype=np.float64)
    if pred.shape != meas.shape or pred.size == 0:
        raise ValueError("predicted and measured must be non-empty and of the same length")
    if np.any(meas <= 0):
        raise ValueError("measured step times must be > 0")
    rel = 100.0 * (pred - meas) / meas
    ape = np.abs(rel)
    return ErrorReport(
        n=int(ape.size),
        median_ape=float(np.median(ape)),
        p90_ape=float(np.percentile(ape, 90)),
        max_ape=float(ape.max()),
        bias=float(rel.mean()),
    )


def split_halves(steps: Sequence[Step]) -> tuple[list[Step], list[Step]]:
    """Every other step (in the given order: the design's order): indices
    0, 2, 4... and 1, 3, 5..."""
    return list(steps[0::2]), list(steps[1::2])


FitFn = Callable[[Sequence[Step]], Mapping[str, float]]


def holdout(steps: Sequence[Step], fit: FitFn, *, roofline: bool) -> ErrorReport:
    """Two-fold held-out error: fit on one half (:func:`split_halves`),
    predict the other, and the other way round; both halves' errors pooled."""
    a, b = split_halves(steps)
    pred: list[float] = []
    meas: list[float] = []
    for train, test in ((a, b), (b, a)):
        model = as_model(fit(train), roofline=roofline)
        pred += list(predict(model, test))
        meas += [s.seconds for s in test]
    return errors(pred, meas)


def fit_report(steps: Sequence[Step], *, relative: bool = True) -> dict[str, Any]:
    """Both forms: constants fitted on all steps, their in-sample error, the
    two-fold held-out error, and each step's prediction (JSON-ready)."""
    out: dict[str, Any] = {}
    forms: tuple[tuple[str, FitFn, bool], ...] = (
        ("linear", lambda s: fit_linear(s, relative=relative), False),
        ("roofline", lambda s: fit_roofline(s, relative=relative), True),
    )
    for name, fit, roof in forms:
        costs = dict(fit(steps))
        model = as_model(costs, roofline=roof)
        pred = predict(model, steps)
        out[name] = {
            "constants": costs,
            "in_sample": errors(pred, [s.seconds for s in steps]).as_dict(),
            "held_out": holdout(steps, fit, roofline=roof).as_dict(),
            "predicted_s": [float(x) for x in pred],
        }
    return out


class MeasuredStep(Protocol):
    """What :func:`fit_step_time` reads of a measured step (a transformers
    scheduler's :class:`fairq.transformers.fit.StepSample`, or a
    :class:`Step`)."""

    @property
    def seconds(self) -> float: ...
    @property
    def prefill_tokens(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def kv_tokens_read(self) -> int: ...


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


def fit_step_time(samples: Sequence[MeasuredStep], nonnegative: bool = True) -> StepTimeModel:
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
