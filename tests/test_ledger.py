"""The engine-neutral ledger (fairq.ledger): the book, the charging rules,
admission, requeue, tiers, the saved state, the hooks and the flusher,
driven directly, as an engine integration would (no engine imported)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fairq.engineopts import FairOptions
from fairq.ledger import Flusher, Hooks, Ledger, Persistence, PersistHook, StepHook, TenantTally
from fairq.sched import POLICY_INFO


class Resolver:
    """Tenant = the text before ``:`` in the request id."""

    OPTIONS = ()
    LIST_OPTIONS = ()

    def __call__(self, req: Any) -> str:
        return str(req.rid).split(":")[0]


def ledger(policy: str = "vtc", tiers: bool = False, **opts: Any) -> Ledger:
    raw = dict(opts)
    options = FairOptions.from_mapping(
        policy, raw, policies=tuple(POLICY_INFO), resolver=Resolver, engine_keys=()
    )
    options = FairOptions(
        options.policy, options.policy_options, options.tenant_weights, Resolver()
    )
    return Ledger(options, tiers=tiers, name="test", on_new_scheduler=lambda s, n: None)


def req(rid: str, n: int = 10) -> Any:
    return SimpleNamespace(rid=rid, prompt=[hash(rid) % 1000 + 1] * n)


def add(led: Ledger, *reqs: Any, tier: int = 0) -> None:
    for r in reqs:
        led.add(r.rid, r, r.prompt, tier=tier)


def run_to_end(led: Ledger, r: Any, out: int = 0) -> None:
    """Take ``r`` (admitted), compute its prompt, ``out`` output tokens, finish."""
    assert led.take(r.rid)
    led.charge_prompt(r.rid, 0, len(r.prompt), len(r.prompt))
    led.settle()
    led.charge_output(r.rid, out)
    assert led.finish(r.rid)


def test_book_moves_and_forgets() -> None:
    led = ledger()
    a, b = req("a:0"), req("b:0")
    add(led, a, b)
    assert set(led.waiting) == {"a:0", "b:0"} and len(led) == 2
    with pytest.raises(ValueError, match="already in the ledger"):
        led.add("a:0", a, a.prompt)
    got = led.admit(1)
    assert got == [a] and list(led.admitted) == ["a:0"] and led.head() is a
    run_to_end(led, a, out=3)
    assert led.service("a") == pytest.approx(10 + 2 * 3)
    assert "a:0" not in led and led.left == 1
    assert led.remove("b:0") and len(led) == 0 and not led.remove("b:0")
    assert led.tenant_of == {} and led._high == {} and led._extend == {}


def test_each_prompt_position_charged_once_and_cached_part_free() -> None:
    led = ledger("vtc")
    r = req("a:0", 100)
    add(led, r)
    led.admit(1)
    led.take(r.rid)
    # 40 cached positions, then two chunks
    assert led.charge_prompt(r.rid, 40, 70, 100) == 30
    assert led.charge_prompt(r.rid, 70, 100, 100) == 30
    led.settle()
    assert led._extend[r.rid] == 60
    # preempted: back with its charges kept; recomputation is free
    led.requeue(r.rid, r.prompt + [5, 6], refund=False)
    assert led.ran(r.rid) and r.rid in led.waiting
    led.charge_output(r.rid, 2)  # arrived while waiting: pending
    assert led._pending[r.rid] == 2
    assert led.admit(1) == [r]
    led.take(r.rid)
    assert led.charge_prompt(r.rid, 0, 100, 100) == 0
    led.settle()
    assert led._pending == {}


def test_release_refunds_what_never_ran() -> None:
    led = ledger("vtc")
    a, b = req("a:0"), req("a:1")
    add(led, a, b)
    before = led.scheduler(0).state_dict()
    assert led.admit(2) == [a, b]
    assert led.release(lambda item, ran: item.prompt) == 2
    assert led.scheduler(0).state_dict()["clients"] == before["clients"]
    assert set(led.waiting) == {"a:0", "a:1"} and not led.admitted


def test_batch_follows_the_engine() -> None:
    led = ledger()
    assert led.batch == 4
    led.grow()
    assert led.batch == 8
    led.end_step(taken=2)
    assert led.batch == 4
    led.end_step(taken=9)
    assert led.batch == 10
    for _ in range(20):
        led.end_step(taken=0, wanted_more=True)
    assert led.batch == 1024


def test_dlpm_admission_refills_at_most_once_per_call() -> None:
    led = ledger("dlpm", quantum=5.0)
    add(led, *(req(f"{t}:{i}", 10) for i in range(3) for t in "ab"))
    got = led.admit(6)
    # one refill (both tenants +5): one admission each, then no credit left
    # and no second refill within the call
    assert sorted(r.rid for r in got) == ["a:0", "b:0"]
    assert led.scheduler(0).refills == 1
    assert len(led.admit(6)) == 2 and led.scheduler(0).refills > 1  # (in bulk)


def test_tiers_strict_priority_then_fairness() -> None:
    led = ledger("vtc", tiers=True)
    add(led, req("a:0"), req("b:0"), tier=1)
    add(led, req("c:0"), tier=0)
    assert [r.rid for r in led.admit(5)] == ["c:0"]
    assert sorted(r.rid for r in led.admit(5)) == ["a:0", "b:0"]
    assert set(led.schedulers()) == {0, 1}
    assert [n for n, _ in led.metric_objects()] == ["test-vtc-tier0", "test-vtc-tier1"]


def test_without_tiers_everything_is_tier_zero() -> None:
    led = ledger("vtc")
    add(led, req("a:0"), tier=3)
    assert led.tier_of == {"a:0": 0}


def test_policy_traits_come_from_the_table() -> None:
    for name, info in POLICY_INFO.items():
        led = ledger(name)
        assert (led.needs_tree, led.refills) == (info.needs_tree, info.refills)


def test_saved_state_round_trip(tmp_path: Path) -> None:
    led = ledger("vtc")
    g = [req(f"g:{i}", 200) for i in range(2)]
    add(led, *g, req("a:0", 10))
    for r in led.admit(1):
        run_to_end(led, r, out=5)
    path = tmp_path / "s.json"
    p = Persistence(led, str(path), "vtc", 10.0, format="fairq.test.state")
    assert p.save() and json.loads(path.read_text())["format"] == "fairq.test.state"
    fresh = ledger("vtc")
    q = Persistence(fresh, str(path), "vtc", 10.0, format="fairq.test.state")
    assert q.load()
    assert fresh.service("g") == led.service("g") > 0
    # a file of another engine's format is not loaded (moved aside)
    other = Persistence(ledger("vtc"), str(path), "vtc", 10.0, format="fairq.vllm.state")
    assert not other.load() and not path.exists()


def test_persistence_flush_only_when_changed(tmp_path: Path) -> None:
    led = ledger("vtc")
    now = [0.0]
    p = Persistence(led, str(tmp_path / "s.json"), "vtc", 10.0, clock=lambda: now[0])
    assert not p.flush()  # nothing happened
    add(led, req("a:0"))
    p.tick()
    assert p.flush(due_only=True) is False  # not due
    assert p.flush() and p.saves == 1
    p.tick()  # a step, nothing changed
    assert not p.flush()
    now[0] += 11
    led.admit(1)
    p.tick()  # due: the step hook saves
    assert p.saves == 2


def test_hooks_are_called_in_order() -> None:
    calls: list[str] = []

    class H(StepHook):
        def __init__(self, name: str) -> None:
            self.name = name

        def after_schedule(self, scheduler: Any, output: Any) -> None:
            calls.append(self.name)

        def output_snapshot(self, scheduler_output: Any, requests: Any) -> Any:
            return self.name

        def after_update(self, snapshot: Any) -> None:
            calls.append(f"{snapshot}!")

    hooks = Hooks([H("a"), None, H("b")])
    assert len(hooks) == 2
    hooks.after_schedule(None, None)
    hooks.after_update(hooks.output_snapshot(None, {}))
    hooks.idle()
    hooks.shutdown()
    assert calls == ["a", "b", "a!", "b!"]


def test_persist_hook_saves_when_idle(tmp_path: Path) -> None:
    led = ledger("vtc")
    p = Persistence(led, str(tmp_path / "s.json"), "vtc", 3600.0)
    hook = PersistHook(p)
    add(led, req("a:0"))
    hook.after_schedule(None, None)
    assert p.saves == 0
    hook.idle()
    assert p.saves == 1


def test_flusher_runs_under_the_lock_and_stops() -> None:
    lock = threading.RLock()
    seen: list[bool] = []
    count = [0]

    def job() -> Any:
        seen.append(lock._is_owned())  # type: ignore[attr-defined]
        count[0] += 1
        return Flusher.DONE if count[0] >= 3 else None

    def bad() -> None:
        raise RuntimeError("boom")

    f = Flusher(lock, 0.01, [job, bad]).start()
    deadline = time.monotonic() + 5
    while count[0] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert count[0] == 3 and all(seen)
    assert bad in f.jobs and job not in f.jobs
    f.stop()
    with pytest.raises(ValueError, match="interval_s"):
        Flusher(lock, 0)


def test_tally_counts_once_and_bounds_tenants() -> None:
    t = TenantTally(max_tenants=1)
    assert t.record("r1", "alice", 100, 60)
    assert not t.record("r1", "alice", 100, 60)
    t.record("r2", "bob", 50, -3)
    assert t.requests == {"alice": 1, TenantTally.OTHER: 1}
    assert t.hit_tokens == {"alice": 60, TenantTally.OTHER: 0}
    t.forget_finished(set())
    assert t.seen("r1")  # only forgotten once far more than live


def test_gauge_mirror_writes_multiprocess_files(tmp_path: Path) -> None:
    """In a process with ``$PROMETHEUS_MULTIPROC_DIR`` (an SGLang scheduler
    with metrics on), the mirrored gauges reach a ``MultiProcessCollector``
    (what SGLang's ``/metrics`` serves)."""
    pytest.importorskip("prometheus_client")
    import os
    import subprocess
    import sys

    code = """
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.core import CounterMetricFamily
from fairq.ledger.promsync import GaugeMirror, multiprocess_dir
assert multiprocess_dir()
fam = CounterMetricFamily("fairq_x_tokens", "doc", labels=["tenant"])
fam.add_metric(["heavy"], 816.0)
assert GaugeMirror().write([fam]) == 1
reg = CollectorRegistry()
multiprocess.MultiProcessCollector(reg)
print(reg.get_sample_value("fairq_x_tokens_total", {"tenant": "heavy"}))
"""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "816.0"


def test_engines_fair_policies_follow_the_policy_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM and SGLang list their fair policies from fairq.sched.POLICY_INFO
    (a policy added to the core is one of them with no edit), and vLLM's
    policy resolution accepts a fair policy its enum does not list."""
    from fairq.sglang import tenants as sglang_tenants
    from fairq.vllm import scheduler as fsched
    from fairq.vllm import tenants as vllm_tenants

    assert set(vllm_tenants.FAIR_POLICIES) == set(POLICY_INFO) - {"fcfs"}
    assert set(sglang_tenants.POLICIES) == set(POLICY_INFO)
    monkeypatch.setattr(fsched, "FAIR_POLICIES", (*vllm_tenants.FAIR_POLICIES, "newpol"))
    monkeypatch.setenv(fsched.ENV_VAR, "NewPol")
    got = fsched.resolve_policy(SimpleNamespace())
    assert got == "newpol" and got.value == "newpol"
    monkeypatch.setenv(fsched.ENV_VAR, "nope")
    with pytest.raises(ValueError, match="newpol"):
        fsched.resolve_policy(SimpleNamespace())
    assert fsched.OPTIONS_ENV_VAR == vllm_tenants.OPTIONS_ENV_VAR == "FAIRQ_VLLM_OPTIONS"


def test_an_idle_save_can_leave_the_step_for_the_flusher(tmp_path: Path) -> None:
    """With ``PersistHook.wake`` set, going idle wakes the flusher (a long
    interval notwithstanding), whose round saves; the hook itself does not."""
    led = ledger("vtc")
    p = Persistence(led, str(tmp_path / "s.json"), "vtc", 3600.0)
    f = Flusher(led.lock, 3600.0, [p.flush]).start()
    hook = PersistHook(p)
    hook.wake = f.wake
    add(led, req("a:0"))
    hook.idle()
    deadline = time.monotonic() + 5
    while p.saves == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.saves == 1 and f.rounds >= 1
    f.stop()
