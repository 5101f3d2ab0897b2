"""Requests larger than a step's token budget: the oversize rule of the local
schedulers (admitted alone when a call admits nothing), the same in FCFS, LPM,
VTC and DLPM, and the reject mode (``max_prompt_tokens``). The rule is the Rust
core's (``LocalScheduler::schedule_step``); the reference model in
tests/reference/sched.py states it too and test_sched.py compares the two."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq.sched import POLICIES, POLICY_INFO, admit, make_scheduler

Sched = fairq.FCFS | fairq.LPM | fairq.VTC | fairq.DLPM
NAMES = sorted(POLICIES)


def build(name: str, **kw: Any) -> Sched:
    opts = {"dlpm": {"quantum": 2048.0}}.get(name, {})
    cls: Any = POLICIES[name]
    return cls(fairq.RadixTree(), **opts, **kw)


def ids(adm: list[fairq.Admission]) -> list[Any]:
    return [a.request_id for a in adm]


@pytest.mark.parametrize("name", NAMES)
def test_issue_9000_token_request_with_budget_8192(name: str) -> None:
    """The issue's case: a 9,000-token prompt never fits an 8,192-token step.
    It used to block FCFS and VTC for good (``schedule(8192, n)`` admitted
    nothing, not even other clients' 3-token requests). Now it is admitted
    alone once a call would admit nothing else, and everyone gets through."""
    s = build(name)
    s.add("big", "tenant-big", list(range(9000)))
    for i in range(6):
        s.add(f"small{i}", f"tenant-{i % 3}", [10_000 + i] * 3)
    calls = []
    while len(s):
        adm = s.schedule(8192, 4)
        assert adm, f"{name}: a call admitted nothing with {len(s)} waiting"
        assert sum(a.extend_len for a in adm) <= 8192 or ids(adm) == ["big"]
        calls.append(ids(adm))
        for a in adm:
            s.finish(a.request_id)
    assert ["big"] in calls  # alone, in a call of its own
    assert sorted(r for c in calls for r in c) == sorted(["big"] + [f"small{i}" for i in range(6)])
    # its turn comes first where a pass stops at the first unfit request:
    # FCFS by arrival, VTC and LAS by first-seen tie
    if POLICY_INFO[name].stop_at_unfit:
        assert calls[0] == ["big"]
    else:  # LPM, DLPM skip what does not fit: the small ones first
        assert calls[-1] == ["big"]
    assert s.service("tenant-big") == 9000


@pytest.mark.parametrize("name", NAMES)
def test_a_request_that_only_misses_what_is_left_waits(name: str) -> None:
    s = build(name)
    s.add(1, "a", [1] * 6)
    s.add(2, "a", [2] * 8)
    assert ids(s.schedule(10)) == [1]  # 8 does not fit the 4 left: it waits
    assert ids(s.schedule(10)) == [2]
    assert s.schedule(10, 0) == []  # no slot: no rule


@pytest.mark.parametrize("name", NAMES)
def test_oversize_budget_caps_or_turns_off_the_rule(name: str) -> None:
    s = build(name)
    s.add(1, "a", [1] * 40)
    s.add(2, "b", [2] * 20)
    assert s.schedule(10, oversize_budget=0) == []
    assert s.schedule_within_credit(10, oversize_budget=0) == []
    assert s.schedule(10, oversize_budget=19) == []
    got = ids(s.schedule(10, oversize_budget=30))
    # FCFS and VTC stop at their next request (40 > 30); LPM and DLPM skip to 20
    assert got == ([] if POLICY_INFO[name].stop_at_unfit else [2])
    assert len(s.schedule(10)) == 1
    s._check()


def test_oversize_budget_is_checked() -> None:
    s = fairq.FCFS()
    s.add(1, "a", [1] * 4)
    with pytest.raises(ValueError, match="oversize_budget must be an int >= 0, got -1"):
        s.schedule(1, oversize_budget=-1)
    with pytest.raises(TypeError, match="oversize_budget must be an int"):
        s.schedule_within_credit(1, oversize_budget=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.schedule(1, 1, 10)  # type: ignore[call-arg]  # keyword-only
    assert len(s) == 1


@pytest.mark.parametrize("name", NAMES)
def test_max_prompt_tokens_rejects_at_add_and_changes_nothing(name: str) -> None:
    s = build(name, max_prompt_tokens=8192)
    assert s.max_prompt_tokens == 8192 and build(name).max_prompt_tokens is None
    s.add("ok", "a", [1] * 8192)  # the limit itself is accepted
    before = (len(s), s.clients(), s.num_clients, s.state_dict())
    with pytest.raises(ValueError) as e:
        s.add("req-9000", "b", [2] * 9000)
    msg = str(e.value)
    assert '"req-9000"' in msg and "9000 prompt tokens" in msg and "max_prompt_tokens = 8192" in msg
    assert (len(s), s.clients(), s.num_clients, s.state_dict()) == before
    s._check()
    s.add("req-9000", "b", [2] * 3)  # the id was never taken
    assert len(s) == 2
    # an engine setting, not fairness state: a restore keeps the constructor's
    fresh = build(name, max_prompt_tokens=5)
    fresh.load_state_dict(build(name, max_prompt_tokens=8192).state_dict())
    assert fresh.max_prompt_tokens == 5


def test_max_prompt_tokens_is_checked() -> None:
    with pytest.raises(ValueError, match="max_prompt_tokens must be an int >= 0"):
        fairq.VTC(max_prompt_tokens=-1)
    with pytest.raises(TypeError, match="max_prompt_tokens must be an int"):
        fairq.DLPM(fairq.RadixTree(), 1.0, max_prompt_tokens="8k")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fairq.LPM(fairq.RadixTree(), 8192)  # type: ignore[call-arg]  # keyword-only


def test_admit_is_the_engine_step_convention() -> None:
    """``admit`` passes ``oversize_budget=head_budget`` (None: 0, another prefill
    is under way) and nothing for a step with no room and no head budget."""
    s = make_scheduler("fcfs")
    s.add(0, "a", [0] * 100)
    assert admit(s, 10, 4) == []
    assert admit(s, 0, 4) == [] and admit(s, -5, 4) == []
    assert admit(s, 10, 4, head_budget=99) == []
    (a,) = admit(s, -5, 4, head_budget=100)
    assert a.request_id == 0


# ------------------------------------------------------------ liveness

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "schedule", "finish"]),
        st.integers(0, 2),  # client
        st.integers(1, 40),  # prompt length (budgets 1..16: many never fit)
        st.integers(1, 3),  # max_requests
    ),
    max_size=60,
)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(budget=st.integers(1, 16), steps=STEPS, shared=st.booleans())
def test_no_waiting_request_is_blocked_forever(
    name: str, budget: int, steps: list[tuple[str, int, int, int]], shared: bool
) -> None:
    """Any mix of request sizes, some larger than the budget, schedule calls
    with finishes in between: every call with a request waiting admits one
    (within the budget, or one alone that exceeds it), so once arrivals stop
    every request is admitted, exactly once, within as many calls as wait."""
    tree = fairq.RadixTree()
    s = make_scheduler(name, tree, **({"quantum": 5.0} if name == "dlpm" else {}))
    prompts: dict[int, list[int]] = {}
    waiting: set[int] = set()
    running: list[int] = []
    admitted: list[int] = []

    def step(k: int) -> None:
        adm = s.schedule(budget, k)
        assert bool(adm) == bool(waiting)
        assert len(adm) <= k
        assert sum(a.extend_len for a in adm) <= budget or len(adm) == 1
        for a in adm:
            rid = a.request_id
            assert isinstance(rid, int)
            waiting.remove(rid)
            admitted.append(rid)
            running.append(rid)
            tree.insert(prompts[rid])  # the engine caches the prompt
        s._check()

    for kind, client, n, k in steps:
        if kind == "add":
            rid = len(prompts)
            # shared: prompts share prefixes (LPM/DLPM orders and cache hits)
            prompts[rid] = [7] * (n // 2) + [rid + 100] * (n - n // 2) if shared else [rid] * n
            s.add(rid, "abc"[client], prompts[rid])
            waiting.add(rid)
        elif kind == "schedule":
            step(k)
        elif running:
            rid = running.pop(client % len(running))
            s.charge_output(rid, n)
            s.finish(rid)
    for _ in range(len(waiting)):
        step(1)
    assert not waiting and len(s) == 0
    assert sorted(admitted) == sorted(prompts)  # each exactly once
