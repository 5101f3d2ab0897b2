"""The simulator's KV memory models (issue 21, item 3): "estimate" (output
lengths unknown to the engine: SGLang's new-token-ratio reservation, one KV
token allocated per decode step, retraction and recomputation) and "oracle"
(the old model, kept for comparison); and Jain's index on demand (item 4)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from fairq.sim import (
    SimConfig,
    StepModel,
    jain_index,
    jain_on_demand,
    make_workload,
    max_min_shares,
    parse_trace,
    simulate,
    summarize,
)
from fairq.sim.engine import Worker

A10G = StepModel.preset("a10g-3b")


def overflow_trace(n: int = 90, seed: int = 0) -> list[str]:
    """Requests with long, varied outputs arriving together: a pool of a
    few thousand tokens admits more than it can decode to the end."""
    rng = np.random.default_rng(seed)
    return [
        json.dumps(
            {
                "time": 0.05 * i,
                "client": "abc"[i % 3],
                "prompt_len": int(rng.integers(50, 400)),
                "prefix_id": f"p{i % 3}",
                "prefix_len": 40,
                "output_len": int(rng.integers(20, 600)),
            }
        )
        for i in range(n)
    ]


SMALL = replace(A10G, kv_capacity=6000, prefill_budget=512)


def check_clean(sim: object, wl: object) -> None:
    """Every request finished exactly once; nothing is left held."""
    assert sim.complete  # type: ignore[attr-defined]
    assert set(sim.finish) == {r.rid for r in wl.requests}  # type: ignore[attr-defined]
    for w in sim.workers:  # type: ignore[attr-defined]
        assert w.reserved == 0 and not w.runs and not w.decoding and not w.prefill_q
        assert len(w.sched) == 0 and w.sched.num_running == 0 and not w.retracted
        assert w.tree.size <= w.cap
        assert w.tree.evictable_size == w.tree.size  # no lock leaked


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "vtc", "dlpm", "lpm-sglang"])
def test_overflow_retracts_and_never_exceeds_the_pool(policy: str) -> None:
    wl = parse_trace(overflow_trace())
    cfg = SimConfig(policy=policy, model=SMALL, user_quantum=300.0, validate=True)
    sim = simulate(wl, cfg)  # validate: the pool is checked at every step
    check_clean(sim, wl)
    finished = list(sim.finish)
    assert len(finished) == len(set(finished)) == len(wl.requests)
    m = summarize(sim)
    assert m["memory"] == "estimate" and m["max_new_tokens"] == max(
        r.output_len for r in wl.requests
    )
    assert m["retractions"] == sim.retractions
    assert m["recomputed_tokens"] == sim.recomputed_tokens
    assert m["retractions"] > 0 and m["recomputed_tokens"] > 0
    # the client view counts every token once, retracted or not
    want = sum(r.input_len + 2 * r.output_len for r in wl.requests)
    assert sum(sim.service) == pytest.approx(want)


def test_oracle_never_retracts() -> None:
    wl = parse_trace(overflow_trace())
    sim = simulate(wl, SimConfig(policy="dlpm", model=SMALL, memory="oracle"))
    check_clean(sim, wl)
    m = summarize(sim)
    assert m["memory"] == "oracle" and m["retractions"] == 0 == m["recomputed_tokens"]


@pytest.mark.parametrize("policy", ["vtc", "dlpm"])
def test_retraction_does_not_double_charge(policy: str) -> None:
    """ALGORITHMS.md section 9: recomputation caused by the engine's own
    preemption is not charged. The scheduler's service per client (extend
    tokens charged at admission, output tokens as produced) is the cost the
    simulator counted: each first admission's extend tokens and every output
    token once, retracted or not."""
    wl = parse_trace(overflow_trace())
    sim = simulate(wl, SimConfig(policy=policy, model=SMALL, user_quantum=300.0, validate=True))
    check_clean(sim, wl)
    assert sim.retractions > 0 and sim.recomputed_tokens > 0
    w = sim.workers[0]
    for i, c in enumerate(sim.clients):
        mine = [r for r in wl.requests if r.client == c]
        out = sum(r.output_len for r in mine)
        assert w.sched.service(c) == pytest.approx(sim.actual[i])
        prefill = sim.actual[i] - 2.0 * out  # w_q = 2 per output token, once
        assert 0 <= prefill <= sum(r.input_len for r in mine)


def test_retraction_order_is_sglangs() -> None:
    """Each retracted request has the fewest output tokens of the running
    ones (ties: the longest prompt), as SGLang's retract_decode orders them."""
    wl = parse_trace(overflow_trace(seed=4))
    seen: list[tuple[tuple[int, int], tuple[int, int]]] = []
    orig = Worker._retract_one

    def spy(self: Worker, run: object) -> None:
        sd = self.steps_done
        keys = [(r.produced(sd), -r.req.input_len) for r in self.runs.values()]
        seen.append(((run.produced(sd), -run.req.input_len), min(keys)))  # type: ignore[attr-defined]
        orig(self, run)  # type: ignore[arg-type]

    Worker._retract_one = spy  # type: ignore[method-assign]
    try:
        sim = simulate(wl, SimConfig(policy="lpm", model=SMALL, validate=True))
    finally:
        Worker._retract_one = orig  # type: ignore[method-assign]
    check_clean(sim, wl)
    assert seen and all(got == low for got, low in seen)


