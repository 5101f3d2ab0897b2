"""fairq's policies inside SGLang 0.5.23's real scheduling objects.

Runs with the SGLang venv's python (``.ci/sglang-requirements.txt``); skipped
where SGLang is not importable. Covered: SGLang's own ``SchedulePolicy``
(its ``lpm`` as the baseline, fairq's subclass), ``PrefillAdder`` (real
budgets, chunked prefill, locks), ``RadixCache`` over a CPU
``TokenToKVPoolAllocator``, and ``Req`` (retraction via ``reset_for_retract``),
driven step by step by :class:`fairq.enginebench.harness.sglang.Engine` with outputs the
test makes. Not covered: SGLang's ``Scheduler`` class itself (building it
needs a model runner), overlap scheduling, mixed chunks, LoRA, hicache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from array import array
from typing import Any

import pytest

try:
    import sglang.srt.managers.schedule_policy  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the venv
    pytest.skip(
        f"SGLang 0.5.23 is not importable here ({e}); run these tests with the SGLang "
        "venv's python (pip install -r .ci/sglang-requirements.txt && "
        "pip install --no-deps sglang==0.5.23)",
        allow_module_level=True,
    )

from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.enginebench.harness.sglang import (
    Engine,
    contention,
    greedy_workload,
    grouped_workload,
    max_gap_while_backlogged,
    publish_server_args,
)
from fairq.sglang.mirror import RadixCacheMirror
from fairq.sglang.tenants import POLICIES as SGLANG_POLICIES

#: every registered policy, as SGLang names it (LAS included)
POLICIES = [f"fairq-{p}" for p in SGLANG_POLICIES]


# -- the prefix-cache mirror ---------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("insert"),
            st.lists(st.integers(0, 3), min_size=1, max_size=24),
            st.sampled_from([None, "lora1"]),
        ),
        st.tuples(st.just("evict"), st.integers(1, 30), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, page=st.sampled_from([1, 4]))
def test_mirror_matches_what_sglang_matches(ops: list[Any], page: int) -> None:
    """After any inserts and evictions on SGLang's RadixCache, the mirror's
    match of every sequence equals SGLang's own ``match_prefix`` length."""
    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.base_prefix_cache import (
        EvictParams,
        InsertParams,
        MatchPrefixParams,
    )
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

    publish_server_args()
    alloc = TokenToKVPoolAllocator(4096, torch.float16, "cpu", None, False)
    cache = RadixCache.create_simulated(mock_allocator=alloc, page_size=page)
    cache.insert(InsertParams(key=RadixKey(array("q", [7] * 8)), value=alloc.alloc(8)))
    mirror = RadixCacheMirror.attach(cache)  # picks up what is there already
    seen: list[tuple[list[int], Any]] = []
    for op, a, ns in ops:
        if op == "insert":
            key = RadixKey(array("q", a), extra_key=ns).page_aligned(page)
            if len(key):
                cache.insert(InsertParams(key=key, value=alloc.alloc(len(key))))
            seen.append((a, ns))
        else:
            cache.evict(EvictParams(num_tokens=a))
        for toks, ns2 in [*seen, ([7] * 9, None)]:
            want = cache.match_prefix(
                MatchPrefixParams(key=RadixKey(array("q", toks), extra_key=ns2))
            ).device_prefix_len
            assert mirror.match(toks, ns2) == want
    mirror.detach()
    assert not hasattr(cache.kv_events, "_fairq_mirror")


def _tree_state(cache: Any) -> list[tuple[int, float, int]]:
    out, stack = [], [cache.root_node]
    while stack:
        n = stack.pop()
        out.append((id(n), n.last_access_time, n.hit_count))
        stack.extend(n.children.values())
    return sorted(out)


@pytest.mark.parametrize("policy", ["fairq-lpm", "fairq-dlpm"])
def test_ordering_leaves_sglang_cache_untouched(policy: str) -> None:
    """fairq's ordering reads its mirror: no node of SGLang's tree is split
    or created, and no LRU time or hit count moves. (SGLang's own LPM moves
    them, which shows the check can fail.)"""
    e = Engine(policy, kv_tokens=1 << 15)
    greedy_workload(e, seed=5, flood=12, each=4)
    for _ in range(4):
        e.step()
    e.request(list(range(100, 400)), rid="late:1")
    before = _tree_state(e.cache)
    e.policy.calc_priority(e.waiting, None)
    assert _tree_state(e.cache) == before
    from sglang.srt.managers.schedule_policy import SchedulePolicy

    SchedulePolicy("lpm", e.cache, False, False, True).calc_priority(list(e.waiting), None)
    assert _tree_state(e.cache) != before


