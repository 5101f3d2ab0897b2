"""The pieces of the vLLM server integration that run without a server:
the tested-version check, the metrics carrier, the tallies, the model
writer, the /metrics parser, the bench's summary (issue 19)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from fairq.enginebench.traffic import HttpRequest, HttpResult, metric_sum
from fairq.vllm.compat import ALLOW_UNTESTED_ENV, TESTED_SERIES, check_vllm, is_tested
from fairq.vllm.stats import (
    CARRIER_PREFIX,
    StatsPacker,
    StepClock,
    decode_families,
    take_payload,
)


def test_tested_series() -> None:
    assert TESTED_SERIES == ("0.32", "0.33")
    assert is_tested("0.32.0") and is_tested("0.33.1.dev3+gabc")
    assert not is_tested("0.31.9") and not is_tested("0.34.0") and not is_tested("1")


def test_untested_vllm_is_refused_or_warned(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ALLOW_UNTESTED_ENV, raising=False)
    check_vllm("0.33.0")
    with pytest.raises(RuntimeError, match=r"tested with vLLM 0\.32\.x, 0\.33\.x, not 0\.40\.0"):
        check_vllm("0.40.0")
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    with caplog.at_level(logging.WARNING, logger="fairq.vllm"):
        check_vllm("0.40.0")
    assert "untested vLLM 0.40.0" in caplog.text


@dataclass
class _Stats:
    """The fields of vLLM's SchedulerStats the carrier touches."""

    num_kv_fetch_reqs_by_stage: dict[str, int] = field(
        default_factory=lambda: {"waiting_to_start": 0, "in_progress": 0}
    )


def test_carrier_round_trip_and_leaves_vllms_keys_alone() -> None:
    import fairq

    s = fairq.VTC()
    s.add("r1", "alice", [1, 2, 3])
    s.add("r2", "bob", [4, 5])
    s.schedule(100, 1)
    packer = StatsPacker(interval_s=0.0)
    stats = _Stats()

    def extra() -> list[Any]:
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily("fairq_vllm_steps", "steps", labels=["name"])
        fam.add_metric(["vllm-vtc"], 7)
        return [fam]

    assert packer.attach(stats, lambda: [("vllm-vtc-tier0", s)], extra)
    keys = list(stats.num_kv_fetch_reqs_by_stage)
    assert len(keys) == 3 and keys[2].startswith(CARRIER_PREFIX)
    # zero: vLLM's loggers print KV-fetch counts only when one is non-zero
    assert not any(stats.num_kv_fetch_reqs_by_stage.values())
    payload = take_payload(stats)
    assert payload is not None
    assert stats.num_kv_fetch_reqs_by_stage == {"waiting_to_start": 0, "in_progress": 0}
    assert take_payload(stats) is None
    fams = {f.name: f for f in decode_families(payload, {"engine": "0"})}
    adm = {s.labels["tenant"]: s.value for s in fams["fairq_scheduler_admissions"].samples}
    assert adm == {"alice": 1.0, "bob": 0.0}
    assert all(s.labels["engine"] == "0" for f in fams.values() for s in f.samples)
    (steps,) = fams["fairq_vllm_steps"].samples
    assert steps.name == "fairq_vllm_steps_total" and steps.value == 7
    # the families render as Prometheus text
    from prometheus_client import CollectorRegistry, generate_latest

    class _C:
        def collect(self) -> Any:
            return iter(fams.values())

    reg = CollectorRegistry()
    reg.register(_C())  # type: ignore[arg-type]
    text = generate_latest(reg).decode()
    assert (
        'fairq_scheduler_admissions_total{engine="0",name="vllm-vtc-tier0",tenant="alice"} 1.0'
        in text
    )


