"""Trace import (fairq.sim.traces, ``fairq trace``) and block-hashed trace
lines (``hash_ids`` + ``block_size`` in fairq.sim.workloads.parse_trace)."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.cli import main
from fairq.radix import RadixTree
from fairq.sim.traces import (
    BUILTIN,
    MOONCAKE_BLOCK,
    MooncakeRecord,
    Options,
    builtin_lines,
    implied_hit_rate,
    import_mooncake,
    load,
    read_mooncake,
    sessions,
)
from fairq.sim.workloads import TraceError, block_tokens, parse_trace


def rec(ts: int, n_in: int, hids: list[int], n_out: int = 10) -> MooncakeRecord:
    return MooncakeRecord(ts, n_in, n_out, tuple(hids))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


# ---- hash_ids in the one trace format ----------------------------------------------


def test_equal_block_ids_are_equal_tokens_and_share_exactly_their_blocks() -> None:
    a = block_tokens(np.array([5, 6, 7], dtype=np.uint64), 16, 40, seed=3)
    b = block_tokens(np.array([5, 6, 9], dtype=np.uint64), 16, 48, seed=3)
    c = block_tokens(np.array([6], dtype=np.uint64), 16, 16, seed=3)
    assert len(a) == 40 and len(b) == 48
    assert common_prefix(a, b) == 32  # two shared blocks, not a token more
    assert np.array_equal(a[16:32], c)  # a block is the same wherever it appears
    other_seed = block_tokens(np.array([5, 6, 7], dtype=np.uint64), 16, 40, seed=4)
    assert not np.array_equal(a, other_seed)


def test_hashed_line_replays_and_shares_prefix() -> None:
    line = {"time": 0, "client": "a", "block_size": 4, "output_len": 2}
    wl = parse_trace(
        [
            json.dumps({**line, "prompt_len": 10, "hash_ids": [1, 2, 3]}),
            json.dumps({**line, "time": 1, "prompt_len": 9, "hash_ids": [1, 2, 4]}),
        ]
    )
    t0, t1 = (r.tokens for r in wl.requests)
    assert (len(t0), len(t1)) == (10, 9)
    assert common_prefix(t0, t1) == 8


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"hash_ids": [1, 2]}, "'block_size'"),
        ({"hash_ids": [1], "block_size": 4}, r"'hash_ids' has 1 blocks; 'prompt_len' 5"),
        ({"hash_ids": [1, 2, 3], "block_size": 4}, "needs 2"),
        ({"hash_ids": [], "block_size": 4}, "non-empty list"),
        ({"hash_ids": [1, -2], "block_size": 4}, r"'hash_ids'\[1\]"),
        ({"hash_ids": [1, "x"], "block_size": 4}, r"'hash_ids'\[1\]"),
        ({"hash_ids": [1, 2], "block_size": 0}, "'block_size'"),
        ({"hash_ids": [1, 2], "block_size": 4, "prefix_id": "p"}, "'prefix_id' does not go"),
        ({"block_size": 4}, "'block_size' goes with 'hash_ids'"),
    ],
)
def test_hashed_line_errors_name_field_and_line(extra: dict, match: str) -> None:
    good = '{"time": 0, "client": "a", "prompt_len": 5, "output_len": 1}'
    bad = json.dumps({"time": 0, "client": "a", "prompt_len": 5, "output_len": 1, **extra})
    with pytest.raises(TraceError, match=match) as e:
        parse_trace([good, bad], "t.jsonl")
    assert "t.jsonl:2" in str(e.value)


def test_hash_ids_do_not_go_with_prompt() -> None:
    bad = '{"time": 0, "client": "a", "prompt": [1, 2], "hash_ids": [1], "output_len": 1}'
    with pytest.raises(TraceError, match=":1: 'hash_ids' goes with 'prompt_len'"):
        parse_trace([bad])


# ---- Mooncake records ---------------------------------------------------------------


@pytest.mark.parametrize(
    "line, match",
    [
        ("{", "not valid JSON"),
        ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}', "'timestamp'"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}', "input_len"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [1]}', "output_len"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [true]}', "hash_"),
        ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "needs 2"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "before"),
    ],
)
def test_mooncake_bad_line_names_line_and_field(line: str, match: str) -> None:
    good = '{"timestamp": 7, "input_length": 5, "output_length": 1, "hash_ids": [1]}'
    with pytest.raises(TraceError, match=match) as e:
        read_mooncake([good, line], "m.jsonl")
    assert "m.jsonl:2" in str(e.value)
    with pytest.raises(TraceError, match="no requests"):
        read_mooncake(["", "  "], "m.jsonl")


def test_sessions_skip_global_blocks() -> None:
    recs = [
        rec(0, 1500, [0, 1, 2]),
        rec(1, 1500, [0, 3, 4]),
        rec(2, 2000, [0, 1, 2, 5]),  # turn 2 of the first conversation
        rec(3, 400, [0]),  # only the global block: a session of its own
        rec(4, 400, [0]),
    ]
    assert sessions(recs, global_share=0.5) == [0, 1, 0, 2, 3]
    assert sessions(recs, global_share=1.0) == [0, 1, 0, 2, 3]
    assert sessions(recs[:3], global_share=1.0) == [0, 1, 0]


def _records(draw_blocks: list[list[int]], lengths: list[int]) -> list[MooncakeRecord]:
    out = []
    for i, (hids, extra) in enumerate(zip(draw_blocks, lengths, strict=True)):
        n = (len(hids) - 1) * MOONCAKE_BLOCK + 1 + extra % MOONCAKE_BLOCK
        out.append(rec(i * 100, n, hids, 1 + extra % 50))
    return out


# Prompts built from a few shared roots: requests share their first k blocks.
records_st = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 3), st.integers(0, 10_000)),
    min_size=1,
    max_size=12,
).map(
    lambda rows: _records(
        [
            [100 + r, 200 + 10 * r + b] + list(range(1000 + 10 * i, 1000 + 10 * i + k))
            for i, (r, b, k, _) in enumerate(rows)
        ],
        [x for *_, x in rows],
    )
)


@settings(max_examples=40, deadline=None)
@given(records_st, st.sampled_from([1.0, 1 / 16, 1 / 100]), st.integers(0, 3))
def test_conversion_keeps_block_sharing(
    recs: list[MooncakeRecord], scale: float, seed: int
) -> None:
    """Equal leading block ids become equal token prefixes, and a radix
    cache's hit rate over the replayed prompts is what the blocks imply."""
    lines = import_mooncake(recs, Options(seed=seed, length_scale=scale, global_share=1.0))
    block = max(1, round(MOONCAKE_BLOCK * scale))
    assert all(d["block_size"] == block for d in lines)
    wl = parse_trace([json.dumps(d) for d in lines], seed=seed)
    tree = RadixTree()
    hit = 0
    for d, r in zip(lines, wl.requests, strict=True):
        assert r.input_len == d["prompt_len"]
        assert len(d["hash_ids"]) == math.ceil(d["prompt_len"] / block)
        hit += tree.match(r.tokens)
        tree.insert(r.tokens)
    total = sum(d["prompt_len"] for d in lines)
    assert hit / total == pytest.approx(implied_hit_rate(lines), abs=1e-12)
    for i, a in enumerate(lines):  # pairwise: the shared blocks, cut to either prompt
        for j in range(i):
            b = lines[j]
            k = 0
            while k < min(len(a["hash_ids"]), len(b["hash_ids"])) and (
                a["hash_ids"][k] == b["hash_ids"][k]
            ):
                k += 1
            want = min(k * block, a["prompt_len"], b["prompt_len"])
            assert common_prefix(wl.requests[i].tokens, wl.requests[j].tokens) == want


