"""fairq.DualPhaseQueue: ALGORITHMS.md section 4, metrics, and a hypothesis
model test against a pure-Python reference (two deques)."""

from __future__ import annotations

import math
from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fairq import DualPhaseQueue


def ids(slots: list[tuple[object, object]]) -> list[object]:
    return [rid for rid, _ in slots]


def test_output_drains_first_then_multiplied_think() -> None:
    q = DualPhaseQueue(think_batch_multiplier=2.5, min_think_reservation=0)
    for i in range(10):
        q.add(f"t{i}", i)
    for i in range(3):
        q.add(f"o{i}", i, phase="output")
    out, think = q.schedule_phases(2, 100)
    assert ids(out) == ["o0", "o1"]
    assert ids(think) == ["t0", "t1", "t2", "t3", "t4"]  # floor(2 * 2.5)
    assert q.schedule(2, 100)[:2] == [("o2", 2), ("o0", 0)]
    m = q.metrics()
    assert (m["batch_size_output"], m["batch_size_think"]) == (2, 5)
    assert (m["queue_depth_output"], m["queue_depth_think"]) == (3, 10)


def test_multiplier_expands_think_budget() -> None:
    for mult, want in [(1.0, 4), (1.5, 6), (2.5, 10), (3.0, 12)]:
        q = DualPhaseQueue(think_batch_multiplier=mult)
        for i in range(50):
            q.add(i)
        _, think = q.schedule_phases(4, 1000)
        assert len(think) == want


def test_memory_cap_saturates_dispatch() -> None:
    q = DualPhaseQueue(think_batch_multiplier=3.0, min_think_reservation=0)
    for i in range(10):
        q.add(("t", i))
        q.add(("o", i), phase="output")
    for blocks, want in [
        (100, (4, 10)),
        (14, (4, 10)),
        (6, (4, 2)),
        (4, (4, 0)),
        (3, (3, 0)),
        (0, (0, 0)),
    ]:
        out, think = q.schedule_phases(4, blocks)
        assert (len(out), len(think)) == want
        assert len(out) + len(think) <= blocks


def test_phase_transition_between_two_schedule_calls() -> None:
    q = DualPhaseQueue(think_batch_multiplier=1.0, min_think_reservation=0)
    q.add("o1", phase="output")
    q.add("r")
    q.add("t2")
    out, think = q.schedule_phases(1, 10)
    assert ids(out) == ["o1"] and ids(think) == ["r"]
    assert q.on_phase_event("r") is True  # emitted </think>
    assert q.phase_of("r") == "output"
    assert q.on_phase_event("r") is False
    out, think = q.schedule_phases(1, 10)
    assert ids(out) == ["r"]  # head of the output order
    assert ids(think) == ["t2"]
    assert q.len("think") == 1 and q.len("output") == 2 and q.len() == 3
    assert q.metrics()["phase_transitions_total"] == 1
    with pytest.raises(KeyError):
        q.on_phase_event("nope")


def test_starvation_guard() -> None:
    # Output below its budget but filling all blocks every step.
    def run(reservation: int) -> tuple[int, dict[str, int]]:
        q = DualPhaseQueue(think_batch_multiplier=2.0, min_think_reservation=reservation)
        for i in range(3):
            q.add(("o", i), phase="output")
        for i in range(5):
            q.add(("t", i))
        served = 0
        for step in range(50):
            q.add(("late", step), phase="output")  # sustained output arrivals...
            q.remove(("late", step))  # ...that finish within the step
            _, think = q.schedule_phases(4, 3)
            served += len(think)
        return served, q.metrics()

    served, m = run(0)
    assert served == 0 and m["think_wait_longest_rounds"] == 50
    served, m = run(1)
    assert served == 50
    assert m["budget_force_triggered_total"] == 50
    assert m["think_wait_longest_rounds"] <= 5  # every think request gets a turn
    # When output is at its budget the guard is off: think waits its turn.
    q = DualPhaseQueue(think_batch_multiplier=2.0, min_think_reservation=2)
    for i in range(4):
        q.add(i, phase="output")
    q.add("t")
    assert q.schedule_phases(4, 4)[1] == []


@pytest.mark.parametrize("m", [0.99, 0.0, -1.0, math.nan, math.inf])
def test_multiplier_below_one_is_value_error(m: float) -> None:
    with pytest.raises(ValueError, match="think_batch_multiplier"):
        DualPhaseQueue(think_batch_multiplier=m)


