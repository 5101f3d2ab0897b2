"""LAS (least attained service per tenant with half-life decay): the core
against tests/reference/las.py on random traces, the decay property, the
worked example of ALGORITHMS.md section 5b, and that the policy is
available wherever policies are listed (one registration)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq import _core
from fairq.sched import POLICIES, POLICY_INFO, make_scheduler

from reference.las import RefLAS

CLIENTS = ["a", "b", "c"]

OPS = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(CLIENTS), st.integers(1, 20)),
    st.tuples(
        st.just("schedule"),
        st.integers(0, 40),
        st.sampled_from([None, 1, 2, 3]),
        st.sampled_from([None, None, 0, 30]),
    ),
    st.tuples(st.just("charge"), st.integers(0, 9), st.integers(0, 6)),
    st.tuples(st.just("recharge"), st.integers(0, 9), st.integers(0, 20)),
    st.tuples(st.just("finish"), st.integers(0, 9), st.none()),
    st.tuples(st.just("remove"), st.integers(0, 9), st.none()),
    st.tuples(st.just("weight"), st.sampled_from(CLIENTS), st.sampled_from([1.0, 2.0, 4.0])),
    # time moves by whole half-lives, so both sides compute exactly
    st.tuples(st.just("time"), st.integers(0, 3), st.none()),
)


def _pick(ids: dict[Any, Any], i: int) -> Any:
    return sorted(ids, key=str)[i % len(ids)]


@settings(max_examples=150)
@given(
    half_life=st.sampled_from([0.5, 1.0, 10.0]),
    w_in=st.sampled_from([1.0, 2.0]),
    w_out=st.sampled_from([1.0, 2.0, 3.0]),
    ops=st.lists(OPS, max_size=60),
)
def test_matches_reference(half_life: float, w_in: float, w_out: float, ops: list[Any]) -> None:
    s = make_scheduler("las", None, half_life_s=half_life, w_in=w_in, w_out=w_out)
    ref = RefLAS(half_life, w_in, w_out)
    s.set_time(0.0)
    steps, n = 0, 0
    for op in ops:
        kind = op[0]
        if kind == "add":
            s.add(n, op[1], [7] * op[2])
            ref.add(n, op[1], [7] * op[2])
            n += 1
        elif kind == "schedule":
            got = s.schedule(op[1], op[2], oversize_budget=op[3])
            assert [a.request_id for a in got] == ref.schedule(op[1], op[2], op[3])
            assert all(a.extend_len == a.input_len for a in got)
        elif kind == "charge" and ref.running:
            rid = _pick(ref.running, op[1])
            s.charge_output(rid, op[2])
            ref.charge_output(rid, op[2])
        elif kind == "recharge" and ref.running:
            rid = _pick(ref.running, op[1])
            ext = op[2] % (ref.running[rid][2] + 1)
            assert s.recharge_extend(rid, ext) == ref.recharge_extend(rid, ext)
        elif kind == "finish" and ref.running:
            rid = _pick(ref.running, op[1])
            s.finish(rid)
            ref.finish(rid)
        elif kind == "remove" and ref.waiting:
            rid = _pick(ref.waiting, op[1])
            s.remove(rid)
            ref.remove(rid)
        elif kind == "weight":
            s.set_weight(op[1], op[2])
            ref.set_weight(op[1], op[2])
        elif kind == "time":
            steps += op[1]
            s.set_time(steps * half_life)
            ref.set_time(steps * half_life)
        assert len(s) == len(ref.waiting)
        assert s.num_running == len(ref.running)
        s._check()
    assert s.clients() == list(ref.clients)
    for c in ref.clients:
        assert s.attained(c) == ref.attained(c)  # exact: whole half-lives
        assert s.state_value(c) == s.attained(c)
        assert s.service(c) == pytest.approx(ref.clients[c].service)


@settings(max_examples=100)
@given(
    half_life=st.sampled_from([0.25, 0.5, 1.0, 3.0, 10.0, 60.0, 3600.0]),
    charge=st.integers(1, 10**6),
    start=st.integers(0, 10**6),
    k=st.integers(0, 40),
)
def test_an_idle_tenants_service_halves_per_half_life(
    half_life: float, charge: int, start: int, k: int
) -> None:
    s = fairq._core.LAS(half_life_s=half_life, w_in=1.0)
    s.set_time(start)
    s.add("r", "idle", [1] * charge)
    (a,) = s.schedule(charge)
    assert s.attained("idle") == pytest.approx(charge)
    for i in range(1, k + 1):  # nothing happens but time
        s.set_time(start + i * half_life)
        assert s.attained("idle") == pytest.approx(charge * 0.5**i, rel=1e-12)
    s.finish(a.request_id)


def test_worked_example() -> None:
    # ALGORITHMS.md section 5b: half_life_s = 10, w_in = 1, w_out = 2
    s = make_scheduler("las", half_life_s=10)
    s.set_time(0)
    s.add("h1", "heavy", [1] * 80)
    (a,) = s.schedule(100)
    s.charge_output("h1", 10)  # heavy: 80 + 2 * 10 = 100
    s.finish("h1")
    assert s.attained("heavy") == 100.0
    s.set_time(20)  # two half-lives idle: 25
    assert s.attained("heavy") == 25.0
    s.add("l1", "light", [2] * 30)  # light is new: 0
    s.add("h2", "heavy", [1] * 5)
    got = [x.request_id for x in s.schedule(100, 1)]
    assert got == ["l1"]  # light (0) < heavy (25)
    assert s.attained("light") == 30.0
    assert [x.request_id for x in s.schedule(100, 1)] == ["h2"]  # heavy 25 < light 30
    assert s.attained("heavy") == 30.0


def test_errors_name_the_field_and_change_nothing() -> None:
    for bad in ({"half_life_s": 0}, {"half_life_s": float("inf")}, {"w_in": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_scheduler("las", **bad)
    s = make_scheduler("las")
    s.set_time(5)
    with pytest.raises(ValueError, match="now"):
        s.set_time(4)
    with pytest.raises(ValueError, match="now"):
        s.set_time(float("nan"))
    s.set_time(5)  # the same time again is fine
    with pytest.raises(ValueError, match="no option 'quantum'"):
        make_scheduler("las", quantum=1)


def test_state_round_trips_and_loads_as_of_the_loading_clock() -> None:
    s = make_scheduler("las", half_life_s=10)
    s.set_time(0)
    s.add(1, "a", [1] * 40)
    s.add(2, "b", [1] * 8)
    s.schedule(100)
    s.set_time(10)
    st = s.state_dict()
    assert st["policy"] == "las" and st["options"]["half_life_s"] == 10.0
    assert [c["attained"] for c in st["clients"]] == [20.0, 4.0]
    r = make_scheduler("las", half_life_s=1)
    r.set_time(1000)  # another clock: the values hold as of the load
    r.load_state_dict(st)
    assert r.attained("a") == 20.0 and r.state_dict() == st
    bad = dict(st, clients=[dict(st["clients"][0], attained=-1.0)])
    with pytest.raises(ValueError, match=r"clients\[0\]\.attained"):
        make_scheduler("las").load_state_dict(bad)


def test_available_wherever_policies_are_listed() -> None:
    from fairq import engineopts
    from fairq.sim.engine import LOCAL_POLICIES

    info = POLICY_INFO["las"]
    assert info.options == ("half_life_s", "w_in", "w_out")
    assert info.engine_defaults == {"half_life_s": 60.0, "w_in": 1.0, "w_out": 2.0}
    assert not info.needs_tree and not info.refills and info.stop_at_unfit
    assert [f.name for f in info.state_fields] == ["attained"]
    assert POLICIES["las"] is _core.LAS and "las" in LOCAL_POLICIES
    assert engineopts.POLICIES["las"] == ("LAS", dict(info.engine_defaults))
    s = engineopts.build_policy("fairq-las", None, {"half_life_s": 5})
    assert isinstance(s, fairq.LocalScheduler) and isinstance(s, _core.LAS)


def test_simulator_runs_las_on_simulated_time() -> None:
    from fairq.sim import SimConfig, simulate
    from fairq.sim.workloads import make_workload

    wl = make_workload("qa", misbehave="S1", seed=0, duration=20.0)
    a = simulate(wl, SimConfig(workers=1, policy="las"))
    b = simulate(wl, SimConfig(workers=1, policy="las"))
    assert a.finish and a.finish == b.finish  # deterministic: simulated time


def test_metrics_report_the_registered_state_field() -> None:
    pytest.importorskip("prometheus_client")
    from fairq.metrics import FairqCollector

    s = make_scheduler("las", half_life_s=10)
    s.set_time(0)
    s.add(1, "a", [1] * 10)
    s.schedule(100)
    fams = {f.name: f for f in FairqCollector(s, "w").collect()}
    (sample,) = fams["fairq_scheduler_las_attained"].samples
    assert sample.labels["tenant"] == "a" and sample.value == 10.0
