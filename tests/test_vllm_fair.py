"""VTC, LPM and DLPM inside a real vLLM scheduler (issue 11).

Builds vLLM's own ``Scheduler`` / ``AsyncScheduler`` subclasses from
``fairq.vllm.scheduler`` over a local model config (no hub, no weights) and
drives ``schedule()`` / ``update_from_output()`` for hundreds of steps with
model-runner outputs the test builds (``fairq.enginebench.harness.vllm``, as vLLM's own
scheduler tests do). Skipped without vLLM 0.32 or 0.33 (``.ci/run`` installs
both: 0.33 in its environment, the CPU build 0.32 in the server's).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from reference.vllm import require_tested_vllm

vllm = require_tested_vllm()


# harness first: on a CPU-only machine it names vLLM's platform before vLLM
# resolves it
from fairq.enginebench.harness import vllm as harness  # noqa: E402, I001
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

from fairq.enginebench.workload import EngineRequest, multi_client_workload  # noqa: E402
from fairq.sim.model import StepModel  # noqa: E402
from fairq.vllm import scheduler as fsched  # noqa: E402
from fairq.vllm.tenants import FAIR_POLICIES  # noqa: E402

BLOCK = 16


@pytest.fixture
def policy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def set_policy(policy: str, **options: Any) -> None:
        import json

        monkeypatch.setenv("FAIRQ_VLLM_POLICY", policy)
        monkeypatch.setenv("FAIRQ_VLLM_OPTIONS", json.dumps(options))

    monkeypatch.delenv("FAIRQ_VLLM_CONFIG", raising=False)
    yield set_policy


def greedy_workload(seed: int = 0, per_tenant: int = 24) -> list[EngineRequest]:
    """One greedy tenant ("flood") with a long shared prefix flooding at t=0,
    three well-behaved tenants with their own prefixes arriving over time;
    :func:`run`'s KV cache holds about two of the four prefixes."""
    return multi_client_workload(
        n_clients=4,
        requests_per_client=per_tenant,
        flood_factor=4,
        prefix_len=512,
        suffix_len=32,
        max_new_tokens=16,
        vocab_size=30000,
        well_behaved_gap=0.02,
        seed=seed,
    )


def run(cls: type, workload: list[EngineRequest], **kw: Any) -> tuple[Any, harness.Replay]:
    params = {"num_blocks": 80, "max_num_batched_tokens": 512, "max_num_seqs": 16, **kw}
    s = harness.build_scheduler(cls, block_size=BLOCK, **params)
    return s, harness.replay(s, workload, StepModel(), block_size=BLOCK)


def contention(rep: harness.Replay) -> dict[str, float]:
    """Service (w_e * extend + w_q * output) each tenant got while all of them
    had requests waiting (first such step to the first step one ran dry)."""
    tl = rep.timeline
    a = next(i for i, row in enumerate(tl) if min(row[2].values()) > 0)
    b = next((i for i in range(a, len(tl)) if min(tl[i][2].values()) == 0), len(tl))
    start = tl[a - 1][1] if a > 0 else dict.fromkeys(tl[0][1], 0.0)
    assert b - a > 10, "the workload should keep every tenant backlogged for a while"
    return {t: tl[b - 1][1][t] - start[t] for t in start}