def test_bad_input_leaves_queue_unchanged() -> None:
    q = DualPhaseQueue()
    q.add("a", 1)
    with pytest.raises(ValueError, match="already queued"):
        q.add("a", 2, phase="output")
    with pytest.raises(ValueError, match="phase"):
        q.add("b", phase="answer")
    with pytest.raises(TypeError):
        q.add(["unhashable"])
    with pytest.raises(ValueError, match="min_think_reservation"):
        DualPhaseQueue(min_think_reservation=-1)
    with pytest.raises(ValueError, match="output_budget"):
        q.schedule(-1, 4)
    with pytest.raises(ValueError, match="available_blocks"):
        q.schedule(1, -4)
    with pytest.raises(KeyError):
        q.remove("zz")
    assert len(q) == 1 and q.phase_of("a") == "think" and q.metrics()["schedule_calls_total"] == 0
    assert q.remove("a") == 1 and not q


def test_metrics_dict_and_prometheus_export() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    q = DualPhaseQueue()
    q.add("t")
    q.add("o", phase="output")
    q.schedule(2, 10)
    m = q.metrics()
    assert set(m) == {
        "queue_depth_output",
        "queue_depth_think",
        "batch_size_output",
        "batch_size_think",
        "scheduled_output_total",
        "scheduled_think_total",
        "budget_force_triggered_total",
        "think_wait_longest_rounds",
        "phase_transitions_total",
        "schedule_calls_total",
    }
    reg = prometheus_client.CollectorRegistry()
    q.register_prometheus(reg, prefix="dp")
    text = prometheus_client.generate_latest(reg).decode()
    assert 'dp_queue_depth{queue="output"} 1.0' in text
    assert 'dp_batch_size{phase="think"} 1.0' in text
    assert 'dp_scheduled_total{phase="output"} 1.0' in text
    assert "dp_budget_force_triggered_total 0.0" in text
    assert "dp_think_wait_longest_rounds 0.0" in text
    reg = prometheus_client.CollectorRegistry()
    q.register_prometheus(reg, name="decode-0")
    q.register_prometheus(reg, name="decode-1")  # two queues, one registry
    v = reg.get_sample_value
    assert v("fairq_dualphase_queue_depth", {"name": "decode-1", "queue": "output"}) == 1
    assert v("fairq_dualphase_schedule_calls_total", {"name": "decode-0"}) == 1


class RefDual:
    """Pure-Python model of section 4 (two deques, one block per slot)."""

    def __init__(self, mult: float, reservation: int) -> None:
        self.mult, self.res = mult, reservation
        self.q: dict[str, deque[int]] = {"think": deque(), "output": deque()}

    def schedule(self, budget: int, blocks: int) -> tuple[list[int], list[int]]:
        out_q, th_q = self.q["output"], self.q["think"]
        reserve = min(self.res, len(th_q), blocks) if self.res and len(out_q) < budget else 0
        n_out = min(len(out_q), budget, blocks, blocks - reserve)
        n_th = min(len(th_q), max(math.floor(budget * self.mult), reserve), blocks - n_out)
        out = [out_q.popleft() for _ in range(n_out)]
        th = [th_q.popleft() for _ in range(n_th)]
        out_q.extend(out)
        th_q.extend(th)
        return out, th


class DualMachine(RuleBasedStateMachine):
    @initialize(mult=st.sampled_from([1.0, 1.5, 2.5]), res=st.integers(0, 3))
    def setup(self, mult: float, res: int) -> None:
        self.q = DualPhaseQueue(think_batch_multiplier=mult, min_think_reservation=res)
        self.ref = RefDual(mult, res)
        self.n = 0

    @rule(phase=st.sampled_from(["think", "output"]))
    def add(self, phase: str) -> None:
        self.q.add(self.n, phase=phase)
        self.ref.q[phase].append(self.n)
        self.n += 1

    @rule(i=st.integers(0, 50))
    def remove(self, i: int) -> None:
        if i in self.q:
            self.q.remove(i)
            for d in self.ref.q.values():
                if i in d:
                    d.remove(i)

    @rule(i=st.integers(0, 50))
    def phase_event(self, i: int) -> None:
        if i in self.ref.q["think"]:
            assert self.q.on_phase_event(i)
            self.ref.q["think"].remove(i)
            self.ref.q["output"].appendleft(i)

    @rule(budget=st.integers(0, 6), blocks=st.integers(0, 12))
    def schedule(self, budget: int, blocks: int) -> None:
        out, think = self.q.schedule_phases(budget, blocks)
        assert (ids(out), ids(think)) == self.ref.schedule(budget, blocks)

    @invariant()
    def same_queues(self) -> None:
        assert self.q.ids("output") == list(self.ref.q["output"])
        assert self.q.ids("think") == list(self.ref.q["think"])


DualMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40)
TestDualPhaseModel = DualMachine.TestCase
