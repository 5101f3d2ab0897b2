"""Pure parts of ``fairq engine-bench --engine ray-vllm`` (no Ray, no vLLM)."""

from __future__ import annotations

import pytest

from fairq.enginebench.ray_faults import fault_timeline
from fairq.enginebench.traffic import HttpRequest, HttpResult


def _result(tenant: str, sent: float, times: list[float], cached: int = 0) -> HttpResult:
    req = HttpRequest(request_id=f"{tenant}-{sent}", tenant=tenant, prompt=[1] * 8, max_tokens=4)
    return HttpResult(
        request=req,
        status=200,
        sent=sent,
        first_token=times[0],
        end=times[-1],
        chunk_times=times,
        completion_tokens=len(times),
        prompt_tokens=8,
        cached_tokens=cached,
    )


def test_fault_timeline_bins_windows_baseline_and_settling() -> None:
    # Two tenants, each with one long request outstanding for the whole run
    # (both backlogged throughout), streaming one token per second each;
    # between 20 and 40 s the flood streams three tokens per second, then
    # evenly again. Kill at 20 s, replacement up at 40 s.
    a = _result("a", 0.0, [t + 0.5 for t in range(80)])
    flood_times = [t + 0.5 for t in range(80)]
    flood_times += [t + 0.25 for t in range(20, 40)] + [t + 0.75 for t in range(20, 40)]
    flood = _result("flood", 0.0, sorted(flood_times))
    tl = fault_timeline([a, flood], kill_at=20.0, ready_at=40.0, bin_s=10.0, window_bins=2)
    bins = tl["bins"]
    assert [b["start_s"] for b in bins] == [i * 10.0 for i in range(8)]
    assert all(b["all_backlogged"] and b["served"] for b in bins[:-1])
    assert not bins[-1]["all_backlogged"]  # the requests end at 79.5 s
    assert bins[0]["output"] == {"a": 10.0, "flood": 10.0}
    assert bins[2]["output"] == {"a": 10.0, "flood": 30.0}
    # windows of two bins, sliding by one, over the bins 0..6
    w = {x["start_s"]: x for x in tl["windows"]}
    assert sorted(w) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert w[20.0]["jain_output"] == pytest.approx(80.0**2 / (2 * (20**2 + 60**2)))
    assert w[20.0]["flood_share"] == pytest.approx(0.75)
    assert w[10.0]["flood_share"] == pytest.approx(40 / 60)
    # DLPM cost: the prompt's 8 uncached tokens at the first token, then w_q per token
    assert bins[0]["cost"]["a"] > bins[1]["cost"]["a"] > 0
    assert tl["baseline_jain_output"] == pytest.approx(1.0)
    assert tl["pre_kill_bins"] == 2
    assert tl["settled_s"] == 40.0
    assert tl["settle_after_ready_s"] == 0.0


def test_fault_timeline_skips_unbacklogged_and_unserved_bins() -> None:
    # "b" sends its only request at 15 s; nothing is streamed in 40-50 s (no
    # replica up): windows touching those bins are not counted.
    a = _result("a", 0.0, [t + 0.5 for t in range(70) if not 40 <= t < 50])
    b = _result("b", 15.0, [t + 0.5 for t in range(15, 70) if not 40 <= t < 50])
    tl = fault_timeline([a, b], kill_at=30.0, ready_at=None, bin_s=10.0, window_bins=1)
    assert [x["served"] for x in tl["bins"]] == [True] * 4 + [False] + [True] * 2
    assert [x["start_s"] for x in tl["windows"]] == [20.0, 30.0, 50.0]
    assert tl["settled_s"] is None and tl["settle_after_ready_s"] is None
    # the kill came after one counted bin (20-30 s): it is the baseline
    assert tl["pre_kill_bins"] == 1
    assert tl["baseline_jain_output"] == pytest.approx(1.0)


def test_fault_timeline_never_settles_when_unfair_after_ready() -> None:
    a = _result("a", 0.0, [t + 0.5 for t in range(60)])
    # fair until 30 s, then the flood streams four tokens a second to the end
    extra = [t + f for t in range(30, 60) for f in (0.2, 0.4, 0.6)]
    flood = _result("flood", 0.0, sorted([t + 0.5 for t in range(60)] + extra))
    tl = fault_timeline([a, flood], kill_at=30.0, ready_at=30.0, bin_s=10.0, window_bins=1)
    assert tl["baseline_jain_output"] == pytest.approx(1.0)
    assert tl["settled_s"] is None


def test_complete_needs_every_token_asked_for() -> None:
    full = _result("a", 0.0, [1.0, 2.0, 3.0, 4.0])  # max_tokens 4
    short = _result("a", 0.0, [1.0, 2.0])
    assert full.ok and full.complete
    assert short.ok and not short.complete
    short.error = "replica died"
    assert not short.ok and not short.complete


def test_failed_requests_are_counted_per_tenant_and_by_error() -> None:
    from dataclasses import replace

    from fairq.enginebench.ray_faults import error_counts, failed_by_tenant

    ok = _result("a", 0.0, [1.0, 2.0])
    gone = replace(_result("a", 0.5, [1.0]), status=500, error="Internal Server Error")
    cut = replace(_result("b", 0.5, [1.0]), error="RemoteProtocolError: peer closed")
    results = [ok, gone, cut, _result("b", 1.0, [2.0])]
    assert failed_by_tenant(results) == {"a": [1, 2], "b": [1, 2]}
    assert error_counts(results) == {
        "500: Internal Server Error": 1,
        "200: RemoteProtocolError: peer closed": 1,
    }


def test_an_ingress_replacement_is_up_when_new_and_serve_counts_it_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fairq.enginebench import ray_faults

    live = ["b"]  # "a" was killed
    running = [1]
    monkeypatch.setattr(ray_faults, "_replica_actors", lambda dep: list(live))
    monkeypatch.setattr(ray_faults, "_running", lambda dep: running[0])
    k = ray_faults.Killer(1.0, "/nonexistent", "ingress")
    before = {"a", "b"}
    assert k._replacement(before, 2) is None  # no new actor yet
    live.append("c")
    assert k._replacement(before, 2) is None  # created, not RUNNING yet
    running[0] = 2
    assert k._replacement(before, 2) == "c"
    assert ray_faults.KILL_TARGETS["ingress"] == "OpenAiIngress"