def test_new_token_ratio_decays_and_resets() -> None:
    from fairq.sim import engine

    wl = make_workload("tot", misbehave="S2", seed=0, scale=0.25, rate=0.4, duration=6.0)
    sim = simulate(wl, SimConfig(policy="dlpm", model=A10G, validate=True))
    check_clean(sim, wl)
    w = sim.workers[0]
    assert w.ratio == engine.INIT_NEW_TOKEN_RATIO  # idle at the end: reset
    assert engine.MIN_NEW_TOKEN_RATIO == pytest.approx(0.098)


trace_line = st.tuples(
    st.floats(0.0, 2.0),
    st.sampled_from(["a", "b", "c"]),
    st.integers(1, 200),
    st.sampled_from([None, "p0", "p1"]),
    st.integers(1, 300),
)


@settings(max_examples=40)
@given(
    lines=st.lists(trace_line, min_size=1, max_size=30),
    setup=st.sampled_from(
        [
            (1, "fcfs", None),
            (1, "lpm", None),
            (1, "vtc", None),
            (1, "dlpm", None),
            (1, "lpm-sglang", None),
            (2, "lpm", "rr"),
            (2, "vtc", "client-rr"),
            (3, "lpm", "affinity"),
            (3, "dlpm", "d2lpm"),
        ]
    ),
    kv=st.sampled_from([1_000, 2_000, 50_000]),
)
def test_random_traces_pool_never_exceeded(lines: list, setup: tuple, kv: int) -> None:
    objs = []
    for t, c, n, pid, out in lines:
        o: dict = {"time": t, "client": c, "prompt_len": n, "output_len": out}
        if pid is not None:
            o["prefix_id"] = pid
            o["prefix_len"] = max(1, n // 2)
        objs.append(json.dumps(o))
    wl = parse_trace(objs)
    workers, policy, dispatcher = setup
    model = replace(A10G, kv_capacity=kv, prefill_budget=256, max_running=8)
    cfg = SimConfig(
        workers=workers,
        policy=policy,
        dispatcher=dispatcher,
        model=model,
        user_quantum=100.0,
        worker_quantum=500.0,
        validate=True,
    )
    sim = simulate(wl, cfg)  # validate: the pool is checked at every step
    target(float(sim.retractions), label="retractions")  # steer towards retracting
    check_clean(sim, wl)
    want = sum(r.input_len + 2 * r.output_len for r in wl.requests)
    assert sum(sim.service) == pytest.approx(want)
    for r in wl.requests:
        assert sim.arrival[r.rid] <= sim.first_token[r.rid] <= sim.finish[r.rid]


def test_request_larger_than_the_pool_is_rejected_up_front() -> None:
    wl = parse_trace([json.dumps({"time": 0, "client": "a", "prompt_len": 700, "output_len": 9})])
    with pytest.raises(ValueError, match="more than half the KV capacity"):
        simulate(wl, SimConfig(model=replace(A10G, kv_capacity=1000)))


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="memory must be one of estimate, oracle"):
        SimConfig(memory="paged")
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        SimConfig(max_new_tokens=0)
    wl = parse_trace([json.dumps({"time": 0, "client": "a", "prompt_len": 7, "output_len": 9})])
    with pytest.raises(ValueError, match="does not cut outputs"):
        simulate(wl, SimConfig(max_new_tokens=8))
    sim = simulate(wl, SimConfig(max_new_tokens=64))
    assert summarize(sim)["max_new_tokens"] == 64


# ---- the old model, unchanged -------------------------------------------------------

#: (workload, policy, workers, dispatcher) -> (service tok/s, makespan s, steps)
#: measured with the simulator before the "estimate" model existed
ORACLE_PINS: dict[tuple[str, str, int, str | None], tuple[float, float, int]] = {
    ("qa", "dlpm", 1, None): (19820.369055238687, 27.769109569356193, 93),
    ("judge", "vtc", 1, None): (11354.640058474964, 24.12661243237982, 425),
    ("judge", "lpm-sglang", 1, None): (11532.018127573408, 23.75551243237986, 386),
    ("tot", "dlpm", 3, "d2lpm"): (55941.68228993631, 143.51418604807102, 5444),
    ("qa", "lpm", 2, "preble"): (84528.03725158566, 11.593040982169704, 87),
    ("judge", "fcfs", 1, None): (11101.879241576617, 24.675912432379832, 377),
}