def max_gap_while_backlogged(rep: harness.Replay, measure: int = 1) -> float:
    """Largest |W_f - W_g| growth over any interval in which both tenants had
    requests waiting at every step (ALGORITHMS.md section 6, Theorem 4.1).
    ``measure``: 1 = extend + outputs (DLPM's W), 3 = every prompt token +
    outputs (VTC's cost)."""
    tl = [(row[0], row[measure], row[2]) for row in rep.timeline]
    tenants = sorted(tl[0][1])
    worst = 0.0
    for f, g in itertools.combinations(tenants, 2):
        start = None
        for k, (_, _, waiting) in enumerate(tl):
            both = waiting[f] > 0 and waiting[g] > 0
            if both and start is None:
                start = k
            if start is not None and (not both or k == len(tl) - 1):
                end = k if both else k - 1
                for a in range(start, end + 1):
                    wf0, wg0 = tl[a][1][f], tl[a][1][g]
                    for b in range(a, end + 1):
                        d = abs((tl[b][1][f] - wf0) - (tl[b][1][g] - wg0))
                        worst = max(worst, d)
                start = None
    return worst


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", FAIR_POLICIES)  # every registered policy (LAS included)
def test_every_request_finishes_exactly_once(
    policy_env: Any, policy: str, async_sched: bool
) -> None:
    policy_env(policy)
    cls = fsched.FairqAsyncScheduler if async_sched else fsched.FairqScheduler
    wl = greedy_workload()
    s, rep = run(cls, wl, async_scheduling=async_sched)
    assert sorted(rep.finished_count) == sorted(r.request_id for r in wl)
    assert set(rep.finished_count.values()) == {1}
    st = s.fairq
    assert not st.waiting and not st.running and not st.tenant_of and not st.ready
    for sched in st.schedulers().values():
        assert len(sched) == 0 and sched.num_running == 0


def test_dlpm_and_vtc_service_gap_within_theorem_bound(policy_env: Any) -> None:
    wl = greedy_workload(seed=1)
    l_in = max(len(r.prompt) for r in wl)
    m = max(r.max_new_tokens for r in wl)
    u = 1.0 * l_in + 2.0 * m
    quantum = 256.0
    policy_env("dlpm", quantum=quantum)
    _, rep = run(fsched.FairqScheduler, wl)
    assert max_gap_while_backlogged(rep) <= 2 * (u + quantum)
    policy_env("vtc")
    _, rep = run(fsched.FairqScheduler, wl)
    assert max_gap_while_backlogged(rep, measure=3) <= 2 * u
    # and the bound means something: LPM breaks it by far
    policy_env("lpm")
    _, rep = run(fsched.FairqScheduler, wl)
    assert max_gap_while_backlogged(rep) > 4 * (u + quantum)


def test_lpm_lets_the_greedy_tenant_dominate_and_dlpm_keeps_its_hit_rate(policy_env: Any) -> None:
    wl = greedy_workload(seed=2)
    results = {}
    for policy in ("lpm", "dlpm", "vtc"):
        policy_env(policy, **({"quantum": 1024.0} if policy == "dlpm" else {}))
        _, rep = run(fsched.FairqScheduler, wl)
        results[policy] = rep
    # While everyone waits, LPM serves the greedy tenant's cached prefix first
    served = contention(results["lpm"])
    assert served["flood"] > 4 * max(v for t, v in served.items() if t != "flood")
    # DLPM shares that time (within its quantum)
    served = contention(results["dlpm"])
    assert max(served.values()) <= 1.5 * min(served.values())
    assert results["dlpm"].hit_rate >= 0.9 * results["lpm"].hit_rate
    # and keeps the locality VTC throws away under this cache pressure
    assert results["dlpm"].hit_rate > results["vtc"].hit_rate + 0.1


@pytest.mark.parametrize("policy", ["vtc", "dlpm", "las"])
def test_charges_equal_what_vllm_computed_under_preemption(policy_env: Any, policy: str) -> None:
    """A KV cache too small for the batch forces preemptions. fairq's per-tenant
    service (``w_e * extend + w_q * output``) equals what vLLM computed for the
    first time plus the outputs: recomputation after a preemption is not
    charged twice, held-back requests are not charged, nothing is lost."""
    policy_env(policy)
    wl = greedy_workload(seed=3, per_tenant=12)
    s = harness.build_scheduler(
        fsched.FairqScheduler,
        block_size=BLOCK,
        num_blocks=40,
        max_num_seqs=32,
        max_num_batched_tokens=512,
    )
    preemptions = 0
    original = s._preempt_request

    def counting(request: Any, *a: Any, **k: Any) -> Any:
        nonlocal preemptions
        preemptions += 1
        return original(request, *a, **k)

    s._preempt_request = counting
    rep = harness.replay(s, wl, StepModel(), block_size=BLOCK)
    assert preemptions > 0
    assert set(rep.finished_count.values()) == {1} and len(rep.finished_count) == len(wl)
    for tenant, w in rep.timeline[-1][1].items():
        assert s.fairq.service(tenant) == pytest.approx(w), tenant


