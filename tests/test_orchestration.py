"""The Python orchestration shared by the simulator and the engine integration:
one scheduler factory, one "admit the head alone" rule, one step-time model,
one Jain's index (issue 10, item 4)."""

from __future__ import annotations

import math

import pytest

import fairq
from fairq.sched import POLICIES, POLICY_OPTIONS, admit, make_scheduler, policy_name
from fairq.sim import StepModel
from fairq.sim import jain_index as jain
from fairq.sim.model import STEP_COSTS, step_time
from fairq.transformers import POLICIES as ENGINE_POLICIES
from fairq.transformers import StepTimeModel
from fairq.transformers import jain_index as engine_jain_index
from fairq.transformers.policies import build_policy


def test_factory_builds_every_policy() -> None:
    opts = {
        "fcfs": {},
        "lpm": {},
        "vtc": {"w_in": 1.0, "w_out": 3.0},
        "dlpm": {"quantum": 4.0},
        "las": {"half_life_s": 30.0},
    }
    for name, cls in POLICIES.items():
        s = make_scheduler(name.upper(), fairq.RadixTree(), **opts[name])
        assert type(s) is cls
    assert set(POLICIES) == set(POLICY_OPTIONS) == {"fcfs", "lpm", "vtc", "dlpm", "las"}
    assert make_scheduler(" vtc ", None, w_out=3.0).weight("x") == 1.0


def test_factory_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown fairq policy 'wfq'.*known policies: dlpm"):
        make_scheduler("wfq")
    with pytest.raises(TypeError, match="policy must be a string"):
        policy_name(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no option 'w_e'.*options: w_in, w_out"):
        make_scheduler("vtc", None, w_e=1.0)
    with pytest.raises(ValueError, match="quantum"):  # the core checks values
        make_scheduler("dlpm", fairq.RadixTree(), quantum=0.0)


def test_engine_integration_uses_the_factory() -> None:
    for name, (cls_name, defaults) in ENGINE_POLICIES.items():
        assert cls_name == POLICIES[name].__name__
        assert set(defaults) == set(POLICY_OPTIONS[name])
        assert type(build_policy(f"fairq-{name}", fairq.RadixTree())) is POLICIES[name]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_admit_head_alone_when_nothing_fits(name: str) -> None:
    opts = {"dlpm": {"quantum": 8.0}}.get(name, {})
    s = make_scheduler(name, fairq.RadixTree(), **opts)
    s.add("big", "a", list(range(100)))
    assert admit(s, 10, 4) == []  # nothing fits, no head rule: nothing admitted
    assert admit(s, 10, 0, head_budget=1000) == []  # no slot: nothing
    assert admit(s, 0, 4, head_budget=50) == []  # the head needs 100 tokens of room
    (a,) = admit(s, 10, 4, head_budget=1 << 40)
    assert a.request_id == "big" and a.extend_len == 100 and len(s) == 0


def test_admit_is_schedule_when_something_fits() -> None:
    s = make_scheduler("fcfs")
    for i in range(3):
        s.add(i, "a", [i, i])
    got = admit(s, 4, 8, head_budget=1 << 40)
    assert [a.request_id for a in got] == [0, 1] and len(s) == 1


def test_one_step_time_model() -> None:
    m = StepModel(c0=0.5, c_prefill=2.0, c_decode=3.0, c_kv=5.0)
    fitted = StepTimeModel(0.5, 2.0, 3.0, 5.0, r2=1.0, n_steps=4)
    want = 0.5 + 2.0 * 7 + 3.0 * 11 + 5.0 * 13
    assert m.step_time(7, 11, 13) == fitted.predict(7, 11, 13) == step_time(m, 7, 11, 13) == want
    assert fitted.simulate_args() == " ".join(
        f"--model {k}={v:.6g}" for k, v in zip(STEP_COSTS, (0.5, 2.0, 3.0, 5.0), strict=True)
    )


def test_one_jain_index() -> None:
    assert jain is engine_jain_index
    assert jain([2.0, 2.0]) == 1.0 and jain([]) == 1.0
    assert jain([3.0, 1.0]) == pytest.approx(16 / 20)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"values\[1\]"):
            jain([1.0, bad])