# -- every request exactly once; charges are what SGLang computed -----------------


@pytest.mark.parametrize("policy", POLICIES)
def test_every_request_leaves_exactly_once_and_charges_match(policy: str) -> None:
    """With chunked prefill, aborts of waiting and running requests and
    retractions: each request is admitted once (a retracted one once more),
    leaves fairq exactly once, and each tenant's fairq service equals what
    SGLang computed: prompt positions the first time (recomputation after a
    retraction is free) plus weighted outputs."""
    e = Engine(policy, chunk_size=256, max_prefill_tokens=1024, kv_tokens=1 << 15)
    greedy_workload(e, seed=7, flood=24, each=8)
    n = len(e.waiting)
    aborted_waiting = None
    retracted: set[str] = set()
    aborted_running = None
    for step in range(10_000):
        if not e.waiting and not e.running and e.chunked is None:
            break
        e.step()
        if step == 1:  # fairq has seen it waiting
            aborted_waiting = e.waiting[-1]
            e.abort(aborted_waiting)
        if step in (3, 9, 15) and e.running:
            victim = e.running[0]
            if victim.rid not in retracted:
                retracted.add(victim.rid)
                e.retract(victim)
        if step == 6 and len(e.running) > 1 and aborted_running is None:
            aborted_running = e.running[-1]
            e.abort(aborted_running)
    e.policy.calc_priority(e.waiting, None)  # fairq sees the last finishes
    st_ = e.fairq
    assert len(retracted) == 3 and aborted_running is not None and aborted_waiting is not None
    assert len(st_) == 0 and len(st_.sched) == 0 and st_.sched.num_running == 0
    assert st_.left == n and not st_.tenant_of
    assert aborted_waiting.rid not in e.admissions
    assert {r: c for r, c in e.admissions.items() if c != 1} == dict.fromkeys(retracted, 2)
    assert len(e.admissions) == n - 1
    for t in e.prompt_served:
        # service is extend + 2 * output in all four (VTC's counter charges
        # the whole prompt, its service what was computed)
        assert st_.service(t) == pytest.approx(e.prompt_served[t] + 2.0 * e.output_served[t])


# -- fairness and locality -------------------------------------------------------------


def test_dlpm_within_theorem_bound_and_sglang_lpm_is_not() -> None:
    """Theorem 4.1 (VTC's bound with Q_u = 0 is DLPM's with a quantum): while
    two tenants are backlogged, their service (extend + 2 * output) differs by
    at most 2 * (U + Q), U = l_in + 2 * m. SGLang's LPM breaks it by far."""
    quantum = 512.0
    results = {}
    for policy in ("lpm", "fairq-dlpm"):
        e = Engine(
            policy,
            options={"quantum": quantum} if "dlpm" in policy else None,
            max_prefill_tokens=2048,
            chunk_size=1024,
            kv_tokens=1 << 15,
        )
        greedy_workload(e, seed=11)
        e.run()
        results[policy] = e
    e = results["fairq-dlpm"]
    l_in = max(e.prompt_len.values())
    u = 1.0 * l_in + 2.0 * 12
    assert max_gap_while_backlogged(e) <= 2 * (u + quantum)
    assert max_gap_while_backlogged(results["lpm"]) > 4 * (u + quantum)


def test_vtc_within_its_bound() -> None:
    """VTC's bound (Theorem 4.1 with Q_u = 0): while two tenants are
    backlogged, their cost (whole prompt + 2 * output) differs by at most
    2 * U; SGLang's LPM breaks it."""
    results = {}
    for policy in ("lpm", "fairq-vtc"):
        e = Engine(policy, max_prefill_tokens=2048, chunk_size=1024, kv_tokens=1 << 15)
        greedy_workload(e, seed=11)
        e.run()
        results[policy] = e
    u = 1.0 * max(results["fairq-vtc"].prompt_len.values()) + 2.0 * 12
    assert max_gap_while_backlogged(results["fairq-vtc"], vtc=True) <= 2 * u
    assert max_gap_while_backlogged(results["lpm"], vtc=True) > 4 * u