@pytest.mark.parametrize("key", sorted(ORACLE_PINS, key=str))
def test_oracle_results_unchanged(key: tuple[str, str, int, str | None]) -> None:
    name, policy, workers, dispatcher = key
    wl = make_workload(name, misbehave="S1", seed=1, scale=0.25, rate=1.5 * workers, duration=8.0)
    cfg = SimConfig(
        workers=workers,
        policy=policy,
        dispatcher=dispatcher,
        model=replace(A10G, kv_capacity=30_000),
        memory="oracle",
    )
    m = summarize(simulate(wl, cfg))
    svc, makespan, steps = ORACLE_PINS[key]
    assert (m["service_tok_s"], m["makespan_s"], m["steps"]) == (
        pytest.approx(svc, rel=1e-12),
        pytest.approx(makespan, rel=1e-12),
        steps,
    )


# ---- Jain on demand -------------------------------------------------------------------


def test_max_min_shares() -> None:
    assert max_min_shares([10, 100, 100], 100) == [10, 45, 45]
    assert max_min_shares([10, 20], 100) == [10, 20]  # every demand met
    assert max_min_shares([50, 50, 50], 90) == [30, 30, 30]
    assert max_min_shares([], 5) == []
    assert max_min_shares([np.inf, 5.0, np.inf], 25) == [10, 5, 10]


def cumulative(steps: list[list[float]]) -> np.ndarray:
    return np.vstack([np.zeros(len(steps[0])), np.cumsum(steps, axis=0)])


def test_jain_on_demand_does_not_penalise_a_light_client() -> None:
    # client 0 has nothing waiting and gets the 10 it asks for each step; the
    # two backlogged clients split the rest equally: fair on demand
    serv = cumulative([[10, 45, 45]] * 4)
    back = np.array([[False, True, True]] * 5)
    assert jain_on_demand(serv, back) == pytest.approx(1.0)
    assert jain_index([10, 45, 45]) < 0.85  # the client view calls it unfair
    # the backlogged ones split unequally: unfair on demand too
    serv = cumulative([[10, 80, 10]] * 4)
    assert jain_on_demand(serv, back) < 0.75
    # every client backlogged: the plain Jain index of the service
    serv = cumulative([[20, 40, 60]] * 3)
    allb = np.ones((4, 3), dtype=bool)
    assert jain_on_demand(serv, allb) == pytest.approx(jain_index([20, 40, 60]))
    # no client ever backlogged: no overloaded time to judge
    assert np.isnan(jain_on_demand(serv, ~allb))
    with pytest.raises(ValueError, match="alike"):
        jain_on_demand(serv, allb[:2])


def test_jain_on_demand_chunks_agree() -> None:
    rng = np.random.default_rng(7)
    steps = rng.integers(0, 50, size=(300, 5)).astype(float)
    back = rng.random((301, 5)) < 0.4
    serv = cumulative(steps.tolist())
    assert jain_on_demand(serv, back, chunk=7) == pytest.approx(jain_on_demand(serv, back))
    # against a per-interval loop over max_min_shares
    got = np.zeros(5)
    fair = np.zeros(5)
    for t in range(300):
        if back[t].any():
            s = steps[t]
            demand = [np.inf if back[t, i] else s[i] for i in range(5)]
            got += s
            fair += max_min_shares(demand, s.sum())
    keep = fair > 0
    assert jain_on_demand(serv, back) == pytest.approx(jain_index(got[keep] / fair[keep]))


def test_summary_has_jain_demand() -> None:
    wl = make_workload("qa", misbehave="S1", seed=1, scale=0.25, rate=4.0, duration=8.0)
    m = summarize(simulate(wl, SimConfig(policy="vtc", model=A10G)))
    assert 0 < m["jain_demand"] <= 1
    assert 0 < m["jain_client"] <= 1


def test_cli_memory_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fairq.cli import main

    base = ["simulate", "--workload", "qa-S1", "--workers", "1", "--policy", "dlpm"]
    base += ["--duration", "3", "--no-progress"]
    for mem in ("oracle", "estimate"):
        out = tmp_path / f"{mem}.json"
        assert main([*base, "--memory", mem, "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["memory"] == mem
        assert all(r["memory"] == mem for r in data["results"])
        assert f"memory {mem}" in capsys.readouterr().out
    assert main([*base, "--memory", "paged"]) == 2
    assert "invalid choice: 'paged'" in capsys.readouterr().err
    try:
        main(["simulate", "--help"])
    except SystemExit:
        pass
    assert "--memory {estimate,oracle}" in capsys.readouterr().out
