"""The step-time fit (fairq.sim.fit) on synthetic steps from known constants,
its error report, the measurement tool's pure parts
(fairq.enginebench.stepfit without vLLM) and the fitted presets."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairq.enginebench import stepfit
from fairq.sim.fit import (
    LINEAR_TERMS,
    ROOFLINE_TERMS,
    Step,
    as_model,
    errors,
    fit_linear,
    fit_report,
    fit_roofline,
    holdout,
    nnls,
    predict,
    split_halves,
)
from fairq.sim.model import PRESETS, StepModel

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

LINEAR = StepModel(c0=4e-3, c_prefill=40e-6, c_decode=60e-6, c_kv=30e-9, c_attn=3e-9)
ROOF = StepModel(
    c0=3e-3, c_weights=2e-3, c_kv=100e-9, c_prefill=50e-6, c_decode=20e-6, c_attn=2e-9, roofline=1
)
#: relative tolerance of a fitted constant under 2 % noise (default 0.15)
TOL = {"c_attn": 0.4}


def synthetic(model: StepModel, noise: float, seed: int = 0) -> list[Step]:
    """The measurement design's shapes, timed by ``model`` with
    multiplicative Gaussian noise of relative size ``noise``."""
    rng = np.random.default_rng(seed)
    out = []
    for p in stepfit.design():
        shape = p.shape()
        t = model.step_time(*shape) * (1 + noise * rng.standard_normal())
        out.append(Step(*shape, seconds=t, label=p.label))
    return out


def close(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * want


def test_nnls_is_exact_least_squares_when_the_optimum_is_positive() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 1, (30, 4)) * [1, 1e3, 1e6, 10]
    x = np.array([0.5, 2e-3, 3e-7, 0.1])
    np.testing.assert_allclose(nnls(a, a @ x), x, rtol=1e-9)


def test_nnls_clamps_at_zero_and_handles_empty_columns() -> None:
    # y falls with the second column: unconstrained LS gives it a negative
    # weight; NNLS drops it and fits the intercept alone (the mean)
    a = np.column_stack([np.ones(4), [0.0, 1, 2, 3], np.zeros(4)])
    y = np.array([4.0, 3, 2, 1])
    x = nnls(a, y)
    np.testing.assert_allclose(x, [2.5, 0.0, 0.0], atol=1e-12)
    assert np.all(nnls(a, -y) == 0)  # nothing positive helps: x = 0


def test_linear_fit_recovers_known_constants() -> None:
    exact = fit_linear(synthetic(LINEAR, 0.0))
    for k in LINEAR_TERMS:
        assert close(exact[k], getattr(LINEAR, k), 1e-6), (k, exact[k])
    # with 2 % noise: c_attn is at most 7 % of the longest step here, so it
    # is the least determined constant
    noisy = fit_linear(synthetic(LINEAR, 0.02))
    for k in LINEAR_TERMS:
        assert close(noisy[k], getattr(LINEAR, k), TOL.get(k, 0.15)), (k, noisy[k])


def test_roofline_fit_recovers_known_constants() -> None:
    steps = synthetic(ROOF, 0.0)
    exact = fit_roofline(steps)
    # c_decode shows only in the few mixed steps on the compute side; the
    # prediction is exact either way
    for k in ROOFLINE_TERMS:
        if k != "c_decode":
            assert close(exact[k], getattr(ROOF, k), 1e-4), (k, exact[k])
    pred = predict(as_model(exact, roofline=True), steps)
    assert errors(pred, [s.seconds for s in steps]).max_ape < 1e-4
    noisy = fit_roofline(synthetic(ROOF, 0.02))
    for k in ("c0", "c_weights", "c_kv", "c_prefill", "c_attn"):
        assert close(noisy[k], getattr(ROOF, k), TOL.get(k, 0.15)), (k, noisy[k])


def test_roofline_beats_linear_on_roofline_steps_and_both_fit_linear_ones() -> None:
    roof = fit_report(synthetic(ROOF, 0.02))
    assert roof["roofline"]["held_out"]["median_ape"] < 3
    assert roof["linear"]["held_out"]["median_ape"] > roof["roofline"]["held_out"]["median_ape"]
    lin = fit_report(synthetic(LINEAR, 0.02))
    assert lin["linear"]["held_out"]["median_ape"] < 3
    assert lin["linear"]["held_out"]["p90_ape"] < 6


def test_error_report_by_hand() -> None:
    e = errors([1.1, 0.9, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0])
    # APE 10, 10, 0, 100; sorted 0, 10, 10, 100: p90 at rank 2.7 = 10 + 0.7 * 90
    assert e.n == 4
    assert math.isclose(e.median_ape, 10.0)
    assert math.isclose(e.p90_ape, 73.0)
    assert math.isclose(e.max_ape, 100.0)
    assert math.isclose(e.bias, 25.0)  # (10 - 10 + 0 + 100) / 4
    assert errors([2.0], [4.0]).as_dict() == {
        "n": 1,
        "median_ape": 50.0,
        "p90_ape": 50.0,
        "max_ape": 50.0,
        "bias": -50.0,
    }
    with pytest.raises(ValueError):
        errors([1.0], [0.0])
    with pytest.raises(ValueError):
        errors([1.0, 2.0], [1.0])


def test_holdout_fits_one_half_and_evaluates_the_other() -> None:
    steps = synthetic(LINEAR, 0.0)
    a, b = split_halves(steps)
    assert a == steps[0::2] and b == steps[1::2]
    assert holdout(steps, fit_linear, roofline=False).max_ape < 1e-6
    assert holdout(steps, fit_linear, roofline=False).n == len(steps)

    # a fit that ignores its half: the error is that of the constant model
    def fixed(_: object) -> dict[str, float]:
        return {"c0": 1.0, "c_prefill": 0.0, "c_decode": 0.0, "c_kv": 0.0}

    got = holdout(steps, fixed, roofline=False)
    want = errors([1.0] * len(steps), [s.seconds for s in b + a])
    assert got == want


def test_step_and_fit_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="seconds"):
        Step(1, 0, 0, 0, 0.0)
    with pytest.raises(ValueError, match="prefill_tokens"):
        Step(-1, 0, 0, 0, 1.0)
    with pytest.raises(ValueError, match="at least"):
        fit_linear([Step(1, 0, 0, 0, 1.0)])


def test_design_covers_the_brief() -> None:
    pts = stepfit.design()
    pre = [p for p in pts if p.kind == "prefill"]
    dec = [p for p in pts if p.kind == "decode"]
    mix = [p for p in pts if p.kind == "mixed"]
    assert {p.n for p in pre} >= {32, 2048} and any(p.prefix for p in pre)
    assert min(p.batch for p in dec) == 1 and max(p.batch for p in dec) == 64
    assert {p.context for p in dec} >= {64, 2048}
    assert all(p.batch * p.context <= stepfit.MAX_DECODE_KV for p in dec)
    assert mix and all(any((d.batch, d.context) == (m.batch, m.context) for d in dec) for m in mix)
    assert len({p.label for p in pts}) == len(pts)
    assert stepfit.design(quick=True)


def _raw(model: StepModel, reps: int = 3) -> dict[str, Any]:
    """What stepfit.measure returns, with steps timed by ``model``."""
    rng = np.random.default_rng(2)
    pts = stepfit.design()
    steps = []
    for p in pts:
        for r in range(reps):
            pre, b, kv, pairs = p.shape()
            kv += b * r  # a decode's context grows a token a step
            t = model.step_time(pre, b, kv, pairs) * (1 + 0.01 * rng.standard_normal())
            row = dict(
                zip(
                    ("prefill_tokens", "batch_size", "kv_tokens_read", "attn_pairs"),
                    (pre, b, kv, pairs),
                    strict=True,
                )
            )
            steps.append({"label": p.label, **row, "seconds": t})
        steps.append(
            {
                "label": None,
                "prefill_tokens": 7,
                "batch_size": 0,
                "kv_tokens_read": 0,
                "attn_pairs": 28,
                "seconds": 1.0,
            }
        )
    return {
        "engine": {
            "model": "tiny",
            "model_shape": {},
            "dtype": "torch.bfloat16",
            "block_size": 128,
            "kv_capacity_tokens": 1000,
            "max_num_seqs": 8,
            "max_num_batched_tokens": 512,
            "max_model_len": 4096,
            "enforce_eager": False,
        },
        "machine": {"vllm": "0.0", "torch": "0.0", "cpu": "test", "cores": 1},
        "startup_s": 1.0,
        "warmup_s": 1.0,
        "measure_s": 1.0,
        "reps": reps,
        "design": [p.label for p in pts],
        "steps": steps,
        "command": "test",
    }


def test_points_are_medians_of_their_labelled_steps() -> None:
    raw = _raw(LINEAR)
    steps = stepfit.points_to_steps(raw["steps"], raw["design"])
    assert [s.label for s in steps] == raw["design"]
    d = next(s for s in steps if s.label == "decode 4 x 256")
    assert d.kv_tokens_read == 4 * 256 + 4  # mean of +0, +4, +8
    group = [r["seconds"] for r in raw["steps"] if r["label"] == "decode 4 x 256"]
    assert d.seconds == sorted(group)[1]


def test_stepfit_refits_a_json_and_writes_its_pages(tmp_path: Path) -> None:
    src = tmp_path / "raw.json"
    src.write_text(json.dumps(_raw(LINEAR)))
    out, md, png = tmp_path / "fit.json", tmp_path / "fit.md", tmp_path / "fit.png"
    argv = ["--from-json", str(src), "--json", str(out), "--md", str(md), "--plot", str(png)]
    assert stepfit.main(argv) == 0
    data = json.loads(out.read_text())
    lin = data["fit"]["linear"]
    assert lin["held_out"]["median_ape"] < 2
    for k in LINEAR_TERMS:
        assert close(lin["constants"][k], getattr(LINEAR, k), TOL.get(k, 0.15)), k
    preset = data["preset"]["roofline"]
    assert preset["roofline"] == 1 and preset["kv_capacity"] == 1000
    assert preset["prefill_budget"] == 512 and preset["max_running"] == 8
    StepModel(**data["preset"]["linear"])
    StepModel(**preset)
    text = md.read_text()
    assert "held-out" in text and "decode 4 x 256" in text
    assert png.stat().st_size > 0


@pytest.mark.parametrize("name", ["vllm-cpu-tiny", "vllm-cpu-tiny-roofline"])
def test_fitted_presets_load_and_match_the_results(name: str) -> None:
    m = StepModel.preset(name)
    assert m.c0 > 0 and m.c_prefill > 0
    assert m.roofline == int(name.endswith("roofline"))
    data = json.loads((RESULTS / "step_fit.json").read_text())
    form = "roofline" if m.roofline else "linear"
    for k, v in data["preset"][form].items():
        assert math.isclose(PRESETS[name][k], v, rel_tol=1e-3), (k, PRESETS[name][k], v)


class _FakeRequest:
    def __init__(self, prompt: int, max_tokens: int, cached: int) -> None:
        self.num_prompt_tokens = prompt
        self.num_computed_tokens = cached
        self.max_tokens = max_tokens
        self.out = 0


class _FakeScheduler:
    """Continuous batching as vLLM's does it: running requests first (a
    decode token each, or their next prefill chunk), then waiting ones,
    within a token budget; whole 16-token blocks of earlier prompts hit."""

    def __init__(self, budget: int = 4096) -> None:
        self.budget = budget
        self.requests: dict[str, _FakeRequest] = {}
        self.order: list[str] = []
        self.blocks: set[tuple[int, ...]] = set()

    def schedule(self) -> object:
        left, sched = self.budget, {}
        for rid in self.order:
            r = self.requests[rid]
            need = max(r.num_prompt_tokens - r.num_computed_tokens, 1)
            n = min(need, left)
            if n <= 0:
                break
            sched[rid] = n
            r.num_computed_tokens += n
            left -= n
        return type("Out", (), {"num_scheduled_tokens": sched})()


class _FakeCore:
    def __init__(self) -> None:
        self.scheduler = _FakeScheduler()
        self.step_fn = self.step

    def step(self) -> tuple[dict[int, object], bool]:
        s = self.scheduler
        if not s.order:
            return {}, False
        out = s.schedule()
        for rid in out.num_scheduled_tokens:  # type: ignore[attr-defined]
            r = s.requests[rid]
            if r.num_computed_tokens >= r.num_prompt_tokens:
                r.out += 1
                if r.out >= r.max_tokens:
                    s.order.remove(rid)
                    del s.requests[rid]
        return {}, True


class _FakeEngine:
    def __init__(self) -> None:
        core = _FakeCore()
        self.engine_core = type("Client", (), {"engine_core": core})()
        self.core = core

    def add_request(self, rid: str, prompt: dict[str, list[int]], params: object) -> str:
        toks = prompt["prompt_token_ids"]
        s = self.core.scheduler
        cached = 0
        while cached + 16 < len(toks) and tuple(toks[: cached + 16]) in s.blocks:
            cached += 16
        for i in range(16, len(toks) + 1, 16):
            s.blocks.add(tuple(toks[:i]))
        s.requests[rid] = _FakeRequest(len(toks), params.max_tokens, cached)  # type: ignore[attr-defined]
        s.order.append(rid)
        return rid

    def step(self) -> None:
        self.core.step_fn()

    def has_unfinished_requests(self) -> bool:
        return bool(self.core.scheduler.order)

    def abort_request(self, ids: list[str], internal: bool = False) -> None:
        s = self.core.scheduler
        for rid in ids:
            if rid in s.requests:
                s.order.remove(rid)
                del s.requests[rid]


class _Params:
    def __init__(self, max_tokens: int, **_: object) -> None:
        self.max_tokens = max_tokens


def test_driver_records_the_designed_shapes_from_the_scheduler() -> None:
    """stepfit's driver and recorder on a fake engine: every labelled step
    has the shape of its point, read from the scheduler's output."""
    eng = _FakeEngine()
    drv = stepfit._Driver(eng, 4096, 0, sampling=_Params)
    pts = stepfit.design(max_decode_kv=8192)
    reps = 3
    stepfit.run_design(drv, pts, reps)
    assert not eng.has_unfinished_requests()
    recs = drv.rec.records
    for p in pts:
        got = [r for r in recs if r.label == p.label]
        assert len(got) == reps, p.label
        pre, b, kv, pairs = p.shape()
        for r in got:
            assert (r.prefill_tokens, r.batch_size, r.attn_pairs) == (pre, b, pairs), p.label
            assert r.seconds > 0
            if p.kind != "prefill":  # contexts: prompt + generated tokens, growing
                assert b * p.context < r.kv_tokens_read <= kv + b * 32, p.label
    dec = [r for r in recs if r.label == "decode 4 x 256"]
    assert [r.kv_tokens_read for r in dec] == [
        4 * 259,
        4 * 260,
        4 * 261,
    ]  # 2 warm-up decodes at 257, 258
    # unlabelled: warm-ups and the decoders' prefills
    assert any(r.label is None and r.prefill_tokens == 4096 for r in recs)


def test_a_point_is_the_median_of_its_fast_repeats() -> None:
    """Repeats that lost the CPU to other jobs (slower than 1.5x the fastest)
    do not count."""
    assert stepfit.fast([1.0, 1.2, 1.6, 100.0]) == [1.0, 1.2]
    rows = [
        {
            "label": "x",
            "prefill_tokens": 8,
            "batch_size": 0,
            "kv_tokens_read": 0,
            "attn_pairs": 36,
            "seconds": t,
        }
        for t in (0.010, 0.011, 0.012, 0.2, 0.25)
    ]
    (step,) = stepfit.points_to_steps(rows, ["x"])
    assert step.seconds == 0.011
