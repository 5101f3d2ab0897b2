"""What ``fairq simulate`` prints under its table (:mod:`fairq.sim.story`):
the legend, the fair policies' verdicts against the fastest policy without
a fairness bound, and the sweep's note on Q_w (issue 31, item 4)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fairq.cli import main
from fairq.sim.story import FAIR, legend, story, sweep_note, verdicts


def _r(sched: str, policy: str, tok: float, gap: float, jain: float, **kw: Any) -> dict[str, Any]:
    return {
        "workload": kw.pop("workload", "qa-S1"),
        "workers": kw.pop("workers", 1),
        "scheduler": sched,
        "policy": policy,
        "service_tok_s": tok,
        "max_gap_cost": gap,
        "jain_cost": jain,
        **kw,
    }


def test_the_legend_names_the_columns_that_carry_the_claim() -> None:
    text = legend()
    for words in ("Jain (cost)", "max gap (cost)", "Jain (client)", "fairq simulate --help"):
        assert words in text.replace("\n", " ")


def test_verdicts_compare_each_fair_policy_with_the_fastest_unfair_one() -> None:
    rows = [
        _r("FCFS", "fcfs", 100.0, 5000.0, 0.9),
        _r("LPM", "lpm", 400.0, 8000.0, 0.8),
        _r("VTC", "vtc", 80.0, 8160.0, 0.99),
        _r("DLPM", "dlpm", 396.0, 1000.0, 1.0),
        _r("RR+LPM", "lpm", 900.0, 1.0, 0.5, workers=4, dispatcher="rr"),  # no fair one
    ]
    lines = verdicts(rows)
    assert len(lines) == 3  # a heading and one line per fair policy of qa-S1 x1
    vtc, dlpm = lines[1], lines[2]
    assert "qa-S1, 1 worker: VTC vs LPM" in vtc and "1.02x larger (8,160 vs 8,000)" in vtc
    assert "at 0.20x its service rate" in vtc
    assert "DLPM vs LPM" in dlpm and "8.0x smaller (1,000 vs 8,000)" in dlpm
    assert "Jain (cost) 1.000 vs 0.800" in dlpm and "at 0.99x" in dlpm
    assert set(FAIR) >= {"vtc", "dlpm"}
    assert "contention" not in dlpm  # no window given: no caveat


def test_a_verdict_says_when_there_was_little_contention() -> None:
    rows = [
        _r("LPM", "lpm", 400.0, 8000.0, 0.8),
        _r("DLPM", "dlpm", 396.0, 1000.0, 1.0, jain_window_s=0.09, makespan_s=4.0),
        _r("VTC", "vtc", 396.0, 1000.0, 1.0, jain_window_s=0.5, makespan_s=4.0),
    ]
    dlpm, vtc = verdicts(rows)[1:]
    assert "only 0.09 s of 4 s: little contention" in dlpm
    assert "contention" not in vtc


def test_the_sweep_note_says_why_an_infinite_q_w_is_not_the_default() -> None:
    rows = [
        _r(
            "D2LPM+DLPM Q=20000",
            "dlpm",
            300.0,
            9.0,
            0.99,
            tag="Q_w",
            dispatcher="d2lpm",
            worker_quantum=20000.0,
            workers=4,
        ),
        _r(
            "D2LPM+DLPM Q=inf",
            "dlpm",
            600.0,
            4.0,
            0.99,
            tag="Q_w",
            dispatcher="d2lpm",
            worker_quantum=math.inf,
            workers=4,
        ),
    ]
    note = sweep_note(rows)
    assert "Q_w=inf" in note[0] and "600 tok/s" in note[0]
    assert "default stays Q_w=20000" in note[1]
    assert verdicts(rows) == []  # the sweep's rows get the note, not verdicts
    rows[1]["service_tok_s"] = 100.0
    assert len(sweep_note(rows)) == 1 and "Q_w=20000" in sweep_note(rows)[0]
    assert "How to read it" in story(rows, sweep=True)


def test_simulate_prints_them_from_its_own_results(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "r.json"
    argv = ["simulate", "--workload", "chat", "--workers", "1", "--duration", "2"]
    assert main([*argv, "--no-progress", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out.replace("\n    ", " ")  # a verdict's wrapped lines
    results = json.loads(out_json.read_text())["results"]
    by = {r["scheduler"]: r for r in results}
    ref = max((r for r in results if r["policy"] not in FAIR), key=lambda r: r["service_tok_s"])
    line = next(x for x in out.splitlines() if "chat, 1 worker: DLPM vs" in x)
    assert f"DLPM vs {ref['scheduler']}" in line
    assert f"{by['DLPM']['max_gap_cost']:,.0f} vs {ref['max_gap_cost']:,.0f}" in line
    assert out.index("How to read it") > out.index("| chat |")