def test_carrier_of_an_object_without_metrics_keeps_working() -> None:
    import fairq

    queue = fairq.vllm.create_request_queue("fcfs")  # no fairness state
    packer = StatsPacker(interval_s=0.0)
    for steps in (1, 2, 3):  # the snapshot is renewed every time, not only the first

        def extra(n: int = steps) -> list[Any]:
            from prometheus_client.core import CounterMetricFamily

            fam = CounterMetricFamily("fairq_vllm_steps", "steps", labels=["name"])
            fam.add_metric(["vllm-fcfs"], n)
            return [fam]

        stats = _Stats()
        assert packer.attach(stats, lambda: [("vllm-waiting", queue)], extra)
        payload = take_payload(stats)
        assert payload is not None
        (fam,) = decode_families(payload, {})
        assert fam.samples[0].value == steps


def test_carrier_respects_its_interval_and_never_raises() -> None:
    packer = StatsPacker(interval_s=3600.0)
    stats = _Stats()
    assert packer.attach(stats, lambda: [], lambda: [])
    assert not packer.attach(stats, lambda: [], lambda: [])  # within the interval
    packer = StatsPacker(interval_s=0.0)

    def boom() -> list[Any]:
        raise RuntimeError("a collector failed")

    assert not packer.attach(_Stats(), boom, lambda: [])
    assert not packer.attach(object(), lambda: [], lambda: [])  # no carrier field
    assert take_payload(object()) is None


def test_step_clock_counts_busy_steps_only() -> None:
    clock = StepClock()
    t = clock.schedule_started()
    clock.schedule_done(t, busy=False)
    t = clock.schedule_started()  # after an idle step: not a step interval
    assert clock.step_s == 0.0
    clock.schedule_done(t, busy=True)
    clock.schedule_started()
    assert clock.step_s > 0.0 and clock.steps == 2
    wrapped = clock.wrap(lambda x: x + 1)
    assert wrapped(1) == 2 and clock.fairq_s > 0.0


def test_tenant_tally_counts_each_request_once() -> None:
    from fairq.vllm.scheduler import TenantTally
    from fairq.vllm.tenants import TenantResolver

    @dataclass
    class Req:
        request_id: str
        num_prompt_tokens: int
        sampling_params: Any = None

    @dataclass
    class New:
        req_id: str
        num_computed_tokens: int

    class Sched:
        requests = {
            "cmpl-alice:1": Req("cmpl-alice:1", 100),
            "cmpl-bob:2": Req("cmpl-bob:2", 50),
        }

    class Out:
        scheduled_new_reqs = [New("cmpl-alice:1", 64), New("cmpl-bob:2", 0)]

    tally = TenantTally(TenantResolver())
    tally.after_schedule(Sched(), Out())
    tally.after_schedule(Sched(), Out())  # the same requests again: not counted
    assert tally.requests == {"alice": 1, "bob": 1}
    assert tally.prompt_tokens == {"alice": 100, "bob": 50}
    assert tally.hit_tokens == {"alice": 64, "bob": 0}
    tally.after_schedule(Sched(), object())  # malformed output: ignored, never raises
    # bounded: beyond max_tenants, new tenants are counted under OTHER
    small = TenantTally(TenantResolver(), max_tenants=1)
    small.after_schedule(Sched(), Out())
    assert small.requests == {"alice": 1, TenantTally.OTHER: 1}
    assert small.prompt_tokens == {"alice": 100, TenantTally.OTHER: 50}
    fams = {f.name: f for f in tally.families("vtc", StepClock())}
    assert {s.labels["tenant"]: s.value for s in fams["fairq_vllm_prefix_hit_tokens"].samples} == {
        "alice": 64,
        "bob": 0,
    }


def test_write_model(tmp_path: Any) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    from fairq.enginebench.server import MODEL_SIZES, write_model

    path = write_model(tmp_path / "m", "tiny")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["vocab_size"] == MODEL_SIZES["tiny"]["vocab_size"]
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # the CPU kernels' minimum
    tok = Tokenizer.from_file(f"{path}/tokenizer.json")
    assert tok.encode("t5 t6 t4095").ids == [5, 6, 4095]
    assert tok.decode([5, 6]) == "t5 t6"
    assert "chat_template" in json.loads((tmp_path / "m" / "tokenizer_config.json").read_text())
    with pytest.raises(ValueError, match="size must be one of"):
        write_model(tmp_path / "x", "huge")