def test_mirror_matches_vllms_own_prefix_lookup(policy_env: Any) -> None:
    """At every step, for every waiting request, the mirror's match equals the
    block-aligned hit vLLM itself would find (its lookup is side-effect free)."""
    policy_env("lpm")
    wl = greedy_workload(seed=5, per_tenant=10)
    s = harness.build_scheduler(
        fsched.FairqScheduler, block_size=BLOCK, num_blocks=64, max_num_batched_tokens=256
    )
    pending = sorted(wl, key=lambda r: r.arrival)
    for r in pending:
        s.add_request(
            harness.make_request(r.request_id, r.prompt, r.max_new_tokens, tenant=r.client)
        )
    checked = 0
    mirror = s.fairq.mirror
    coord = s.kv_cache_manager.coordinator
    while s.has_requests():
        harness.step(s)
        mirror.sync()
        for req in list(s.fairq.waiting.values()):
            _, hit, _ = coord.find_longest_cache_hit(req.block_hashes, len(req.prompt_token_ids))
            ours = mirror.tree.match(req.prompt_token_ids)
            assert ours == hit, (req.request_id, ours, hit)
            checked += 1
    assert checked > 100


def test_priority_tiers_first_then_fairness(policy_env: Any) -> None:
    policy_env("vtc")
    s = harness.build_scheduler(
        fsched.FairqScheduler,
        block_size=BLOCK,
        scheduling_policy="priority",
        max_num_batched_tokens=64,
        max_num_seqs=2,
    )
    low = [
        harness.make_request(f"a:{i}", [5 + i] * 32, 4, tenant="a", priority=1) for i in range(4)
    ]
    high = [
        harness.make_request(f"b:{i}", [900 + i] * 32, 4, tenant="b", priority=0) for i in range(2)
    ]
    for r in low + high:
        s.add_request(r)
    out, _ = harness.step(s)
    assert set(out.num_scheduled_tokens) == {"b:0", "b:1"}


