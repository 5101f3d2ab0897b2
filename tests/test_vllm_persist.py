"""Fairness state that survives a restart (``state_file``, fairq.vllm.persist).

Against vLLM 0.33's (in the CPU build's environment, 0.32's) real scheduler
(``fairq.enginebench.harness.vllm``, as
``tests/test_vllm_fair.py``): a greedy tenant gets ahead, the state is saved
(interval, before vLLM's abort of every request, at shutdown), and a new
scheduler built with the same file keeps that tenant behind; atomic writes;
bad files start fresh and are moved aside; write errors never raise.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference.vllm import require_tested_vllm

vllm = require_tested_vllm()

from fairq.enginebench.harness import vllm as harness  # noqa: E402, I001
from vllm.v1.request import RequestStatus  # noqa: E402

from fairq.vllm import persist  # noqa: E402
from fairq.vllm import scheduler as fsched  # noqa: E402

BLOCK = 16
GREEDY = "g"
OTHERS = ("a", "b")


@pytest.fixture
def policy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def set_policy(policy: str, **options: Any) -> None:
        monkeypatch.setenv("FAIRQ_VLLM_POLICY", policy)
        monkeypatch.setenv("FAIRQ_VLLM_OPTIONS", json.dumps(options))

    monkeypatch.delenv("FAIRQ_VLLM_CONFIG", raising=False)
    yield set_policy


def build(**kw: Any) -> Any:
    params: dict[str, Any] = {"max_num_seqs": 1, "max_num_batched_tokens": 512, **kw}
    return harness.build_scheduler(fsched.FairqScheduler, block_size=BLOCK, **params)


def add_tenants(s: Any, tag: str, greedy_first: bool = True, priority: int = 0) -> None:
    """The greedy tenant's long prompts and the others' short ones."""
    greedy = [
        harness.make_request(
            f"{GREEDY}:{tag}{i}", [7 + i] * 256, 2, tenant=GREEDY, priority=priority
        )
        for i in range(4)
    ]
    others = [
        harness.make_request(
            f"{t}:{tag}{i}", [1000 + 50 * k + i] * 16, 2, tenant=t, priority=priority
        )
        for i in range(4)
        for k, t in enumerate(OTHERS)
    ]
    for r in greedy + others if greedy_first else others + greedy:
        s.add_request(r)


def first_admissions(s: Any, n: int) -> list[str]:
    """Tenants of the first ``n`` requests ``s`` schedules."""
    seen: list[str] = []
    while len(seen) < n and s.has_requests():
        out, _ = harness.step(s)
        seen += [r for r in out.num_scheduled_tokens if r not in seen]
    return [r.split(":")[0] for r in seen[:n]]


def greedy_run(s: Any, priority: int = 0) -> None:
    """The greedy tenant floods first and gets ahead of the others."""
    add_tenants(s, "x", priority=priority)
    harness.step(s)  # the greedy tenant's 256-token prompt
    served = {t: s.fairq.service(t) for t in (GREEDY, *OTHERS)}
    assert served[GREEDY] > max(served[t] for t in OTHERS)


def shut_down_like_vllm(s: Any) -> None:
    """vLLM's EngineCore on SIGTERM (abort mode): abort every request, exit
    the loop, ``shutdown()`` (vllm/v1/engine/core.py)."""
    s.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    assert s.get_num_unfinished_requests() == 0
    s.shutdown()


def logs(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    """fairq's persistence messages at ``level`` (vLLM logs its own too)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "fairq.vllm.persist" and r.levelno == level
    ]