def test_greedy_tenant_dominates_sglang_lpm_not_fairq_dlpm() -> None:
    results = {}
    for policy in ("lpm", "fairq-dlpm"):
        e = Engine(policy, max_prefill_tokens=2048, chunk_size=1024, kv_tokens=1 << 15)
        greedy_workload(e, seed=13)
        e.run()
        results[policy] = e
    served = contention(results["lpm"])
    others = max(v for t, v in served.items() if t != "flood")
    assert served["flood"] > 4 * others
    served = contention(results["fairq-dlpm"])
    assert max(served.values()) <= 1.5 * min(served.values())
    assert results["fairq-dlpm"].hit_rate >= 0.9 * results["lpm"].hit_rate


def test_dlpm_keeps_locality_where_sglang_lpm_falls_back_to_fcfs() -> None:
    """More than 128 waiting: SGLang's LPM turns into FCFS
    (WAITING_QUEUE_PREFIX_MATCH_MAX); fairq's DLPM and LPM keep matching."""
    from sglang.srt.managers.schedule_policy import WAITING_QUEUE_PREFIX_MATCH_MAX

    rates = {}
    for policy in ("lpm", "fairq-lpm", "fairq-dlpm"):
        e = Engine(policy, max_prefill_tokens=1024, chunk_size=512, kv_tokens=2048)
        grouped_workload(e, seed=17)
        assert len(e.waiting) > WAITING_QUEUE_PREFIX_MATCH_MAX
        e.run()
        rates[policy] = e.hit_rate
    assert rates["fairq-dlpm"] > rates["lpm"] + 0.1, rates
    assert rates["fairq-lpm"] > rates["lpm"] + 0.1, rates


# -- the hook -------------------------------------------------------------------------


def _bare_scheduler(cls: type, policy: str) -> Any:
    """An SGLang ``Scheduler`` with only what ``init_schedule_policy`` reads
    (building a whole one needs a model runner)."""
    from sglang.srt.mem_cache.radix_cache import RadixCache

    s = object.__new__(cls)
    s.schedule_policy = policy
    s.tree_cache = RadixCache.create_simulated()
    s.enable_hierarchical_cache = False
    s.enable_priority_scheduling = False
    s.schedule_low_priority_values_first = False
    return s


def test_install_selects_fairq_policies_in_sglangs_scheduler() -> None:
    sm = pytest.importorskip("sglang.srt.managers.scheduler", reason="SGLang's Scheduler module")
    from sglang.srt.managers.schedule_policy import PrefillAdder, SchedulePolicy

    import fairq.sglang

    publish_server_args()
    orig = sm.Scheduler.init_schedule_policy
    with pytest.raises(ValueError, match="'quantm'"):
        fairq.sglang.install("fairq-dlpm", quantm=3)
    assert sm.Scheduler.init_schedule_policy is orig  # nothing patched on error
    try:
        fairq.sglang.install(quantum=300, tenant={"order": ["routing_key"]})
        s = _bare_scheduler(sm.Scheduler, "fairq-dlpm")
        s.init_schedule_policy()
        assert type(s.policy).__name__ == "FairSchedulePolicy"
        assert isinstance(s.policy, SchedulePolicy)
        assert s.schedule_policy == "fairq-dlpm"
        assert s.policy.fairq.options.policy_options["quantum"] == 300.0
        assert issubclass(s.get_prefill_adder_class(), PrefillAdder)
        assert s.get_prefill_adder_class().fairq is s.policy.fairq
        plain = _bare_scheduler(sm.Scheduler, "lpm")  # SGLang's own, unchanged
        plain.init_schedule_policy()
        assert type(plain.policy) is SchedulePolicy
        assert plain.get_prefill_adder_class() is PrefillAdder
        fairq.sglang.install("fairq-vtc")  # one policy for every scheduler
        forced = _bare_scheduler(sm.Scheduler, "lpm")
        forced.init_schedule_policy()
        assert forced.policy.fairq.options.policy == "vtc"
    finally:
        fairq.sglang.uninstall()
    assert sm.Scheduler.init_schedule_policy is orig