def test_bad_options_raise_at_construction_naming_the_field(
    policy_env: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    policy_env("dlpm", quantum=-1)
    with pytest.raises(ValueError, match="quantum"):
        harness.build_scheduler(fsched.FairqScheduler)
    policy_env("vtc", w_inn=1)
    with pytest.raises(ValueError, match="w_inn"):
        harness.build_scheduler(fsched.FairqScheduler)
    policy_env("vtc", tenant_weights={"a": 0})
    with pytest.raises(ValueError, match=r"tenant_weights\['a'\]"):
        harness.build_scheduler(fsched.FairqScheduler)
    policy_env("vtc", tenant={"order": ["bogus"]})
    with pytest.raises(ValueError, match=r"tenant.order\[0\]"):
        harness.build_scheduler(fsched.FairqScheduler)
    cfg = tmp_path / "fairq.yaml"
    cfg.write_text("tenant_weights:\n  gold: 2\ntenant:\n  order: [request_id]\n")
    policy_env("vtc")
    monkeypatch.setenv("FAIRQ_VLLM_CONFIG", str(cfg))
    s = harness.build_scheduler(fsched.FairqScheduler)
    assert s.fairq.options.tenant_weights == {"gold": 2.0}
    assert s.fairq.options.tenant.order == ("request_id",)


def test_tenant_weights_share_service(policy_env: Any) -> None:
    policy_env("vtc", tenant_weights={"c1": 2.0})
    wl = multi_client_workload(
        n_clients=3,
        requests_per_client=40,
        flood_factor=1,
        prefix_len=0,
        suffix_len=64,
        max_new_tokens=8,
        vocab_size=30000,
        seed=6,
    )
    _, rep = run(fsched.FairqScheduler, wl, max_num_batched_tokens=128, max_num_seqs=4)
    served = contention(rep)
    assert served["c1"] == pytest.approx(2 * served["c2"], rel=0.25)


def test_stock_vllm_scheduler_is_unchanged_by_the_harness() -> None:
    """The harness drives vLLM's own class the same way (baseline for the bench)."""
    wl = greedy_workload(seed=7, per_tenant=6)
    _, rep = run(Scheduler, wl)
    assert set(rep.finished_count.values()) == {1} and len(rep.finished_count) == len(wl)


@pytest.mark.parametrize("policy", ["vtc", "dlpm"])
def test_held_back_requests_keep_their_place_uncharged(policy_env: Any, policy: str) -> None:
    """vLLM holds a request back (as for a grammar still compiling: its own
    ``_handle_blocked_waiting_request`` says not ready, so its loop pops the
    request and puts it back at the end of the step). It stays at the head of
    the fair order, its tenant is charged nothing meanwhile, the others go
    on, and once released it runs and is charged exactly what vLLM computed."""
    policy_env(policy)
    s = harness.build_scheduler(
        fsched.FairqScheduler, block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=4
    )
    held = harness.make_request("a:0", [11] * 40, 4, tenant="a")
    others = [harness.make_request(f"b:{i}", [500 + i] * 40, 4, tenant="b") for i in range(3)]
    s.add_request(held)
    for r in others:
        s.add_request(r)
    blocked = {"a:0"}
    original = s._handle_blocked_waiting_request

    def gate(request: Any) -> bool:
        if request.request_id in blocked:
            return False
        return original(request)

    s._handle_blocked_waiting_request = gate
    for _ in range(3):
        out, _ = harness.step(s)
        assert "a:0" not in out.num_scheduled_tokens
        assert s.fairq.service("a") == 0.0
        assert "a:0" in s.fairq.waiting  # back in its place, not admitted
    assert s.fairq.service("b") > 0
    blocked.clear()
    out, _ = harness.step(s)
    assert "a:0" in out.num_scheduled_tokens  # first in the fair order again
    while s.has_requests():
        harness.step(s)
    assert s.fairq.service("a") == pytest.approx(40 + 2 * 4)


def test_wfq_flows_are_tenants(policy_env: Any) -> None:
    policy_env("wfq", virtual_clock="finish")
    s = harness.build_scheduler(
        fsched.FairqScheduler, block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=1
    )
    for i in range(6):
        s.add_request(harness.make_request(f"a:{i}", [3 + i] * 16, 2, tenant="a"))
    for i in range(2):
        s.add_request(harness.make_request(f"b:{i}", [90 + i] * 16, 2, tenant="b"))
    order = []
    while s.has_requests():
        out, _ = harness.step(s)
        order += [r for r in out.num_scheduled_tokens if r not in order]
    # per-tenant flows interleave a and b instead of serving a's backlog first
    assert order.index("b:0") < order.index("a:2") and order.index("b:1") < order.index("a:4")


def test_wfq_flows_are_charged_real_tokens(policy_env: Any) -> None:
    """A request queued with a large max_tokens estimate that stops early:
    its flow is charged what it used, so the tenant's next request starts
    where the real tokens put it (not behind its unused estimate). Start
    clock (vLLM WFQ's default): popping moves V to the start tag only."""
    policy_env("wfq")
    s = harness.build_scheduler(
        fsched.FairqScheduler, block_size=BLOCK, max_num_batched_tokens=64, max_num_seqs=1
    )
    # queued with a 1000-token estimate; stops at its first token (7, the
    # harness's sampled token, is a stop token)
    big = harness.make_request("a:0", [3] * 16, 1000, tenant="a")
    big.sampling_params.stop_token_ids = [7]
    big.sampling_params.update_from_generation_config({}, harness.EOS)
    s.add_request(big)
    assert s.waiting.flow_last_finish("a") == pytest.approx(16 + 1000)
    while s.has_requests():
        harness.step(s)
    # refunded down to what it used: 16 prompt tokens + 1 output token
    assert s.waiting.flow_last_finish("a") == pytest.approx(16 + 1)
    # an aborted request is settled too
    r = harness.make_request("a:1", [4] * 16, 1000, tenant="a")
    s.add_request(r)
    harness.step(s)
    from vllm.v1.request import RequestStatus

    s.finish_requests(["a:1"], RequestStatus.FINISHED_ABORTED)
    assert s.waiting.flow_last_finish("a") == pytest.approx(17 + 16 + 1)
