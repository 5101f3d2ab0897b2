"""The paper replication's parts: SGLang's LPM and Preble in the simulator,
the roofline step model, the paper-shaped workload options, and the claims
table (``fairq simulate --paper``)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fairq
from fairq.dispatch import NO_ESCAPE, make_dispatcher
from fairq.sched import make_scheduler
from fairq.sim import SimConfig, StepModel, make_workload, simulate, summarize
from fairq.sim.engine import base_policy
from fairq.sim.model import attn_pairs
from fairq.sim.paper import (
    CLAIMS,
    _upto,
    claims_table,
    latency_key,
    markdown,
    plan,
    quanta,
    run_plan,
)

A10G = StepModel.preset("a10g-3b")

# ---- baselines ----------------------------------------------------------------


def test_lpm_sglang_variant_is_lpm_with_sglangs_rule() -> None:
    s = make_scheduler("lpm-sglang", fairq.RadixTree())
    assert isinstance(s, fairq.LPM) and s.stop_at_unfit and s.fcfs_above == 128
    plain = make_scheduler("lpm", fairq.RadixTree())
    assert not plain.stop_at_unfit and plain.fcfs_above is None
    assert base_policy("LPM-SGLang") == "lpm"
    with pytest.raises(ValueError, match="lpm-sglang"):
        base_policy("wfq")
    with pytest.raises(ValueError, match="no option 'quantum'"):
        make_scheduler("lpm-sglang", fairq.RadixTree(), quantum=1.0)


def test_preble_local_variant_is_lpm_with_prebles_queue() -> None:
    s = make_scheduler("preble-local", fairq.RadixTree())
    assert isinstance(s, fairq.LPM) and s.multi_priority
    assert not s.stop_at_unfit and s.fcfs_above is None
    assert not make_scheduler("lpm", fairq.RadixTree()).multi_priority
    assert base_policy("Preble-Local") == "lpm"
    with pytest.raises(ValueError, match="excludes stop_at_unfit"):
        fairq.LPM(fairq.RadixTree(), multi_priority=True, stop_at_unfit=True)


def test_preble_local_serves_each_hit_level_in_turn() -> None:
    """The tree holds [1..10]: hot prompts (10 of 11 tokens cached) are level
    9, cold ones level 0. One level per schedule, from the top: all hot
    first, then the cold ones, whatever the budget; plain LPM takes the hot
    ones first as well but then goes on in the same call."""
    t = fairq.RadixTree()
    t.insert(list(range(1, 11)))
    s = make_scheduler("preble-local", t)
    for i in range(3):
        s.add(f"cold{i}", "c", [100 + i] * 11)
    for i in range(3):
        s.add(f"hot{i}", "h", list(range(1, 12)))
    assert [a.request_id for a in s.schedule(1000)] == ["hot0", "hot1", "hot2"]
    assert [a.request_id for a in s.schedule(1000)] == ["cold0", "cold1", "cold2"]


def test_lpm_rule_errors_name_the_field() -> None:
    t = fairq.RadixTree()
    with pytest.raises(ValueError, match="fcfs_above must be an int >= 0, got -1"):
        fairq.LPM(t, fcfs_above=-1)
    with pytest.raises(TypeError, match="fcfs_above must be an int"):
        fairq.LPM(t, fcfs_above=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fairq.LPM(t, stop_at_unfit=1)  # type: ignore[arg-type]


def test_lpm_stop_at_unfit_worked_example() -> None:
    """The tree holds [1..4]; LPM order: b (match 4, extend 8), c (match 2,
    extend 1), a (extend 6). Budget 7: the paper's walk skips b; SGLang's
    stops at b, and the oversize rule then admits b alone."""
    for stop, want in ((False, ["c", "a"]), (True, ["b"])):
        t = fairq.RadixTree()
        t.insert([1, 2, 3, 4])
        s = fairq.LPM(t, stop_at_unfit=stop)
        s.add("a", "x", [9] * 6)
        s.add("b", "y", list(range(1, 13)))
        s.add("c", "z", [1, 2, 5])
        assert [a.request_id for a in s.schedule(7)] == want


def test_preble_never_escapes_the_prefix_holder() -> None:
    """The SGLang router leaves affinity once one worker has > 32 requests
    and 1.5x another's; Preble (as the paper describes it) does not."""
    prompt = list(range(100))
    router = make_dispatcher("affinity", 2)
    preble = make_dispatcher("preble", 2)
    got_router = [router.dispatch(i, "c", prompt) for i in range(40)]
    got_preble = [preble.dispatch(i, "c", prompt) for i in range(40)]
    assert got_preble == [0] * 40
    assert 1 in got_router and got_router[:33] == [0] * 33
    # a short match (ratio < 0.5) still explores the least-loaded worker
    assert preble.dispatch(99, "c", list(range(10)) + list(range(500, 600))) == 1
    assert NO_ESCAPE > 1e18