def test_plugin_installs_the_policy_named_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fairq's SGLang plugin: nothing without ``FAIRQ_SGLANG_POLICY``; with
    it, that policy in every scheduler, options from the environment; a bad
    option ends the process (SystemExit naming the field), patching nothing."""
    sm = pytest.importorskip("sglang.srt.managers.scheduler", reason="SGLang's Scheduler module")
    from fairq.sglang._install import POLICY_ENV_VAR, plugin

    publish_server_args()
    orig = sm.Scheduler.init_schedule_policy
    monkeypatch.delenv(POLICY_ENV_VAR, raising=False)
    monkeypatch.delenv("FAIRQ_SGLANG_CONFIG", raising=False)
    plugin()
    assert sm.Scheduler.init_schedule_policy is orig
    monkeypatch.setenv(POLICY_ENV_VAR, "fairq-dlpm")
    monkeypatch.setenv("FAIRQ_SGLANG_OPTIONS", '{"quantum": -1}')
    with pytest.raises(SystemExit, match="FAIRQ_SGLANG_POLICY='fairq-dlpm'.*quantum"):
        plugin()
    assert sm.Scheduler.init_schedule_policy is orig
    monkeypatch.setenv(POLICY_ENV_VAR, "fairq-nope")
    with pytest.raises(SystemExit, match="policy must be one of fairq-fcfs"):
        plugin()
    monkeypatch.setenv(POLICY_ENV_VAR, "fairq-dlpm")
    monkeypatch.setenv("FAIRQ_SGLANG_OPTIONS", '{"quantum": 700}')
    try:
        plugin()
        s = _bare_scheduler(sm.Scheduler, "lpm")  # what SGLang's CLI allows
        s.init_schedule_policy()
        assert s.policy.fairq.options.policy == "dlpm"
        assert s.policy.fairq.options.policy_options["quantum"] == 700.0
    finally:
        import fairq.sglang

        fairq.sglang.uninstall()
    assert sm.Scheduler.init_schedule_policy is orig


def _fairq_plugin_visible() -> bool:
    from importlib.metadata import entry_points

    return any(
        ep.name == "fairq" and ep.value == "fairq.sglang._install:plugin"
        for ep in entry_points(group="sglang.srt.plugins")
    )


@pytest.mark.skipif(
    not _fairq_plugin_visible(),
    reason="fairq's entry point 'sglang.srt.plugins' is not installed in this environment "
    "(pip install fairq, or .ci/run's SGLang environment)",
)
@pytest.mark.parametrize("options", ['{"quantum": 700}', '{"quantum": -1}'])
def test_sglangs_own_plugin_loader_runs_fairq(options: str) -> None:
    """In a fresh process, SGLang's ``load_plugins()`` (what each of its
    scheduler processes calls first) finds fairq's entry point and installs
    the policy; a bad option stops that process with the field named."""
    code = (
        "from sglang.srt.plugins import load_plugins\n"
        "load_plugins()\n"
        "from sglang.srt.managers.scheduler import Scheduler\n"
        "print('patched', hasattr(Scheduler.init_schedule_policy, '__fairq_original__'))\n"
    )
    env = {
        **os.environ,
        "FAIRQ_SGLANG_POLICY": "fairq-dlpm",
        "FAIRQ_SGLANG_OPTIONS": options,
    }
    env.pop("FAIRQ_SGLANG_CONFIG", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if "-1" in options:
        assert out.returncode != 0 and "patched" not in out.stdout
        assert "fairq: FAIRQ_SGLANG_POLICY='fairq-dlpm'" in out.stderr and "quantum" in out.stderr
    else:
        assert out.returncode == 0, out.stderr[-2000:]
        assert "patched True" in out.stdout


def test_tenants_and_namespaces_from_real_requests() -> None:
    """Tenants from SGLang ``Req`` fields (SGLang appends the LoRA id to
    ``extra_key``), and requests in different cache namespaces never match
    each other's prefix."""
    e = Engine("fairq-lpm", options={"tenant": {"order": ["routing_key", "extra_key", "rid"]}})
    shared = list(range(1000, 1300))
    reqs = [
        e.request(shared, routing_key="alice", rid="x:1"),
        e.request(shared, extra_key="ns", lora_id="L1", rid="x:2"),
        e.request(shared, rid="carol:3"),
        e.request(shared + [1], cache_salt="salt", rid="dave:4"),
    ]
    e.run()
    e.request(shared + [2], rid="late:5")  # same namespace as carol: a hit
    e.request(shared + [3], extra_key="other", rid="late:6")  # its own: a miss
    e.run()
    tenants = {r.rid: e.fairq.options.tenant(r) for r in reqs}
    assert tenants == {"x:1": "alice", "x:2": "nsL1", "carol:3": "carol", "dave:4": "dave"}
    assert e.first_prefix["late:5"] >= 256 and e.first_prefix["late:6"] == 0
    assert e.fairq.mirror is not None
    assert e.fairq.mirror.match(shared, "nsL1") == e.fairq.mirror.match(shared) > 0
    assert e.fairq.mirror.match(shared, "zzz") == 0
