"""DLPM's strict credit (ALGORITHMS.md §6, issue 35): its options, state and
errors. Its order is checked against the reference model in
``test_sched.py::test_matches_reference[dlpm-strict]`` and its bound in
``test_sched_fairness.py::test_dlpm_strict_credit_bound``."""

from __future__ import annotations

from typing import Any

import pytest

from fairq import DLPM, RadixTree
from fairq.engineopts import build_policy, policy_options
from fairq.sched import POLICY_INFO


def holding(strict: bool) -> DLPM:
    """a0, a1 of client a and b2 of b, 8 uncached tokens each, quantum 10."""
    s = DLPM(RadixTree(), 10, strict_credit=strict)
    for i, (client, tok) in enumerate([("a", 1), ("a", 2), ("b", 3)]):
        s.add(i, client, [tok] * 8)
    return s


def test_a_client_does_not_start_a_request_on_crumbs() -> None:
    # the paper's rule: a1 goes in on the 2 a has left after a0
    s = holding(False)
    assert [a.request_id for a in s.schedule(100)] == [0, 1, 2]
    assert (s.deficit("a"), s.deficit("b"), s.refills) == (-6.0, 2.0, 1)
    # strict: b2 first; then a (2 left, a1 costs 8) gets one more round
    s = holding(True)
    assert [a.request_id for a in s.schedule(100)] == [0, 2, 1]
    assert (s.deficit("a"), s.deficit("b"), s.refills) == (4.0, 2.0, 2)
    s._check()


def test_the_option_as_the_class_and_the_engines_take_it() -> None:
    # the paper's Algorithm 1 with a number, the engines' DLPM with "auto"
    assert DLPM(RadixTree(), 10).strict_credit is False
    assert DLPM(RadixTree(), 10, strict_credit=None).strict_credit is False
    assert DLPM(RadixTree(), 10, quantum_scale=1.0).strict_credit is False
    assert DLPM(RadixTree(), "auto").strict_credit is True
    assert DLPM(RadixTree(), "auto", strict_credit=False).strict_credit is False
    assert build_policy("dlpm", RadixTree()).strict_credit is True
    assert build_policy("dlpm", RadixTree(), {"quantum": 10}).strict_credit is False
    assert DLPM(RadixTree(), 10, strict_credit=True).strict_credit is True
    assert DLPM(RadixTree(), 10, strict_credit=1.0).strict_credit is True
    assert "strict_credit" in POLICY_INFO["dlpm"].flags
    assert policy_options("dlpm", {"strict_credit": True})["strict_credit"] == 1.0
    assert policy_options("dlpm", {"strict_credit": False})["strict_credit"] == 0.0
    assert build_policy("dlpm", RadixTree(), {"strict_credit": True}).strict_credit is True


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (2, ValueError, "strict_credit must be a bool \\(or 0 / 1\\), got 2"),
        ("yes", TypeError, "strict_credit must be a bool, got str"),
        ([], TypeError, "strict_credit must be a bool, got list"),
    ],
)
def test_a_bad_value_names_the_option(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DLPM(RadixTree(), 10, strict_credit=value)


@pytest.mark.parametrize("value", [2, 0.5, "yes", None, float("nan")])
def test_a_bad_engine_option_names_the_option(value: Any) -> None:
    with pytest.raises(ValueError, match="option 'strict_credit' must be true or false"):
        policy_options("dlpm", {"strict_credit": value})


def test_the_state_keeps_it_and_a_bad_one_changes_nothing() -> None:
    s = holding(True)
    s.schedule(9)
    state = s.state_dict()
    assert state["options"]["strict_credit"] == 1.0
    back = DLPM(RadixTree(), 10)
    back.load_state_dict(state)
    assert back.strict_credit is True
    assert back.deficit("a") == s.deficit("a")
    # a state written before the option existed: off
    old = s.state_dict()
    del old["options"]["strict_credit"]
    fresh = DLPM(RadixTree(), 10, strict_credit=True)
    fresh.load_state_dict(old)
    assert fresh.strict_credit is False
    bad = s.state_dict()
    bad["options"]["strict_credit"] = 0.5
    fresh = DLPM(RadixTree(), 10)
    before = fresh.state_dict()
    with pytest.raises(ValueError, match="strict_credit.*must be 0 or 1"):
        fresh.load_state_dict(bad)
    assert fresh.state_dict() == before