def test_length_and_time_scaling_and_folding() -> None:
    recs = [rec(0, 1100, [0, 1, 2], 300), rec(2000, 5000, [0, 1, 3, 4, 5, 6, 7, 8, 9, 10])]
    opts = Options(length_scale=1 / 16, time_scale=0.5, flood_share=0.0, global_share=1.0)
    a, b = import_mooncake(recs, opts)
    assert (a["block_size"], a["prompt_len"], a["output_len"]) == (32, 69, 19)
    assert (b["time"], b["prompt_len"], len(b["hash_ids"])) == (1.0, 313, 10)
    folded = import_mooncake(
        recs, Options(length_scale=1 / 16, max_prompt_len=64, max_output_len=5, global_share=1.0)
    )
    assert [d["prompt_len"] for d in folded] == [64, 64]
    assert [d["hash_ids"] for d in folded] == [[0, 1], [0, 1]]  # the prefix is kept
    assert [d["output_len"] for d in folded] == [5, 1]  # 300 / 16 capped; 10 / 16 -> 1


def test_tenant_rule_is_seeded_deterministic_and_heavy_tailed() -> None:
    recs = [rec(i * 10, 1000, [i, 100_000 + i]) for i in range(4000)]
    opts = Options(seed=1, tenants=8, zipf=1.2)
    first = import_mooncake(recs, opts)
    assert first == import_mooncake(recs, opts)
    assert first != import_mooncake(recs, Options(seed=2, tenants=8))
    share = Counter(d["client"] for d in first)
    assert abs(share["flood"] / 4000 - 0.3) < 0.04
    others = 4000 - share["flood"]
    zipf = [1 / (i + 1) ** 1.2 for i in range(8)]
    for i in range(8):  # each session is its own here: request shares follow Zipf(1.2)
        assert abs(share[f"t{i}"] / others - zipf[i] / sum(zipf)) < 0.03
    # the flood arrives flood_speedup times faster: within the first quarter
    last = max(d["time"] for d in first if d["client"] == "flood")
    assert last <= (recs[-1].timestamp_ms / 1000) / 4 + 1e-9
    assert [d["time"] for d in first] == sorted(d["time"] for d in first)