def test_labels_name_the_baselines() -> None:
    assert SimConfig(workers=4, policy="lpm", dispatcher="affinity").label() == "SGLangRouter+LPM"
    assert (
        SimConfig(workers=4, policy="lpm-sglang", dispatcher="preble").label()
        == "Preble+LPM-SGLang"
    )
    assert SimConfig(workers=1, policy="lpm-sglang").label() == "LPM-SGLang"
    assert (
        SimConfig(workers=4, policy="preble-local", dispatcher="preble").label()
        == "Preble+Preble-local"
    )


def test_sglang_lpm_runs_in_the_simulator_and_every_request_leaves_once() -> None:
    wl = make_workload("qa", misbehave="S1", scale=0.05, rate=20.0, duration=4.0)
    for cfg in (
        SimConfig(workers=1, policy="lpm-sglang", model=A10G),
        SimConfig(workers=3, policy="lpm-sglang", dispatcher="preble", model=A10G),
        SimConfig(workers=1, policy="preble-local", model=A10G),
        SimConfig(workers=3, policy="preble-local", dispatcher="preble", model=A10G),
    ):
        sim = simulate(wl, cfg)
        assert sim.complete and len(sim.finish) == len(wl.requests)
        assert all(len(w.sched) == 0 and w.sched.num_running == 0 for w in sim.workers)


# ---- step model -----------------------------------------------------------------


def test_roofline_step_time_worked_example() -> None:
    m = StepModel(c0=0.001, c_weights=0.010, c_prefill=1e-4, c_decode=1e-4, c_kv=1e-8, c_attn=1e-9)
    lin = m.step_time(100, 10, 1000, 5000)
    assert lin == pytest.approx(0.001 + 0.010 + 100e-4 + 10e-4 + 1000e-8 + 5000e-9)
    roof = replace(m, roofline=1)
    # memory 0.010 + 1e-5 vs compute 0.0110 + 5e-6: compute wins
    assert roof.step_time(100, 10, 1000, 5000) == pytest.approx(0.001 + 0.011005)
    # decode only: memory-bound, so decode compute is free up to the weight read
    assert roof.step_time(0, 50, 0) == pytest.approx(0.001 + 0.010)
    with pytest.raises(ValueError, match="roofline must be 0 or 1"):
        StepModel(roofline=2)
    assert StepModel.from_overrides(["roofline=1"]).roofline == 1
    # the linear presets are unchanged by the new terms
    assert A10G.c_weights == 0 and A10G.c_attn == 0 and A10G.roofline == 0


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(0, 5000),
    chunks=st.lists(st.integers(1, 3000), min_size=1, max_size=6),
)
def test_attention_pairs_do_not_depend_on_chunking(start: int, chunks: list[int]) -> None:
    """Prefilling n tokens in chunks computes the same causal pairs as in one
    go: the quadratic term charges a prompt the same however it is split."""
    pos = start
    total = 0
    for n in chunks:
        total += attn_pairs(pos, n)
        pos += n
    n = sum(chunks)
    assert total == attn_pairs(start, n) == n * start + n * (n + 1) // 2


def test_attention_term_makes_long_prompts_cost_more_than_linear() -> None:
    wl = make_workload("qa", misbehave=None, scale=0.2, rate=0.5, duration=6.0)
    lin = StepModel.preset("a10g-3b-roofline")
    no_attn = replace(lin, c_attn=0.0)
    a = summarize(simulate(wl, SimConfig(workers=1, policy="fcfs", model=lin)))
    b = summarize(simulate(wl, SimConfig(workers=1, policy="fcfs", model=no_attn)))
    assert a["ttft_p50_s"] > b["ttft_p50_s"]


# ---- workloads ----------------------------------------------------------------


def test_shared_prefix_shares_the_few_shot_prefix_and_changes_nothing_else() -> None:
    base = make_workload("tot", misbehave=None, seed=3, duration=30.0, rate=0.1)
    same = make_workload(
        "tot", misbehave=None, seed=3, duration=30.0, rate=0.1, shared_prefix=False
    )
    assert [r.tokens.tolist() for r in base.requests] == [r.tokens.tolist() for r in same.requests]
    shared = make_workload(
        "tot", misbehave=None, seed=3, duration=30.0, rate=0.1, shared_prefix=True
    )
    roots = {r.client: r.tokens for r in shared.requests if not r.after}
    n = int(round(400 * 0.25))
    heads = {tuple(t[:n].tolist()) for t in roots.values()}
    assert len(roots) == 4 and len(heads) == 1
    own = {r.client: r.tokens for r in base.requests if not r.after}
    assert len({tuple(t[:n].tolist()) for t in own.values()}) == 4
    judge = make_workload("judge", misbehave=None, duration=20.0, shared_prefix=True)
    sys_len = int(round(100 * 0.25))
    assert len({tuple(r.tokens[:sys_len].tolist()) for r in judge.requests}) == 1


