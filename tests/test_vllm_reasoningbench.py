"""``fairq engine-bench --engine vllm --workload reasoning`` (issue 24, item 5):
the workload, and what one replay on vLLM's real scheduler measures."""

from __future__ import annotations

from typing import Any

import pytest

from reference.vllm import require_tested_vllm

vllm = require_tested_vllm()

from fairq.enginebench import reasoning as rb  # noqa: E402

#: few KV blocks and running slots: vLLM must preempt
TIGHT = {"num_blocks": 500, "max_num_seqs": 16}


def test_workload_is_seeded_and_shaped() -> None:
    wl, think = rb.reasoning_workload(3)
    again, think_again = rb.reasoning_workload(3)
    assert [(r.request_id, r.arrival, r.prompt, r.max_new_tokens) for r in wl] == [
        (r.request_id, r.arrival, r.prompt, r.max_new_tokens) for r in again
    ]
    assert think == think_again
    other, _ = rb.reasoning_workload(4)
    assert [r.prompt for r in other] != [r.prompt for r in wl]
    assert [r.arrival for r in wl] == sorted(r.arrival for r in wl)
    by_tenant: dict[str, list[Any]] = {}
    for r in wl:
        by_tenant.setdefault(r.client, []).append(r)
        k = think[r.request_id]
        out = r.max_new_tokens - k - 1  # think, </think>, output
        assert rb.END_THINK not in r.prompt
        if r.client == "flood":
            assert 1500 <= k <= 2500 and 32 <= out <= 64 and r.arrival <= 1.0
        else:
            assert 100 <= k <= 400 and 128 <= out <= 256
    assert {t: len(v) for t, v in by_tenant.items()} == {"flood": 48, "a": 16, "b": 16, "c": 16}


@pytest.fixture(scope="module")
def runs() -> tuple[list[Any], dict[str, int], dict[str, dict[str, Any]]]:
    wl, think = rb.reasoning_workload(1, flood=12, per_tenant=4, duration=1.0)
    rows = {p: rb.reasoning_run(p, wl, think, engine=TIGHT) for p in ("vllm-fcfs", "dual")}
    rows["dual+dlpm"] = rb.reasoning_run("dual+dlpm", wl, think, engine=TIGHT)
    return wl, think, rows


def test_every_token_is_counted_once_in_its_phase(
    runs: tuple[list[Any], dict[str, int], dict[str, dict[str, Any]]],
) -> None:
    wl, think, rows = runs
    # reasoning_run checks each request got all its tokens (the harness:
    # each finished exactly once); here the split by phase
    for row in rows.values():
        assert row["think_tokens"] == sum(think.values())
        assert row["output_tokens"] == sum(r.max_new_tokens - think[r.request_id] - 1 for r in wl)
        assert 0 < row["output_itl_p50_ms"] <= row["output_itl_p99_ms"] <= row["output_itl_max_ms"]
        assert row["think_tok_s"] > 0
        assert 0.0 <= row["flood_output_share_window"] <= 1.0


def test_dual_phase_preempts_think_before_output(
    runs: tuple[list[Any], dict[str, int], dict[str, dict[str, Any]]],
) -> None:
    """The workload makes vLLM preempt: its own scheduler (newest running
    request first) preempts requests that are already answering; with
    dual_phase the victims are thinking requests (ALGORITHMS.md section 4)."""
    _, _, rows = runs
    stock, dual = rows["vllm-fcfs"], rows["dual"]
    assert stock["preemptions"]["output"] > 0, stock["preemptions"]
    assert dual["preemptions"]["think"] > 0, dual["preemptions"]
    assert dual["preemptions"]["output"] == 0, dual["preemptions"]
    # the starvation guard's work is reported (stock vLLM has none)
    assert dual["reserved_ahead"] > 0
    assert stock["reserved_ahead"] == 0 and stock["forced_reservations"] == 0


def test_dlpm_under_phases_shares_the_output_phase(
    runs: tuple[list[Any], dict[str, int], dict[str, dict[str, Any]]],
) -> None:
    """While every tenant has work, the flooding tenant gets less of the
    output phase with DLPM ordering admission and phases than with arrival
    order, and the well-behaved tenants see their first answer token sooner."""
    _, _, rows = runs
    dual, fair = rows["dual"], rows["dual+dlpm"]
    assert fair["flood_output_share_window"] < dual["flood_output_share_window"]
    assert fair["well_first_visible_p50_s"] < dual["well_first_visible_p50_s"]


def test_summary_table_reports_mean_and_spread() -> None:
    rows = [
        {"output_itl_p50_ms": v, "preemptions": {"output": 1, "think": v}}
        | {
            k: 1.0
            for k, _, _ in rb._COLUMNS
            if k not in ("output_itl_p50_ms", "preempt_output", "preempt_think")
        }
        for v in (1.0, 3.0)
    ]
    table = rb.summary_table({"dual": rows})
    line = table.splitlines()[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[0] == "dual"
    assert cells[1] == "2.0 (1.0-3.0)"  # mean (min-max) over seeds
    assert "1.0" in cells and "(" not in cells[-1]  # equal values: no spread