def test_write_model_with_think_tokens(tmp_path: Any) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    from fairq.enginebench.server import MODEL_SIZES, think_token_ids, write_model

    start, end = think_token_ids("tiny")
    assert (start, end) == (4094, 4095)
    path = write_model(tmp_path / "m", "tiny", think_tokens=True)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["vocab_size"] == MODEL_SIZES["tiny"]["vocab_size"]  # same shape
    tok = Tokenizer.from_file(f"{path}/tokenizer.json")
    assert tok.get_vocab_size() == cfg["vocab_size"]
    assert tok.encode("t5 <think> t6 </think> t7").ids == [5, start, 6, end, 7]
    # ordinary words: decoded in the text, where a reasoning parser finds them
    assert tok.decode([5, start, 6, end, 7]) == "t5 <think> t6 </think> t7"
    # the plain tokenizer is unchanged: those ids are words there
    plain = Tokenizer.from_file(write_model(tmp_path / "p", "tiny") + "/tokenizer.json")
    assert plain.decode([start, end]) == "t4094 t4095"
    assert plain.token_to_id("</think>") is None
    with pytest.raises(ValueError, match="size must be one of"):
        think_token_ids("huge")


def test_metric_sum_and_label_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import urllib.request

    from fairq.enginebench import traffic

    text = (
        "# HELP x\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 12.0\n'
        'fairq_vllm_requests_total{engine="0",name="a,b",tenant="al\\"ice"} 3.0\n'
        'fairq_vllm_requests_total{engine="0",name="a,b",tenant="bob"} 4.0\n'
        "up 1\n"
    )

    class _Resp(io.BytesIO):
        def __enter__(self) -> Any:
            return self

        def __exit__(self, *a: Any) -> None:
            pass

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: _Resp(text.encode()))
    m = traffic.scrape("http://127.0.0.1:1")
    assert metric_sum(m, "vllm:prefix_cache_hits_total") == 12.0
    assert metric_sum(m, "fairq_vllm_requests_total") == 7.0
    assert metric_sum(m, "fairq_vllm_requests_total", tenant="bob") == 4.0
    assert metric_sum(m, "fairq_vllm_requests_total", name="a,b") == 7.0
    assert metric_sum(m, "up") == 1.0 and metric_sum(m, "missing") == 0.0


def _result(tenant: str, sent: float, chunks: list[float], n: int) -> HttpResult:
    r = HttpResult(HttpRequest(f"{tenant}{sent}", tenant, [1, 2], n, stream=True))
    r.status, r.sent, r.chunk_times, r.completion_tokens = 200, sent, chunks, n
    r.first_token, r.end, r.finish_reason = chunks[0], chunks[-1], "length"
    return r


def test_bench_summary_window_and_jain() -> None:
    from fairq.enginebench.vllm_server import summarize

    # the flood is served alone until t=2, then both share equally
    results = [
        _result("flood", 0.0, [0.5, 1.0, 1.5, 1.9], 4),
        _result("flood", 0.0, [2.5, 3.0], 2),
        _result("well", 2.0, [2.5, 3.0], 2),
    ]
    row = summarize(results, {}, {})
    assert row["window_s"] == pytest.approx(1.0)  # from 2.0 to 3.0
    assert row["service_window"] == {"flood": 2.0, "well": 2.0}
    assert row["jain_window"] == pytest.approx(1.0)
    assert row["service_total"] == {"flood": 6.0, "well": 2.0}
    assert row["flood_done_before_well"] == 1.0
    assert row["well_behaved"]["itl_p50_s"] == pytest.approx(0.5)
    # the server did not report cached tokens: no cost measure
    assert row["cost_window"] is None and row["jain_cost_window"] != row["jain_cost_window"]