def test_sessions_keep_one_tenant_and_selection_takes_whole_sessions() -> None:
    recs = [rec(i, 1500, [0, 1 + i % 5, 50 + i]) for i in range(40)]
    lines = import_mooncake(recs, Options(global_share=0.5, min_turns=2, requests=17))
    assert len(lines) == 16  # sessions of 8 requests each: two fit in 17
    by_session: dict[int, set[str]] = {}
    for d in lines:
        by_session.setdefault(d["hash_ids"][1], set()).add(d["client"])
    assert len(by_session) == 2 and all(len(c) == 1 for c in by_session.values())
    with pytest.raises(ValueError, match="no requests"):
        import_mooncake(recs, Options(min_turns=9, global_share=0.5))
    with pytest.raises(ValueError, match="zipf"):
        import_mooncake(recs, Options(zipf=-1.0))


# ---- built-ins and the CLI ----------------------------------------------------------


def test_builtins_load_by_name_and_small_fits_a_gpu_check() -> None:
    small = load("mooncake-small")
    assert small.name == "trace:mooncake-small"
    assert 40 <= len(small.requests) <= 60
    assert max(r.input_len for r in small.requests) <= 1000
    assert max(r.output_len for r in small.requests) <= 32
    assert "flood" in small.clients
    again = load("mooncake-small")
    assert all(
        np.array_equal(a.tokens, b.tokens)
        for a, b in zip(small.requests, again.requests, strict=True)
    )
    big = builtin_lines("mooncake")
    assert len(big) == 1750 and json.loads(big[-1])["block_size"] == MOONCAKE_BLOCK
    assert set(BUILTIN) >= {"mooncake", "mooncake-synthetic", "mooncake-small"}


def test_cli_import_writes_what_the_builtin_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "small.jsonl"
    assert main(["trace", "import", "mooncake-small", "-o", str(out)]) == 0
    assert "48 requests" in capsys.readouterr().err
    assert out.read_text().splitlines() == builtin_lines("mooncake-small")
    assert main(["trace", "import", "mooncake-small", "--seed", "5", "-o", str(out)]) == 0
    assert out.read_text().splitlines() == builtin_lines("mooncake-small", seed=5)
    raw = tmp_path / "raw.jsonl"
    raw.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n'
    )
    assert main(["trace", "import", str(raw), "--length-scale", "0.5", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["block_size"] == 256


@pytest.mark.parametrize(
    "argv, match",
    [
        (
            ["trace", "import", "nope", "-o", "{out}"],
            "argument source: cannot read nope: no such file, nor a built-in trace",
        ),
        (["trace", "import", "{gz}", "-o", "{out}"], "argument source: cannot read .*gzip"),
        (["simulate", "--trace", "{gz}"], "argument --trace: cannot read .*truncated or corrupt"),
        (["trace", "import", "mooncake", "--zipf", "-1", "-o", "{out}"], "argument --zipf"),
        (["trace", "import", "mooncake", "--requests", "0", "-o", "{out}"], "--requests"),
        (["trace", "import", "{bad}", "-o", "{out}"], r"argument source: .*:1: 'hash_ids'"),
        (
            ["simulate", "--trace", "mooncak"],
            "argument --trace: cannot read mooncak: no such file, nor",
        ),
        (["trace"], "needs an ACTION"),
        (
            ["engine-bench", "--engine", "vllm", "--trace", "mooncake"],
            "argument --trace: a request needs 1232[0-9]+ tokens .* max_model_len 8192",
        ),
    ],
)
def test_cli_errors_are_one_line_naming_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0]}\n')
    gz = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress(b'{"timestamp": 0, "input_length": 6, "output_length": 3}\n' * 50)
    gz.write_bytes(whole[: len(whole) // 2])  # a download cut short
    argv = [a.format(out=tmp_path / "o.jsonl", bad=bad, gz=gz) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(match, err), err


def test_a_file_named_like_a_builtin_is_read_as_the_file_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fairq.sim.traces import load

    monkeypatch.chdir(tmp_path)
    Path("mooncake-small").write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n'
    )
    assert main(["trace", "import", "mooncake-small", "-o", "out.jsonl"]) == 0
    assert len(Path("out.jsonl").read_text().splitlines()) == 1  # the file, not the cut
    Path("mooncake").write_text(Path("out.jsonl").read_text())
    assert len(load("mooncake").requests) == 1


@pytest.mark.parametrize(
    "bad, name",
    [
        ({"tenants": 2.5}, "tenants"),
        ({"requests": 10.0}, "requests"),
        ({"seed": "1"}, "seed"),
        ({"zipf": "1"}, "zipf"),
        ({"min_turns": True}, "min_turns"),
        ({"tenants": 0}, "tenants"),
    ],
)
def test_options_of_the_wrong_type_or_range_name_the_field(bad: dict, name: str) -> None:
    from fairq.sim.traces import Options, import_mooncake, read_mooncake

    line = '{"timestamp": 0, "input_length": 6, "output_length": 3, "hash_ids": [0]}'
    recs = read_mooncake([line])
    with pytest.raises(ValueError, match=f"^{name} "):
        import_mooncake(recs, Options(**bad))
