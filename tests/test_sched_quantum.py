"""DLPM's automatic quantum (ALGORITHMS.md §6, ``rust/quantum.rs``): how it
is asked for (the class, the engines' options), what it follows, its saved
memory, and the errors. The bound on random traces is in
``test_sched_fairness.py``, the reference model in ``test_sched.py``
(``dlpm-auto``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fairq import DLPM, RadixTree
from fairq.engineopts import policy_options


def drive(s: DLPM, n: int, input_len: int, output: int, client: str = "a") -> None:
    """``n`` requests of ``input_len`` distinct tokens, each admitted, charged
    ``output`` tokens and finished."""
    for i in range(n):
        rid = f"{client}{i}-{input_len}"
        s.add(rid, client, [hash((rid, j)) % 1_000_000 for j in range(input_len)])
        assert [a.request_id for a in s.schedule(10**6, max_requests=1)] == [rid]
        s.charge_output(rid, output)
        s.finish(rid)


def test_auto_starts_at_the_initial_value_then_follows_the_uncached_cost() -> None:
    s = DLPM(RadixTree(), "auto")
    assert s.quantum == policy_options("dlpm")["quantum"] == 512.0
    drive(s, 200, input_len=100, output=10)
    # scale 0.8 (the default) x (w_e * 100 + w_q * 10) = 0.8 x 120: the uncached cost
    assert s.quantum == 96.0
    assert s.largest_quantum >= 120.0
    drive(s, 400, input_len=300, output=10)  # the window (~64 admissions) moves on
    assert s.quantum == 256.0  # 0.8 x 320


def test_cache_hits_do_not_shrink_it() -> None:
    """The quantum follows the cost of a miss, not the charge: a client whose
    prompts are all cached is charged little, its quantum does not move."""
    tree = RadixTree()
    s = DLPM(tree, "auto")
    prompt = list(range(200))
    tree.insert(prompt)
    for i in range(100):
        s.add(i, "a", prompt)
        (a,) = s.schedule(10**6, max_requests=1)
        assert a.extend_len == 0
        s.charge_output(i, 5)
        s.finish(i)
    assert s.quantum == 168.0  # 0.8 x (200 + 2 x 5)


def test_a_number_is_fixed_unless_a_scale_is_given() -> None:
    fixed = DLPM(RadixTree(), 777.0)
    drive(fixed, 50, input_len=100, output=10)
    assert fixed.quantum == 777.0 == fixed.largest_quantum
    assert fixed.state_dict()["options"]["quantum_scale"] == 0.0
    assert "quantum_memory" not in fixed.state_dict()
    scaled = DLPM(RadixTree(), 777.0, quantum_scale=3.0)
    assert scaled.quantum == 777.0  # the initial value
    drive(scaled, 200, input_len=100, output=10)
    assert scaled.quantum == 360.0


def test_engine_options_default_to_auto_and_a_number_means_fixed() -> None:
    auto = policy_options("dlpm")
    assert auto["quantum_scale"] > 0
    assert policy_options("dlpm", {"quantum": "auto"}) == auto
    assert policy_options("dlpm", {"quantum": " AUTO "}) == auto
    assert policy_options("dlpm", {"quantum": 2048})["quantum_scale"] == 0.0
    both = policy_options("dlpm", {"quantum": 2048, "quantum_scale": 2})
    assert both["quantum"] == 2048.0 and both["quantum_scale"] == 2.0
    assert policy_options("dlpm", {"quantum_scale": 0})["quantum_scale"] == 0.0


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"quantum": "fast"}, TypeError, "'quantum' must be a number or \"auto\""),
        ({"quantum_scale": -1}, ValueError, "'quantum_scale' must be a finite number >= 0"),
        ({"quantum_scale": math.inf}, ValueError, "'quantum_scale'"),
        ({"quantum": 0}, ValueError, "'quantum' must be a finite number > 0"),
        # scale 0 turns "auto" off: it was silently the fixed initial 512
        ({"quantum": "auto", "quantum_scale": 0}, ValueError, "'quantum_scale' must be > 0 with"),
    ],
)
def test_engine_option_errors_name_the_field(options: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        policy_options("dlpm", options)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("fast",), {}, ValueError, 'quantum must be a number or "auto"'),
        ((100.0,), {"quantum_scale": -1.0}, ValueError, "quantum_scale must be a finite"),
        ((100.0,), {"quantum_scale": math.nan}, ValueError, "quantum_scale"),
        ((100.0,), {"quantum_scale": "x"}, TypeError, "quantum_scale must be a number"),
        ((math.inf,), {}, ValueError, "quantum must be a finite number > 0"),
        (
            ("auto",),
            {"quantum_scale": 0.0},
            ValueError,
            'quantum_scale must be > 0 with quantum="auto"',
        ),
    ],
)
def test_constructor_errors_name_the_field(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        DLPM(RadixTree(), *args, **kwargs)


def test_state_keeps_the_learned_quantum() -> None:
    s = DLPM(RadixTree(), "auto")
    drive(s, 100, input_len=100, output=10)
    state = s.state_dict()
    assert set(state["quantum_memory"]) == {"cost", "count"}
    r = DLPM(RadixTree(), "auto")
    r.load_state_dict(state)
    assert r.quantum == s.quantum == 96.0  # 0.8 x 120
    assert r.state_dict()["quantum_memory"] == state["quantum_memory"]
    # both go on alike
    drive(s, 10, input_len=300, output=0)
    drive(r, 10, input_len=300, output=0)
    assert r.quantum == s.quantum


def test_a_state_from_before_the_option_loads_as_fixed() -> None:
    s = DLPM(RadixTree(), 300.0)
    state = s.state_dict()
    del state["options"]["quantum_scale"]
    r = DLPM(RadixTree(), "auto")
    r.load_state_dict(state)
    assert r.state_dict()["options"]["quantum_scale"] == 0.0
    drive(r, 20, input_len=100, output=10)
    assert r.quantum == 300.0


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"quantum_memory": {"cost": -1.0, "count": 1.0}}, "quantum_memory.cost must be >= 0"),
        ({"quantum_memory": {"cost": 1.0}}, "quantum_memory.count is required"),
        ({"quantum_memory": {"cost": 1.0, "count": 1.0, "x": 0}}, "x"),
        ({"options": {"quantum": 1.0, "w_e": 1.0, "w_q": 2.0, "quantum_scale": -2.0}}, "scale"),
    ],
)
def test_bad_saved_memory_is_named_and_changes_nothing(change: dict[str, Any], match: str) -> None:
    s = DLPM(RadixTree(), "auto")
    drive(s, 30, input_len=100, output=10)
    state = {**s.state_dict(), **change}
    r = DLPM(RadixTree(), "auto")
    before = r.state_dict()
    with pytest.raises(ValueError, match=match):
        r.load_state_dict(state)
    assert r.state_dict() == before
