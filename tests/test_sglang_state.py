"""The saved fairness state in SGLang (``state_file``, on fairq.ledger).

Runs with the SGLang venv's python (``.ci/sglang-requirements.txt``), over
SGLang's real scheduling objects (:class:`fairq.enginebench.harness.sglang.Engine`, as
``tests/test_sglang_fair.py``); skipped where SGLang is not importable. A
heavy tenant gets ahead; a scheduler rebuilt from the file keeps it behind;
the end of a burst reaches the file while SGLang makes no decision (the
background flusher); priority tiers are served strictly, fairly within a tier;
per-tenant metrics reach gauges while SGLang is idle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

try:
    import sglang.srt.managers.schedule_policy  # noqa: F401
except Exception as e:  # noqa: BLE001
    pytest.skip(
        f"SGLang 0.5.23 is not importable here ({e}); run these tests with the SGLang "
        "venv's python (.ci/sglang-requirements.txt)",
        allow_module_level=True,
    )

from fairq.enginebench.harness.sglang import Engine  # noqa: E402
from fairq.sglang.fair import STATE_FORMAT  # noqa: E402

HEAVY = "heavy"
OTHERS = ("a", "b")


def engine(policy: str, path: Path | None, **opts: Any) -> Engine:
    options = dict(opts)
    if path is not None:
        options.update(state_file=str(path), state_interval_s=3600)
    return Engine(
        f"fairq-{policy}",
        options=options,
        max_prefill_tokens=512,
        chunk_size=512,
        kv_tokens=1 << 15,
    )


def heavy_then_others(e: Engine, tag: str) -> None:
    """The heavy tenant's long prompts first, then the others' short ones."""
    for i in range(4):
        e.request([7 + i + 100 * len(tag)] * 256, 2, rid=f"{HEAVY}:{tag}{i}")
    for k, t in enumerate(OTHERS):
        for i in range(4):
            e.request([1000 + 50 * k + i + 100 * len(tag)] * 16, 2, rid=f"{t}:{tag}{i}")


def first_admissions(e: Engine, n: int) -> list[str]:
    seen: list[str] = []
    while len(seen) < n:
        step = e.step()
        seen += [rid for rid, _, _ in step.admitted if rid not in seen]
    return [r.split(":")[0] for r in seen[:n]]


def saved(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert doc["format"] == STATE_FORMAT and doc["version"] == 1
    return doc


def clients(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["state"]["tiers"]["0"]["clients"]}


@pytest.mark.parametrize(("policy", "opts"), [("vtc", {}), ("dlpm", {"quantum": 64})])
def test_a_rebuilt_scheduler_keeps_the_heavy_tenant_behind(
    tmp_path: Path, policy: str, opts: dict[str, Any]
) -> None:
    """The heavy tenant floods first and gets ahead; the state is saved with
    every tenant still waiting (a periodic save, then the server dies); a
    scheduler rebuilt from the file serves the others first although the
    heavy tenant's requests arrive first."""
    path = tmp_path / "state" / "state.json"
    e = engine(policy, path, **opts)
    assert saved(path)["state"] == {"tiers": {}}  # a fresh start's first save
    heavy_then_others(e, "x")
    assert first_admissions(e, 1) == [HEAVY]  # control: first to arrive, first served
    assert e.fairq.service(HEAVY) > max(e.fairq.service(t) for t in OTHERS)
    assert e.fairq.persistence.save()  # a periodic save, the others waiting
    c = clients(saved(path))
    assert c[HEAVY]["service"] == pytest.approx(e.fairq.service(HEAVY))

    # a new scheduler on the same file: the heavy tenant, first to arrive,
    # now comes after the others
    e2 = engine(policy, path, **opts)
    assert e2.fairq.service(HEAVY) == pytest.approx(c[HEAVY]["service"])
    heavy_then_others(e2, "y")
    order = first_admissions(e2, 3)
    assert HEAVY not in order[:2], order

    # control: without the file the heavy tenant goes first again
    e3 = engine(policy, None, **opts)
    heavy_then_others(e3, "y")
    assert first_admissions(e3, 1) == [HEAVY]