def clients(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A local scheduler state's clients without their live waiting counts
    (a restored scheduler has no requests; the saved counts stay inside)."""
    return [{k: v for k, v in c.items() if k != "waiting"} for c in doc["clients"]]


def saved(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert doc["format"] == persist.FORMAT and doc["version"] == persist.VERSION
    return doc


# -- the state survives ---------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "options"),
    # DLPM: a quantum the greedy tenant's first prompt overdraws (with credit
    # left, DLPM orders by prefix match, not by deficit)
    [("vtc", {}), ("dlpm", {"quantum": 64})],
)
def test_greedy_tenant_stays_behind_after_a_restart(
    policy_env: Any, tmp_path: Path, policy: str, options: dict[str, Any]
) -> None:
    path = tmp_path / "state.json"
    policy_env(policy, state_file=str(path), **options)
    s = build()
    greedy_run(s)
    before = s.fairq.schedulers()[0].state_dict()
    shut_down_like_vllm(s)
    doc = saved(path)
    assert doc["policy"] == policy
    assert clients(doc["state"]["tiers"]["0"]) == clients(before)

    # the new server: same options, same file; the greedy tenant's requests
    # arrive first and still come after the others'
    s2 = build()
    restored = s2.fairq.schedulers()[0].state_dict()
    assert clients(restored) == clients(before) and restored["running"] == []
    add_tenants(s2, "y", greedy_first=True)
    order = first_admissions(s2, 4)
    assert GREEDY not in order[:2], order

    # control: without the file the greedy tenant (first to arrive) goes first
    policy_env(policy, **options)
    s3 = build()
    add_tenants(s3, "y", greedy_first=True)
    assert first_admissions(s3, 1) == [GREEDY]


def test_priority_tiers_are_restored(policy_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path))
    s = build(scheduling_policy="priority")
    greedy_run(s, priority=1)
    before = {t: clients(sc.state_dict()) for t, sc in s.fairq.schedulers().items()}
    assert set(before) == {1}
    shut_down_like_vllm(s)
    assert set(saved(path)["state"]["tiers"]) == {"1"}
    s2 = build(scheduling_policy="priority")
    assert {t: clients(sc.state_dict()) for t, sc in s2.fairq.schedulers().items()} == before
    add_tenants(s2, "y", priority=1)
    assert GREEDY not in first_admissions(s2, 2)


def test_wfq_flows_are_restored(policy_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    policy_env("wfq", virtual_clock="finish", state_file=str(path))
    s = build()
    greedy_run_wfq(s)
    lead = {t: s.waiting.flow_last_finish(t) for t in (GREEDY, *OTHERS)}
    shut_down_like_vllm(s)
    doc = saved(path)
    assert doc["state"]["queue"]["waiting"] == []  # the requests are not saved
    s2 = build()
    assert s2.waiting.pending_readds == 0
    assert s2.waiting.virtual_time == doc["state"]["queue"]["virtual_time"]
    # the greedy flow is still ahead of the others (its in-flight request
    # was settled as an abort: charged what it used)
    after = {t: s2.waiting.flow_last_finish(t) for t in (GREEDY, *OTHERS)}
    assert after[GREEDY] is not None and after[GREEDY] <= lead[GREEDY]
    assert all(after[t] is None or after[t] < after[GREEDY] for t in OTHERS)
    add_tenants(s2, "y", greedy_first=True)
    assert GREEDY not in first_admissions(s2, 2)


def greedy_run_wfq(s: Any) -> None:
    add_tenants(s, "x")
    harness.step(s)
    assert s.waiting.flow_last_finish(GREEDY) > max(
        s.waiting.flow_last_finish(t) or 0.0 for t in OTHERS
    )


def test_saved_every_interval_from_the_step_hooks(policy_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path), state_interval_s=5)
    s = build()
    p = s.fairq_persist
    assert p.interval_s == 5.0 and p.saves == 1  # the first save, at start
    assert saved(path)["state"] == {"tiers": {}}
    now = [p._next - 5.0]
    p.clock = lambda: now[0]
    add_tenants(s, "x")
    now[0] += 4.0
    harness.step(s)
    assert p.saves == 1 and saved(path)["state"] == {"tiers": {}}
    now[0] += 1.5
    harness.step(s)  # schedule() and update_from_output() both check; one save
    assert p.saves == 2
    clients = saved(path)["state"]["tiers"]["0"]["clients"]
    assert {c["name"]: c["waiting"] for c in clients}[GREEDY] == 3
    now[0] += 4.0
    harness.step(s)
    assert p.saves == 2  # the interval restarts at each save
    # shutdown saves (here after the requests finished normally: drain mode)
    while s.has_requests():
        harness.step(s)
    s.shutdown()
    assert p.saves == 3
    clients = saved(path)["state"]["tiers"]["0"]["clients"]
    assert all(c["waiting"] == 0 for c in clients)


def test_abort_of_every_request_saves_first_and_shutdown_keeps_that(
    policy_env: Any, tmp_path: Path
) -> None:
    """vLLM's shutdown in abort mode calls finish_requests(None) (it raised a
    TypeError in fairq's hook before), then shutdown(): the file holds the
    state before the abort, with the waiting tenants still backlogged."""
    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path))
    s = build()
    greedy_run(s)
    aborted = s.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    assert len(aborted) == 12 and not s.fairq.tenant_of
    doc = saved(path)
    waiting = {c["name"]: c["waiting"] for c in doc["state"]["tiers"]["0"]["clients"]}
    assert waiting == {GREEDY: 3, "a": 4, "b": 4}
    s.shutdown()
    assert saved(path) == doc
    # a step after an abort of everything (fault-tolerance reset) ends the hold
    s.schedule()
    s.shutdown()
    assert saved(path)["saved_at"] > doc["saved_at"]


def test_no_state_file_no_persistence(policy_env: Any) -> None:
    policy_env("vtc")
    s = build()
    assert s.fairq_persist is None
    s.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    s.shutdown()


# -- atomic writes ----------------------------------------------------------------


def test_a_crash_mid_write_leaves_the_old_file(
    policy_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path))
    s = build()
    greedy_run(s)
    assert s.fairq_persist.save()
    good = path.read_text()

    def crash(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(persist.os, "fsync", crash)
    harness.step(s)
    assert not s.fairq_persist.save()  # logged, not raised
    monkeypatch.undo()
    assert path.read_text() == good
    assert os.listdir(tmp_path) == ["state.json"]

    # a writer killed mid-write leaves its temporary file: the next start
    # reads the old file and removes it
    (tmp_path / ".state.json.tmp-999999").write_text('{"format": "fairq.vllm.st')
    policy_env("vtc", state_file=str(path))
    s2 = build()
    assert s2.fairq.schedulers()[0].counter(GREEDY) > 0
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_write_errors_are_logged_never_raised(
    policy_env: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "gone"
    path = d / "state.json"
    policy_env("vtc", state_file=str(path), state_interval_s=1e-9)
    s = build()  # creates the directory
    assert path.exists()
    path.unlink()
    d.rmdir()
    caplog.set_level(logging.INFO, logger="fairq.vllm.persist")
    add_tenants(s, "x")
    for _ in range(3):
        harness.step(s)  # a save due in every hook, each one failing
    failures = s.fairq_persist.failures
    assert failures >= 3
    warnings = logs(caplog)
    assert len(warnings) == 1 and "could not save" in warnings[0]
    s.shutdown()  # also only logged
    assert s.fairq_persist.failures == failures + 1
    d.mkdir()
    harness.step(s)
    assert path.exists() and any("works again" in m for m in logs(caplog, logging.INFO))


# -- files that cannot be used ------------------------------------------------------


def _write_good_state(policy_env: Any, path: Path, policy: str = "vtc", **opts: Any) -> None:
    if path.exists():
        path.unlink()
    policy_env(policy, state_file=str(path), **opts)
    s = build()
    greedy_run(s)
    shut_down_like_vllm(s)


def _fresh_start(
    policy_env: Any, path: Path, caplog: pytest.LogCaptureFixture, match: str, **opts: Any
) -> Any:
    caplog.clear()
    caplog.set_level(logging.INFO, logger="fairq.vllm.persist")
    bad = path.read_bytes() if path.is_file() else None
    policy_env(opts.pop("policy", "vtc"), state_file=str(path), **opts)
    s = build()  # never raises
    warnings = logs(caplog)
    assert len(warnings) == 1 and match in warnings[0], warnings
    aside = list(path.parent.glob("state.json.bad-*"))
    assert len(aside) == 1 and f"moved it to {aside[0]}" in warnings[0]
    if bad is not None:
        assert aside[0].read_bytes() == bad  # kept for inspection
    aside[0].rmdir() if aside[0].is_dir() else aside[0].unlink()
    # fresh: no tenant known, and a new file written
    assert s.fairq.schedulers() == {} and saved(path)["state"] == {"tiers": {}}
    add_tenants(s, "y", greedy_first=True)
    assert first_admissions(s, 1) == [GREEDY]  # the greedy tenant is level again
    return s


def test_corrupt_file_starts_fresh_and_is_moved_aside(
    policy_env: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    _write_good_state(policy_env, path)
    path.write_text(path.read_text()[:100])  # truncated
    _fresh_start(policy_env, path, caplog, "is not valid JSON")
    path.write_text("[1, 2]")
    _fresh_start(policy_env, path, caplog, "is not a JSON object")
    path.write_text(json.dumps({"format": "something else"}))
    _fresh_start(policy_env, path, caplog, "is not a fairq vLLM state file")
    _write_good_state(policy_env, path)
    doc = json.loads(path.read_text())
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    _fresh_start(policy_env, path, caplog, "has version 99")
    # a state the Rust core rejects: the error names the field
    _write_good_state(policy_env, path)
    doc = json.loads(path.read_text())
    doc["state"]["tiers"]["0"]["clients"][0]["counter"] = -1
    path.write_text(json.dumps(doc))
    _fresh_start(policy_env, path, caplog, "clients[0].counter")


def test_foreign_policy_or_options_start_fresh(
    policy_env: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    _write_good_state(policy_env, path, "dlpm", quantum=256)
    _fresh_start(policy_env, path, caplog, "was written by policy 'dlpm'", policy="vtc")
    _write_good_state(policy_env, path, "dlpm", quantum=256)
    _fresh_start(
        policy_env, path, caplog, "was written with other options", policy="dlpm", quantum=512
    )
    # tenant weights are not in the fingerprint: the configured ones win
    _write_good_state(policy_env, path, "vtc", tenant_weights={GREEDY: 2})
    policy_env("vtc", state_file=str(path), tenant_weights={"a": 3})
    s = build()
    sc = s.fairq.schedulers()[0]
    assert sc.counter(GREEDY) > 0 and sc.weight(GREEDY) == 1.0 and sc.weight("a") == 3.0


def test_unreadable_file_starts_fresh(
    policy_env: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "state.json"
    _write_good_state(policy_env, path)

    def denied(self: Any) -> str:
        raise PermissionError(13, "Permission denied", self.path)

    with monkeypatch.context() as m:
        m.setattr(persist.StateFile, "read_text", denied)
        _fresh_start(policy_env, path, caplog, "cannot be read")
    path.write_bytes(b"\xff\xfe not utf-8")
    _fresh_start(policy_env, path, caplog, "cannot be read")
    path.unlink()
    path.mkdir()  # a directory where the file should be
    _fresh_start(policy_env, path, caplog, "cannot be read")


def test_missing_file_is_a_fresh_start(
    policy_env: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fairq.vllm.persist")
    path = tmp_path / "sub" / "state.json"
    policy_env("dlpm", state_file=str(path))
    s = build()
    assert any("starting fresh" in m for m in logs(caplog, logging.INFO))
    assert not logs(caplog)
    assert saved(path)["policy"] == "dlpm" and s.fairq_persist.saves == 1


# -- options ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["vtc", "wfq"])
@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"state_file": ""}, ValueError, "state_file"),
        ({"state_file": 5}, ValueError, "state_file"),
        ({"state_file": "/tmp/x.json", "state_interval_s": 0}, ValueError, "state_interval_s"),
        ({"state_file": "/tmp/x.json", "state_interval_s": -1}, ValueError, "state_interval_s"),
        ({"state_file": "/tmp/x.json", "state_interval_s": "10"}, TypeError, "state_interval_s"),
        ({"state_interval_s": float("inf")}, ValueError, "state_interval_s"),
    ],
)
def test_bad_state_options_name_the_field(
    policy_env: Any, policy: str, options: dict[str, Any], error: type, match: str
) -> None:
    policy_env(policy, **options)
    with pytest.raises(error, match=match):
        build()


# -- flushed when the engine goes idle ---------------------------------------------


def wait_until(ok: Any, timeout: float = 10.0) -> None:
    """Poll ``ok()`` until it holds (a background thread's work)."""
    import time

    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _service_shipped(stats: Any, tenant: str) -> float:
    from fairq.vllm.stats import decode_families, take_payload

    payload = take_payload(stats)
    assert payload is not None
    fams = {f.name: f for f in decode_families(payload, {"engine": "0"})}
    fam = fams["fairq_scheduler_service_tokens"]
    return sum(
        smp.value
        for smp in fam.samples
        if smp.labels.get("tenant") == tenant and smp.name.endswith("_total")
    )


def test_a_burst_is_in_the_file_and_the_last_stats_once_idle(
    policy_env: Any, tmp_path: Path
) -> None:
    """A burst, then silence: with a save interval of an hour and metrics
    shipped at most once a second, the step that leaves no unfinished
    request ships fairq's families as they are after its hooks (the
    finished requests charged and gone) and wakes the flusher, which saves
    the state file at once, so neither a SIGKILL nor a ``/metrics`` scrape
    during the silence misses the end of the burst."""
    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path), state_interval_s=3600)
    s = build(max_num_seqs=16)
    s._fairq_packer.interval_s = 3600.0
    saves = s.fairq_persist.saves
    add_tenants(s, "x")
    last: dict[int, Any] = {}
    while s.has_unfinished_requests():
        _, last = harness.step(s)
    # saved by the flusher's thread, woken as the engine went idle
    wait_until(lambda: s.fairq_persist.saves == saves + 1)
    doc = saved(path)["state"]["tiers"]["0"]
    served = {c["name"]: c["service"] for c in doc["clients"]}
    assert served[GREEDY] == pytest.approx(s.fairq.service(GREEDY)) == 4 * (256 + 2 * 2)
    assert doc["running"] == []
    stats = next(e.scheduler_stats for e in last.values() if e.scheduler_stats is not None)
    assert _service_shipped(stats, GREEDY) == pytest.approx(4 * (256 + 2 * 2))
    # silence: a trailing step changes nothing, and nothing is saved again
    harness.step(s)
    s.shutdown()
    assert s.fairq_persist.saves == saves + 1


def test_an_abort_while_idle_is_flushed_in_the_background(policy_env: Any, tmp_path: Path) -> None:
    """Requests aborted while nothing runs (clients gone): no step follows,
    so the background flusher, woken at once, saves the state file and
    sends fairq's families through the engine core's output queue."""
    import queue

    from fairq.vllm.stats import EngineCoreLink

    path = tmp_path / "state.json"
    policy_env("vtc", state_file=str(path), state_interval_s=3600)
    s = build()
    add_tenants(s, "x")
    harness.step(s)
    out_q: queue.Queue[Any] = queue.Queue()
    s._fairq_link = EngineCoreLink(out_q)
    saves = s.fairq_persist.saves
    s.finish_requests(list(s.requests), RequestStatus.FINISHED_ABORTED)
    assert not s.fairq.tenant_of
    wait_until(lambda: s.fairq_persist.saves == saves + 1)
    s.fairq_flusher.run_once()  # (after the woken round, which sent them)
    client, eco = out_q.get_nowait()
    assert client == 0
    assert _service_shipped(eco.scheduler_stats, GREEDY) == pytest.approx(s.fairq.service(GREEDY))
    s.fairq_flusher.run_once()  # nothing changed: nothing sent again
    assert out_q.empty()
    s.shutdown()
