"""The simulator: workloads, conservation, metrics, qualitative claims of the
DLPM paper on small seeded runs (never exact timings), trace replay, CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.sim import (
    SimConfig,
    StepModel,
    TraceError,
    jain,
    make_workload,
    max_backlogged_gap,
    parse_trace,
    simulate,
    summarize,
)
from fairq.sim.cli import table
from fairq.sim.runner import base_config, find_spec

A10G = StepModel.preset("a10g-3b")

# A prefix-heavy, overloaded long-context QA workload with an S1 client.
QA = dict(scale=0.25, rate=4.0, duration=12.0, docs_per_client=16)


def qa_run(policy: str, workers: int = 1, dispatcher: str | None = None, **cfg: object) -> dict:
    wl = make_workload("qa", misbehave="S1", seed=1, **{**QA, "rate": 4.0 * workers})
    c = SimConfig(workers=workers, policy=policy, dispatcher=dispatcher, model=A10G)
    return summarize(simulate(wl, replace(c, **cfg)))  # type: ignore[arg-type]


# ---- workloads -------------------------------------------------------------------


def test_workloads_are_seeded_and_deterministic() -> None:
    for name in ("qa", "tot", "judge", "chat"):
        a = make_workload(name, seed=3, duration=20.0)
        b = make_workload(name, seed=3, duration=20.0)
        c = make_workload(name, seed=4, duration=20.0)
        assert len(a.requests) == len(b.requests) > 0
        for x, y in zip(a.requests, b.requests, strict=False):
            assert x.client == y.client and x.arrival == y.arrival and x.after == y.after
            assert np.array_equal(x.tokens, y.tokens) and x.output_len == y.output_len
        assert [r.input_len for r in a.requests] != [r.input_len for r in c.requests]


def _per_program(wl, client: str) -> list[int]:
    counts: dict[int, int] = {}
    for r in wl.requests:
        if r.client == client:
            counts[r.program] = counts.get(r.program, 0) + 1
    return sorted(set(counts.values()))


def test_table3_structure() -> None:
    tot = make_workload("tot", misbehave="S1", seed=0, rate=0.2, duration=30.0)
    assert _per_program(tot, "client0") == [341]  # 4 branches, height 4
    assert _per_program(tot, "client1") == [31]  # 2 branches
    judge = make_workload("judge", misbehave="S1", seed=0, duration=30.0)
    assert _per_program(judge, "client0") == [18]  # branch + 16 dims + merge
    assert _per_program(judge, "client1") == [4]
    s2 = make_workload("tot", misbehave="S2", seed=0, rate=0.2, duration=30.0, scale=1.0)
    roots = {
        c: np.mean([r.input_len for r in s2.requests if r.client == c and not r.after])
        for c in s2.clients
    }
    assert roots["client0"] > 3 * roots["client1"]  # 10x longer questions
    qa = make_workload("qa", misbehave="S2", seed=0, duration=30.0)
    lens = {c: np.mean([r.input_len for r in qa.requests if r.client == c]) for c in qa.clients}
    assert lens["client0"] > 1.6 * lens["client1"]  # 2x longer documents
    # dependent calls: a ToT child's prompt extends its parent's prompt + output
    by_id = {r.rid: r for r in tot.requests}
    child = next(r for r in tot.requests if r.after)
    parent = by_id[child.after[0]]
    assert parent.output_ids is not None
    head = np.concatenate([parent.tokens, parent.output_ids])
    assert np.array_equal(child.tokens[: len(head)], head)


# ---- conservation and bookkeeping --------------------------------------------


@pytest.mark.parametrize(
    "workers, policy, dispatcher",
    [
        (1, "fcfs", None),
        (1, "lpm", None),
        (1, "vtc", None),
        (1, "dlpm", None),
        (3, "lpm", "rr"),
        (3, "vtc", "client-rr"),
        (3, "lpm", "affinity"),
        (3, "dlpm", "d2lpm"),
    ],
)
def test_every_request_finishes_once(workers: int, policy: str, dispatcher: str | None) -> None:
    wl = make_workload(
        "judge", misbehave="S1", seed=2, scale=0.25, rate=0.6 * workers, duration=10.0
    )
    model = replace(A10G, kv_capacity=20_000)  # small pool: eviction paths run
    sim = simulate(
        wl, SimConfig(workers=workers, policy=policy, dispatcher=dispatcher, model=model)
    )
    assert sim.complete
    assert set(sim.finish) == {r.rid for r in wl.requests}
    for r in wl.requests:
        assert sim.arrival[r.rid] <= sim.first_token[r.rid] <= sim.finish[r.rid]
        for p in r.after:  # dependencies respected
            assert sim.finish[p] <= sim.arrival[r.rid]
    for w in sim.workers:
        assert w.reserved == 0 and not w.runs and len(w.sched) == 0
        assert w.sched.num_running == 0
        assert w.tree.size <= model.kv_capacity
        assert w.tree.evictable_size == w.tree.size  # no lock leaked
    if sim.dispatcher is not None:
        assert len(sim.dispatcher) == 0 and sum(sim.dispatcher.queue_sizes) == 0
    if dispatcher in ("d2lpm", "affinity"):
        # the small pool evicted, and the evictions reached the router
        assert sum(w.evict_reports for w in sim.workers) > 0
        assert sim.dispatcher.tree_nodes > 1
    m = summarize(sim)
    assert m["finished"] == len(wl.requests)
    assert sum(v["requests"] for v in m["per_client"].values()) == len(wl.requests)


def test_client_service_accounting() -> None:
    wl = make_workload("chat", seed=0, duration=10.0)
    sim = simulate(wl, SimConfig(workers=1, policy="vtc", model=A10G))
    m = summarize(sim)
    for c in wl.clients:
        want = sum(r.input_len + 2 * r.output_len for r in wl.requests if r.client == c)
        assert m["per_client"][c]["service"] == pytest.approx(want)


# ---- the paper's qualitative claims (small seeded runs) ----------------------


@pytest.fixture(scope="module")
def qa_one_worker() -> dict[str, dict]:
    return {p: qa_run(p) for p in ("lpm", "vtc", "dlpm")}


def test_dlpm_throughput_clearly_above_vtc(qa_one_worker: dict[str, dict]) -> None:
    r = qa_one_worker
    assert r["dlpm"]["service_tok_s"] > 1.5 * r["vtc"]["service_tok_s"]
    assert r["dlpm"]["cache_hit"] > r["vtc"]["cache_hit"] + 0.1
    # and close to LPM's (within 20 %)
    assert r["dlpm"]["service_tok_s"] > 0.8 * r["lpm"]["service_tok_s"]


def test_dlpm_jain_close_to_vtc(qa_one_worker: dict[str, dict]) -> None:
    """Each fair policy is fair in the service it accounts: VTC in the
    client's view (input + 2 x output), DLPM in the system's cost (extend +
    2 x output). Both indices are within 0.05 of 1."""
    r = qa_one_worker
    assert r["vtc"]["jain_client"] > 0.95
    assert r["dlpm"]["jain_cost"] > 0.95
    assert abs(r["dlpm"]["jain_cost"] - r["vtc"]["jain_client"]) < 0.05


def test_lpm_unfair_under_s1(qa_one_worker: dict[str, dict]) -> None:
    r = qa_one_worker
    assert r["lpm"]["max_gap_cost"] > 3 * r["dlpm"]["max_gap_cost"]
    tot = make_workload("tot", misbehave="S1", seed=0, scale=0.5, rate=0.1, duration=30.0)
    lpm = summarize(simulate(tot, SimConfig(workers=1, policy="lpm", model=A10G)))
    dlpm = summarize(simulate(tot, SimConfig(workers=1, policy="dlpm", model=A10G)))
    assert lpm["max_gap_client"] > 3 * dlpm["max_gap_client"]
    assert lpm["ttft_p99_s"] > 2 * dlpm["ttft_p99_s"]


def test_d2lpm_service_bound_on_random_traces() -> None:
    """Theorem 5.1: two backlogged clients' costs differ by at most
    2 |W| (U + Q_u) over any window, U = w_e * L_input + w_q * M, with M the
    most tokens a worker's running batch can hold (its KV capacity here).

    That bound is loose at this scale, so the test also checks what makes it
    meaningful: D2LPM's largest gap is well below locality-only routing's
    (round-robin + LPM) on the same trace, and stays near the much stricter
    bound that takes M as one request's output (measured: 0.87-1.12x of it
    on these seeds; the theorem does not promise that one)."""
    for seed in range(3):
        wl = make_workload(
            "qa", misbehave="S1", seed=seed, scale=0.1, rate=16.0, duration=8.0, docs_per_client=16
        )
        cfg = SimConfig(workers=4, policy="dlpm", dispatcher="d2lpm", model=A10G)
        m = summarize(simulate(wl, cfg))
        l_in = max(r.input_len for r in wl.requests)
        u = l_in + 2 * A10G.kv_capacity
        assert m["max_gap_cost"] <= 2 * 4 * (u + cfg.user_quantum)
        strict_u = l_in + 2 * max(r.output_len for r in wl.requests)
        assert m["max_gap_cost"] <= 1.25 * 2 * 4 * (strict_u + cfg.user_quantum)
        rr = summarize(simulate(wl, replace(cfg, policy="lpm", dispatcher="rr")))
        assert m["max_gap_cost"] < 0.75 * rr["max_gap_cost"]


def test_d2lpm_beats_client_rr_vtc_throughput() -> None:
    d2 = qa_run("dlpm", workers=2, dispatcher="d2lpm")
    vtc = qa_run("vtc", workers=2, dispatcher="client-rr")
    assert d2["service_tok_s"] > 1.5 * vtc["service_tok_s"]


# ---- metrics ------------------------------------------------------------------


def test_jain_and_gap() -> None:
    assert jain([1, 1, 1]) == pytest.approx(1.0)
    assert jain([1, 0, 0]) == pytest.approx(1 / 3)
    s = np.array([[0, 0], [5, 1], [9, 9], [20, 9]], dtype=float)
    b = np.array([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=bool)
    # D = 0, 4, 0 while both backlogged (last sample excluded)
    assert max_backlogged_gap(s, b) == pytest.approx(4.0)
    assert max_backlogged_gap(s, np.zeros_like(b)) == 0.0


def test_step_model_overrides() -> None:
    m = StepModel.from_overrides(["c0=0.02", "kv_capacity=1000"], A10G)
    assert m.c0 == 0.02 and m.kv_capacity == 1000 and m.c_kv == A10G.c_kv
    assert m.step_time(10, 2, 100) == pytest.approx(
        0.02 + 10 * m.c_prefill + 2 * m.c_decode + 100 * m.c_kv
    )
    with pytest.raises(ValueError, match="KEY=VALUE"):
        StepModel.from_overrides(["nope=1"])
    with pytest.raises(ValueError, match="c0"):
        StepModel(c0=-1.0)
    with pytest.raises(ValueError, match="preset"):
        StepModel.preset("tpu")


# ---- trace replay --------------------------------------------------------------


def test_trace_replay_runs() -> None:
    lines = [
        json.dumps({"time": 0.0, "client": "a", "prompt": [1, 2, 3, 4], "output_len": 3}),
        json.dumps(
            {
                "time": 0.1,
                "client": "b",
                "prompt_len": 50,
                "prefix_id": "doc",
                "prefix_len": 40,
                "output_len": 5,
            }
        ),
        "",
        json.dumps(
            {
                "time": 0.2,
                "client": "b",
                "prompt_len": 60,
                "prefix_id": "doc",
                "prefix_len": 40,
                "output_len": 5,
            }
        ),
    ]
    wl = parse_trace(lines)
    assert [r.input_len for r in wl.requests] == [4, 50, 60]
    assert np.array_equal(wl.requests[1].tokens[:40], wl.requests[2].tokens[:40])
    assert wl.clients == ["a", "b"]
    sim = simulate(wl, SimConfig(workers=2, policy="dlpm", dispatcher="d2lpm"))
    assert sim.complete


@pytest.mark.parametrize(
    "line, match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"client": "a", "prompt_len": 5, "output_len": 1}', "'time'"),
        ('{"time": -1, "client": "a", "prompt_len": 5, "output_len": 1}', "'time'"),
        ('{"time": 0, "client": "", "prompt_len": 5, "output_len": 1}', "'client'"),
        ('{"time": 0, "client": "a", "prompt_len": 5}', "'output_len'"),
        ('{"time": 0, "client": "a", "prompt_len": 5, "output_len": 0}', "'output_len'"),
        ('{"time": 0, "client": "a", "output_len": 2}', "'prompt'"),
        ('{"time": 0, "client": "a", "prompt": [1, -2], "output_len": 2}', r"'prompt'\[1\]"),
        (
            '{"time": 0, "client": "a", "prompt_len": 5, "prefix_id": "p", "prefix_len": 9, '
            '"output_len": 2}',
            "prefix_len",
        ),
        ('{"time": 0, "client": "a", "prompt_len": 2.5, "output_len": 2}', "'prompt_len'"),
        # issue 20, item 4: prefix_len was ignored (accepted silently) without a prefix_id
        (
            '{"time": 0, "client": "a", "prompt_len": 5, "prefix_len": 9, "output_len": 2}',
            r"'prefix_len' \(9\) must be <= 'prompt_len' \(5\)",
        ),
        (
            '{"time": 0, "client": "a", "prompt_len": 5, "prefix_len": 3, "output_len": 2}',
            "'prefix_len' needs 'prefix_id'",
        ),
        (
            '{"time": 0, "client": "a", "prompt": [1, 2], "prefix_len": 9, "output_len": 2}',
            "'prefix_len' goes with 'prompt_len', not with 'prompt'",
        ),
        (
            '{"time": 0, "client": "a", "prompt": [1, 2], "prompt_len": 3, "output_len": 2}',
            r"'prompt_len' \(3\) must equal the length of 'prompt' \(2\)",
        ),
    ],
)
def test_trace_bad_line_reports_line_number(line: str, match: str) -> None:
    good = '{"time": 0, "client": "a", "prompt_len": 5, "output_len": 1}'
    with pytest.raises(TraceError, match=match) as e:
        parse_trace([good, good, line], "t.jsonl")
    assert "t.jsonl:3" in str(e.value)


def test_trace_duplicate_id_and_empty(tmp_path: Path) -> None:
    line = '{"time": 0, "client": "a", "prompt_len": 5, "output_len": 1, "request_id": "x"}'
    with pytest.raises(TraceError, match=":2: duplicate request_id"):
        parse_trace([line, line])
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    from fairq.sim import load_trace

    with pytest.raises(TraceError, match="no requests"):
        load_trace(p)


# ---- CLI ----------------------------------------------------------------------------


def test_cli_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fairq.cli import main

    out = tmp_path / "r.json"
    png = tmp_path / "p.png"
    rc = main(
        [
            "simulate",
            "--workload",
            "qa-S1",
            "--workers",
            "1",
            "--workers",
            "2",
            "--policy",
            "dlpm",
            "--policy",
            "vtc",
            "--duration",
            "4",
            "--no-progress",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "| qa-S1 | 1 | DLPM |" in text and "D2LPM+DLPM" in text and "steps/s" in text
    data = json.loads(out.read_text())
    labels = [r["scheduler"] for r in data["results"]]
    assert labels == ["VTC", "DLPM", "ClientRR+VTC", "D2LPM+DLPM"]
    tl = data["results"][0]["timeline"]  # per-client service over time
    assert set(tl["service_rate"]) == {"client0", "client1", "client2", "client3"}
    assert len(tl["t"]) == len(tl["service_rate"]["client0"]) > 0
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--workload", "qa-S1", "--workers", "1", "--policy", "vtc", "--duration", "3"],
        ["bench", "--suite", "drr", "--quick"],
    ],
    ids=["simulate", "bench"],
)
def test_cli_json_dash_writes_the_document_alone_to_stdout(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json -``: stdout parses as one JSON document; the table goes to stderr
    (issue 15, item 6)."""
    from fairq.cli import main

    assert main([*argv, "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)  # nothing else on stdout
    assert isinstance(doc, dict) and (doc.get("results") or doc.get("rows"))
    assert "|---" in err  # the Markdown table went to stderr
    # and without --json the table is on stdout as before
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert "|---" in out


def test_cli_trace_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fairq.cli import main

    t = tmp_path / "t.jsonl"
    t.write_text(
        '{"time": 0, "client": "a", "prompt_len": 30, "output_len": 4}\n'
        '{"time": 0, "client": "b", "prompt_len": 30, "output_len": 4}\n'
    )
    assert main(["simulate", "--trace", str(t), "--workers", "1", "--no-progress"]) == 0
    assert "trace:t.jsonl" in capsys.readouterr().out
    t.write_text('{"time": 0, "client": "a", "prompt_len": 30, "output_len": 4}\n{oops\n')
    assert main(["simulate", "--trace", str(t), "--no-progress"]) == 2
    assert "t.jsonl:2" in capsys.readouterr().err
    assert main(["simulate", "--workload", "nope", "--no-progress"]) == 2
    assert main(["simulate", "--model", "c0=abc", "--no-progress"]) == 2


def test_table_headers_are_the_json_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every column of the table is explained in ``--help`` and is a key of
    each JSON result whose name reads as its header (issue 20, item 6)."""
    from fairq.cli import main
    from fairq.sim.cli import COLUMNS

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    out = tmp_path / "r.json"
    argv = ["simulate", "--workload", "qa-S1", "--workers", "1", "--duration", "3"]
    assert main([*argv, "--policy", "vtc", "--no-progress", "--json", str(out)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header == "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"
    result = json.loads(out.read_text())["results"][0]
    for head, keys, meaning in COLUMNS:
        assert f"{head} [{keys}]: {' '.join(meaning.split())}" in help_text
        for key in keys.split(", "):
            assert key in result, key
            words = head.lower().replace("tok/s", "tok_s").replace("(", "").replace(")", "")
            parts = [w for w in words.replace("/", " ").split() if w]
            assert all(p in key for p in parts if p not in ("p50", "p99", "s")), (head, key)
    assert result["x_vtc"] == 1.0 and result["scheduler"] == "VTC"


def _captured_figures(monkeypatch: pytest.MonkeyPatch) -> list:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figs: list = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: figs.append(fig))
    monkeypatch.setattr("matplotlib.pyplot.close", lambda *a, **k: None)
    return figs


def test_plot_names_its_workload_shares_axes_one_legend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--plot`` says what it draws (title and message), ``--plot-workload``
    chooses it; panels share their axes; one legend (issue 20, item 7)."""
    from fairq.cli import main

    figs = _captured_figures(monkeypatch)
    argv = ["simulate", "--workload", "qa-S1", "--workload", "chat", "--workers", "1"]
    argv += ["--workers", "2", "--duration", "3", "--no-progress", "--plot", "p.png"]
    assert main(argv) == 0
    assert "plot written to p.png: qa-S1 on 2 workers" in capsys.readouterr().out
    assert main([*argv, "--plot-workload", "chat:1"]) == 0
    assert "plot written to p.png: chat on 1 worker " in capsys.readouterr().out
    for fig, (name, w, n) in zip(figs, [("qa-S1", 2, 4), ("chat", 1, 4)], strict=True):
        assert fig._suptitle.get_text().startswith(f"{name} on {w} worker")
        axes = fig.axes
        assert len(axes) == 2 * n
        top, bottom = axes[:n], axes[n:]  # row-major
        for row in (top, bottom):
            assert all(row[0].get_shared_y_axes().joined(row[0], a) for a in row)
            assert all(a.get_ylim() == row[0].get_ylim() and a.get_ylim()[0] == 0 for a in row)
        assert all(axes[0].get_shared_x_axes().joined(axes[0], a) for a in axes)
        assert len(fig.legends) == 1 and not any(a.get_legend() for a in axes)
    labels = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert labels[0] == "client0 (misbehaving)" and len(labels) == 4


def test_sweep_plot_axis_from_zero_and_one_legend(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fairq.cli import main

    figs = _captured_figures(monkeypatch)
    argv = ["simulate", "--sweep", "quantum", "--workload", "qa-S1", "--workers", "2"]
    assert main([*argv, "--duration", "3", "--no-progress", "--plot", "s.png"]) == 0
    assert "the Q_u and Q_w sweeps of qa-S1" in capsys.readouterr().out
    (fig,) = figs
    service_axes = [a for a in fig.axes if a.get_ylabel().startswith("service tok/s")]
    assert len(service_axes) == 2
    for ax in service_axes:
        assert ax.get_ylim()[0] == 0  # not zoomed onto a 1 % change
        assert "inf" in [t.get_text() for t in ax.get_xticklabels()]
    assert sum("spread" in t.get_text() for a in fig.axes for t in a.texts) == 2
    assert len(fig.legends) == 1 and not any(a.get_legend() for a in fig.axes)


def test_sweep_plan_and_table() -> None:
    from fairq.sim.runner import execute, plan_sweep

    spec = find_spec("qa-S1")
    runs = list(plan_sweep(spec, base_config(), workers=2))
    tags = {r.tag for r in runs}
    assert tags == {"Q_u", "Q_w"}
    res = execute(runs[:3] + runs[-2:], overrides={"duration": 3.0}, progress=False)
    txt = table(res)
    assert "Q=" in txt and "VTC" in txt


# ---- random traces (hypothesis) --------------------------------------------------

trace_line = st.tuples(
    st.floats(0.0, 3.0),
    st.sampled_from(["a", "b", "c"]),
    st.integers(1, 400),
    st.sampled_from([None, "p0", "p1", "p2"]),
    st.integers(1, 40),
)


@settings(max_examples=40)
@given(
    lines=st.lists(trace_line, min_size=1, max_size=40),
    setup=st.sampled_from(
        [
            (1, "fcfs", None),
            (1, "lpm", None),
            (1, "vtc", None),
            (1, "dlpm", None),
            (2, "lpm", "rr"),
            (2, "vtc", "client-rr"),
            (3, "lpm", "affinity"),
            (3, "dlpm", "d2lpm"),
        ]
    ),
    kv=st.sampled_from([2_000, 50_000]),
)
def test_random_traces_conserve_requests(lines: list, setup: tuple, kv: int) -> None:
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
    )
    sim = simulate(wl, cfg)
    assert sim.complete and len(sim.finish) == len(wl.requests)
    for w in sim.workers:
        assert w.reserved == 0 and w.tree.size <= kv and len(w.sched) == 0
        assert w.tree.evictable_size == w.tree.size
    m = summarize(sim)
    want = sum(r.input_len + 2 * r.output_len for r in wl.requests)
    assert sum(v["service"] for v in m["per_client"].values()) == pytest.approx(want)
    if policy == "dlpm" and workers == 1:
        # Theorem 4.1 with U = w_e * L_input + w_q * (max output of a request)
        u = max(r.input_len for r in wl.requests) + 2 * max(r.output_len for r in wl.requests)
        assert m["max_gap_cost"] <= 2 * (u + cfg.user_quantum)