def test_the_end_of_a_burst_reaches_the_file_while_sglang_is_idle(tmp_path: Path) -> None:
    """SGLang makes no scheduling decision while its waiting list is empty,
    so the last requests' output and finishes are charged and saved by the
    background flusher (here one round of it, run at once)."""
    path = tmp_path / "state.json"
    e = engine("vtc", path)
    heavy_then_others(e, "x")
    e.run()
    e.fairq.flusher.run_once()  # (its thread may have run it already)
    assert len(e.fairq) == 0
    doc = saved(path)
    assert doc["state"]["tiers"]["0"]["running"] == []
    served = clients(doc)[HEAVY]["service"]
    assert served == pytest.approx(e.fairq.service(HEAVY)) == 4 * (256 + 2 * 2)
    saves = e.fairq.persistence.saves
    e.fairq.flusher.run_once()  # nothing changed: nothing saved
    assert e.fairq.persistence.saves == saves


def test_an_unusable_file_starts_fresh_and_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"format": "fairq.vllm.state", "version": 1}')  # another engine's
    e = engine("vtc", path)
    assert e.fairq.schedulers() == {}
    assert len(list(tmp_path.glob("state.json.bad-*"))) == 1
    assert saved(path)["state"] == {"tiers": {}}


def test_the_state_file_options_are_checked() -> None:
    with pytest.raises(ValueError, match="state_interval_s"):
        engine("vtc", None, state_file="/tmp/x.json", state_interval_s=-1)


def test_per_tenant_metrics_reach_gauges_when_idle(tmp_path: Path) -> None:
    """fairq's per-tenant metrics as gauges (what SGLang's multiprocess
    ``/metrics`` serves), refreshed by the background flusher: after a burst
    and silence they hold the whole burst, nothing running."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from fairq.ledger.promsync import GaugeMirror

    registry = prometheus_client.CollectorRegistry()
    e = engine("vtc", None)
    e.fairq.export_metrics(GaugeMirror(registry))
    heavy_then_others(e, "x")
    e.run()
    with e.fairq.ledger.lock:
        e.fairq.flusher.run_once()
    labels = {"name": "sglang-vtc-tier0", "tenant": HEAVY}
    got = registry.get_sample_value("fairq_scheduler_service_tokens_total", labels)
    assert got == pytest.approx(4 * (256 + 2 * 2))
    assert registry.get_sample_value("fairq_scheduler_admissions_total", labels) == 4
    assert registry.get_sample_value("fairq_scheduler_running_requests", labels) == 0


class PriorityEngine(Engine):
    """The harness's engine with SGLang's priority scheduling on (lower
    values first), as ``--enable-priority-scheduling
    --schedule-low-priority-values-first`` set it on the scheduler."""

    enable_priority_scheduling = True
    schedule_low_priority_values_first = True


def test_priority_tiers_first_then_fairness(tmp_path: Path) -> None:
    """Strict priority between tiers, fairness within one; the tiers are
    saved and restored."""
    path = tmp_path / "state.json"
    opts = {"state_file": str(path), "state_interval_s": 3600}
    e = PriorityEngine("fairq-vtc", options=opts, max_prefill_tokens=64, chunk_size=64)
    for i in range(3):
        e.request([5 + i] * 32, 2, rid=f"low:{i}", priority=1)
    for i in range(2):
        e.request([50 + i] * 32, 2, rid=f"g:{i}", priority=0)
        e.request([90 + i] * 32, 2, rid=f"h:{i}", priority=0)
    order = first_admissions(e, 7)
    assert set(order[:2]) == set(order[:4]) == {"g", "h"}, order  # fair within tier 0
    assert order[4:] == ["low"] * 3, order
    assert set(e.fairq.schedulers()) == {0, 1}
    e.run()
    e.fairq.flusher.run_once()
    doc = saved(path)
    assert doc["options"]["tiers"] is True and set(doc["state"]["tiers"]) == {"0", "1"}
    e2 = PriorityEngine("fairq-vtc", options=opts, max_prefill_tokens=64, chunk_size=64)
    assert e.fairq.service("low") > 0
    assert e2.fairq.service("low") == pytest.approx(e.fairq.service("low"))
    # without priority scheduling the same file is another configuration:
    # moved aside, fresh start
    e3 = engine("vtc", path)
    assert e3.fairq.schedulers() == {}
