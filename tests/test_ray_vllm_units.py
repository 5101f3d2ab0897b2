"""Pure parts of ``fairq engine-bench --engine ray-vllm`` (no Ray, no vLLM)."""

from __future__ import annotations

import pytest

from fairq.enginebench.ray_vllm import fault_timeline
from fairq.vllm.traffic import HttpRequest, HttpResult


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


def test_fault_timeline_bins_baseline_and_settling() -> None:
    # Two tenants, each with one long request outstanding for the whole run
    # (both backlogged in every bin), streaming one token per second each;
    # between 20 and 40 s the flood streams three tokens per second (unfair),
    # then evenly again.
    a = _result("a", 0.0, [t + 0.5 for t in range(60)])
    flood_times = [t + 0.5 for t in range(60)]
    flood_times += [t + 0.25 for t in range(20, 40)] + [t + 0.75 for t in range(20, 40)]
    flood = _result("flood", 0.0, sorted(flood_times))
    tl = fault_timeline([a, flood], kill_at=20.0, ready_at=40.0, bin_s=10.0)
    bins = tl["bins"]
    assert [b["start_s"] for b in bins] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert all(b["all_backlogged"] for b in bins[:-1])
    assert bins[0]["output"] == {"a": 10.0, "flood": 10.0}
    assert bins[2]["output"] == {"a": 10.0, "flood": 30.0}
    assert bins[2]["flood_share"] == pytest.approx(0.75)
    assert bins[2]["jain_output"] == pytest.approx(40.0**2 / (2 * (100 + 900)))
    assert tl["baseline_jain_output"] == pytest.approx(1.0)
    assert tl["settled_s"] == 40.0
    assert tl["settle_after_ready_s"] == 0.0


def test_fault_timeline_unbacklogged_bins_have_no_jain() -> None:
    # "b" sends its only request at 15 s: bins before that are not all-backlogged.
    a = _result("a", 0.0, [t + 0.5 for t in range(40)])
    b = _result("b", 15.0, [t + 0.5 for t in range(15, 40)])
    tl = fault_timeline([a, b], kill_at=30.0, ready_at=None, bin_s=10.0)
    assert [x["jain_output"] is None for x in tl["bins"]] == [True, True, False, True]
    assert tl["settled_s"] is None and tl["settle_after_ready_s"] is None
    # the kill came after the only all-backlogged bin: that bin is the baseline
    assert tl["baseline_jain_output"] == pytest.approx(1.0)