def test_bad_docs_gives_the_misbehaving_client_more_documents() -> None:
    wl = make_workload("qa", misbehave="S1", scale=0.05, rate=2.0, duration=60.0, bad_docs=12)
    docs = {}
    for r in wl.requests:
        docs.setdefault(r.client, set()).add(tuple(r.tokens[:50].tolist()))
    assert len(docs["client0"]) > 6 >= max(len(v) for c, v in docs.items() if c != "client0")
    with pytest.raises(ValueError, match="bad_docs"):
        make_workload("qa", bad_docs=0)


def test_summary_reports_the_busiest_workers_share() -> None:
    wl = make_workload("qa", misbehave="S1", scale=0.05, rate=8.0, duration=4.0)
    m = summarize(simulate(wl, SimConfig(workers=2, policy="lpm", dispatcher="rr", model=A10G)))
    assert 0.5 <= m["busiest_worker_share"] <= 0.55
    assert m["max_input_len"] == max(r.input_len for r in wl.requests)
    assert m["kv_capacity"] == A10G.kv_capacity


# ---- the claims ----------------------------------------------------------------


def test_upto_verdicts() -> None:
    assert _upto(4.0, None, [("a", 3.0), ("b", 1.2)])[1] == "reproduced"
    assert _upto(4.0, None, [("a", 1.5), ("b", 1.1)])[1] == "direction only"
    assert _upto(4.0, None, [("a", 0.9), ("b", 0.8)])[1] == "not reproduced"
    # the mean counts too: a high maximum with a mean far below the paper's
    text, verdict, detail = _upto(4.0, 3.0, [("a", 2.5), ("b", 0.5), ("c", 0.5)])
    assert verdict == "direction only" and "up to 2.50x (a)" in text and "1/3" in detail
    assert _upto(4.0, 3.0, [("a", 2.5), ("b", 0.2), ("c", 0.2)])[1] == "not reproduced"
    assert _upto(4.0, None, [])[1] == "not run"


def test_quanta_scale_with_prompt_length() -> None:
    from fairq.sim.paper import FIG7_SPECS

    q = {s.key: quanta(s) for s in FIG7_SPECS}
    assert q["qa-S1"][0] > 10 * q["tot-S1"][0] >= 10 * 2000
    assert all(qw == 10 * qu for qu, qw in q.values())
    assert latency_key("qa-S2") == "ttft_p99_s" and latency_key("tot-S1") == "program_p99_s"


def test_claims_table_on_a_small_plan() -> None:
    """Every claim gets fairq's number and a verdict from a (scaled-down) run;
    the bound checks report how tight they are."""
    results = run_plan(plan((1, 2), scale=0.05), progress=False)
    assert all(r["complete"] for r in results)
    # Preble runs with its own local queue, not SGLang's LPM
    schedulers = {r["scheduler"] for r in results if r["workers"] > 1 and r["tag"] == "fig7"}
    assert "Preble+Preble-local" in schedulers and "Preble+LPM-SGLang" not in schedulers
    rows = claims_table(results)
    assert len(rows) == len(CLAIMS) >= 13
    verdicts = {
        "reproduced",
        "direction only",
        "partly",
        "not reproduced",
        "holds",
        "violated",
        "no backlogged window",
    }
    for row in rows:
        assert row["verdict"] in verdicts, row
        assert row["fairq"] != "-" or row["verdict"] == "no backlogged window", row
        if row["verdict"] not in ("reproduced", "holds"):
            claim = next(c for c in CLAIMS if c.text == row["claim"])
            assert not claim.why_not or "Why:" in row["detail"]
    md = markdown(rows, results, "# claims")
    table = [line for line in md.splitlines() if line.startswith("|")]
    # a cell's own "|" (Theorem 5.1's 2 |W| ...) is escaped: every row has 7 bars
    claims_rows = table[: 2 + len(rows)]
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 7 for line in claims_rows)
    assert "2 \\|W\\|" in md
    for row in rows[-2:]:  # Theorems 4.1 and 5.1
        assert row["verdict"] == "holds" and "of the bound" in row["fairq"]
    for r in results:  # Theorem 4.1 / 5.1 per run, as the table computes them
        if r["policy"] == "dlpm" and r.get("tag") == "fig7":
            w = r["workers"]
            u = r["max_input_len"] + 2 * r["kv_capacity"]
            assert r["max_gap_cost"] <= 2 * w * (u + r["user_quantum"])


def test_cli_paper_rejects_what_it_does_not_take() -> None:
    for extra in (["--workload", "qa"], ["--quantum", "5"], ["--preset", "a100-8b"]):
        p = subprocess.run(
            [sys.executable, "-m", "fairq", "simulate", "--paper", *extra],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 2 and extra[0] in p.stderr and "--paper" in p.stderr