def test_bench_summary_tpot_is_not_fooled_by_bunched_chunks() -> None:
    """Chunks the client reads in one go are ~0 apart: the median gap reads
    0 while the request still took 10 ms per token after its first."""
    from fairq.enginebench.vllm_server import summarize

    bunched = [1.0] + [1.1 + 1e-5 * i for i in range(8)]  # 12.5 ms per token
    evenly = [2.0 + 0.01 * i for i in range(9)]  # 10 ms per token
    results = [_result("well", 0.0, c, 9) for c in (bunched, bunched, evenly)]
    w = summarize(results, {}, {})["well_behaved"]
    assert w["itl_p50_s"] < 1e-3  # what the table showed as "ITL p50 0.0 ms"
    assert w["tpot_p50_s"] == pytest.approx((0.1 + 7e-5) / 8)
    row = summarize(results, {}, {})
    assert "TPOT p50 ms" in table_of(row)


def table_of(row: dict[str, Any]) -> str:
    from fairq.enginebench.vllm_server import _median_row, table

    return table([_median_row([{**row, "policy": "dlpm"}])])


def test_bench_summary_jain_in_dlpm_cost() -> None:
    """DLPM's cost: w_e (1) per computed prompt token at the first token, w_q
    (2) per output token. The flood's requests hit the cache and cost less
    each, so equal output tokens are unequal cost, and the reverse."""
    from fairq.enginebench.vllm_server import summarize

    flood = _result("flood", 0.0, [2.5, 3.0], 2)
    flood.prompt_tokens, flood.cached_tokens = 100, 96  # 4 computed + 2 x 2 output = 8
    well = _result("well", 2.0, [2.5, 3.0], 2)
    well.prompt_tokens, well.cached_tokens = 100, 0  # 100 computed + 4 = 104
    row = summarize([flood, well], {}, {})
    assert row["service_window"] == {"flood": 2.0, "well": 2.0}
    assert row["jain_window"] == pytest.approx(1.0)
    assert row["cost_window"] == {"flood": 8.0, "well": 104.0}
    assert row["jain_cost_window"] == pytest.approx(112**2 / (2 * (8**2 + 104**2)))


def test_demo_summary_states_throughput_beside_latency_and_fairness() -> None:
    from fairq.enginebench.demo import summary

    def row(policy: str, tok_s: float, well: float, jain: float) -> dict[str, Any]:
        return {
            "policy": policy,
            "output_tok_s": tok_s,
            "jain_window": jain,
            "well_behaved": {"latency_p50_s": well},
            "flood": {"latency_p50_s": 1.0},
        }

    lines = summary([row("vllm", 533.0, 2.69, 0.33), row("dlpm", 403.0, 1.38, 0.85)])
    assert len(lines) == 3
    assert "stock vLLM: the three other tenants wait 2.69 s" in lines[0]
    assert "throughput 533 output tok/s" in lines[0] and "throughput 403" in lines[1]
    assert "fairq dlpm: throughput 0.76x stock vLLM's (24% less than stock vLLM's" in lines[2]


def test_bench_server_passes_the_quantum_scale() -> None:
    """``--quantum-scale`` reaches the server's DLPM options; without it the
    core's default scale applies (no key), and other policies get none."""
    import argparse

    from fairq.enginebench.vllm_server import _server
    from fairq.engineopts import policy_options

    args = argparse.Namespace(quantum="auto", quantum_scale=1.5, server_args="", max_model_len=512)
    s = _server(args, "m", "dlpm", "log")
    assert s.options == {"quantum": "auto", "quantum_scale": 1.5}
    assert policy_options("dlpm", s.options)["quantum_scale"] == 1.5
    args.quantum_scale = None
    default = _server(args, "m", "dlpm", "log").options
    assert default == {"quantum": "auto"}
    assert (
        policy_options("dlpm", default)["quantum_scale"] == policy_options("dlpm")["quantum_scale"]
    )
    assert _server(args, "m", "lpm", "log").options is None


def test_demo_warns_on_a_busy_machine() -> None:
    from fairq.enginebench.demo import busy_note

    assert busy_note(load=1.5, cpus=2) is None
    note = busy_note(load=4.2, cpus=2)
    assert note is not None and "load average 4.2 on 2 cores" in note and "idle" in note
