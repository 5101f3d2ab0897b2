"""The dual-phase (think / output) policy inside vLLM's real scheduler (issue 24).

vLLM's own ``Scheduler`` / ``AsyncScheduler`` subclasses from
``fairq.vllm.scheduler`` over a local model config (``fairq.enginebench.harness.vllm``);
the test builds each step's model output and decides which request emits the
end-of-think token when. Skipped without vLLM 0.32 or 0.33.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reference.vllm import require_tested_vllm

vllm = require_tested_vllm()

from fairq.enginebench.harness import vllm as harness  # noqa: E402, I001
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402

from fairq.vllm import scheduler as fsched  # noqa: E402

BLOCK = 16
END = 9  # the end-of-think token id of these tests
TOK = 7  # any other token


@pytest.fixture
def dual_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    def set_options(policy: str = "fcfs", **options: Any) -> None:
        monkeypatch.setenv("FAIRQ_VLLM_POLICY", policy)
        monkeypatch.setenv("FAIRQ_VLLM_OPTIONS", json.dumps(options))

    monkeypatch.delenv("FAIRQ_VLLM_CONFIG", raising=False)
    yield set_options


def build(
    dual: dict[str, Any],
    set_options: Callable[..., None],
    policy: str = "fcfs",
    cls: str = "FairqScheduler",
    **kw: Any,
) -> Any:
    set_options(policy, dual_phase={"end_think_token_id": END, **dual})
    params = {"num_blocks": 512, "max_num_batched_tokens": 512, "max_num_seqs": 64, **kw}
    return harness.build_scheduler(getattr(fsched, cls), block_size=BLOCK, **params)


class Driver:
    """Steps a scheduler; ``think_len[rid]``: output tokens before the
    end-of-think token (the request emits END as its ``think_len + 1``-th
    token, then plain tokens)."""

    def __init__(self, s: Any) -> None:
        self.s = s
        self.think_len: dict[str, int] = {}
        self.finished: dict[str, int] = {}
        self.max_tokens: dict[str, int] = {}
        #: per step: {rid: phase at schedule time} of the requests running
        #: before the step that vLLM scheduled, and those it skipped
        self.log: list[tuple[dict[str, str], dict[str, str]]] = []
        self.double: set[str] = set()  # emit END and the next token in one step

    def add(
        self,
        rid: str,
        think_len: int,
        max_tokens: int,
        tenant: str | None = None,
        prompt_len: int = 8,
    ) -> None:
        prompt = [100 + (hash(rid) + i) % 20000 for i in range(prompt_len)]
        self.s.add_request(
            harness.make_request(rid, prompt, max_tokens, block_size=BLOCK, tenant=tenant)
        )
        self.think_len[rid] = think_len
        self.max_tokens[rid] = max_tokens

    def tokens(self, rid: str) -> list[int]:
        r = self.s.requests[rid]
        if getattr(r, "is_prefill_chunk", False):
            return []
        n = r.num_output_tokens
        if n == self.think_len[rid]:
            if rid in self.double and n + 2 <= self.max_tokens[rid]:
                return [END, TOK]
            return [END]
        return [TOK]

    def step(self) -> Any:
        s = self.s
        dual = s.fairq_dualphase
        before = {r.request_id: dual.phase_of(r) for r in s.running}
        out = s.schedule()
        ran = {rid: p for rid, p in before.items() if rid in out.num_scheduled_tokens}
        skipped = {rid: p for rid, p in before.items() if rid not in out.num_scheduled_tokens}
        self.log.append((ran, skipped))
        req_ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[self.tokens(rid) for rid in req_ids],
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
        for o in s.update_from_output(out, mro).values():
            for ro in o.outputs:
                if ro.finish_reason is not None:
                    self.finished[ro.request_id] = self.finished.get(ro.request_id, 0) + 1
        return out

    def run(self, max_steps: int = 5000) -> None:
        for _ in range(max_steps):
            if not self.s.has_requests():
                return
            self.step()
        raise AssertionError("not done")


# -- configuration -------------------------------------------------------------


@pytest.mark.parametrize(
    ("dual", "needle"),
    [
        ({"think_batch_multiplier": 0.5}, "dual_phase.think_batch_multiplier"),
        ({"think_batch_multiplier": float("inf")}, "dual_phase.think_batch_multiplier"),
        ({"output_budget": 0}, "dual_phase.output_budget"),
        ({"output_budget": True}, "dual_phase.output_budget"),
        ({"min_think_reservation": -1}, "dual_phase.min_think_reservation"),
        ({"end_think_token_id": "x"}, "dual_phase.end_think_token_id"),
        ({"budget": 3}, "dual_phase.budget"),
    ],
)
def test_bad_options_refused_at_build_naming_the_field(
    dual_env: Any, dual: dict[str, Any], needle: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=needle.replace(".", r"\.")):
        build(dual, dual_env)


def test_end_of_think_must_be_known(dual_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRQ_VLLM_OPTIONS", json.dumps({"dual_phase": {}}))
    monkeypatch.setenv("FAIRQ_VLLM_POLICY", "fcfs")
    with pytest.raises(ValueError, match="end_think_token_id"):
        harness.build_scheduler(fsched.FairqScheduler, block_size=BLOCK)
    # a parser needs the tokenizer, which this engine does not load
    monkeypatch.setenv(
        "FAIRQ_VLLM_OPTIONS", json.dumps({"dual_phase": {"reasoning_parser": "deepseek_r1"}})
    )
    with pytest.raises(ValueError, match="tokenizer.*end_think_token_id"):
        harness.build_scheduler(fsched.FairqScheduler, block_size=BLOCK)
    monkeypatch.setenv(
        "FAIRQ_VLLM_OPTIONS", json.dumps({"dual_phase": {"reasoning_parser": "no-such"}})
    )
    with pytest.raises(ValueError, match="dual_phase.reasoning_parser"):
        harness.build_scheduler(fsched.FairqScheduler, block_size=BLOCK)


def test_priority_policy_refused(dual_env: Any) -> None:
    with pytest.raises(ValueError, match="fcfs scheduling policy"):
        build({}, dual_env, scheduling_policy="priority")


def test_end_id_from_vllms_reasoning_parser() -> None:
    """With a parser, the end id and the prompt rule are vLLM's parser's."""
    from vllm.reasoning import ReasoningParserManager

    from fairq.vllm.dualphase import _from_parser

    class Tok:
        def get_vocab(self) -> dict[str, int]:
            return {"<think>": 5, "</think>": 6, "a": 7}

    for name in ("deepseek_r1", "qwen3"):
        cls = ReasoningParserManager.get_reasoning_parser(name)
        end, ends, source = _from_parser(cls, Tok(), name)
        assert 6 in end and name in source
        assert ends([7, 5, 7, 6]) and not ends([7, 5, 7]) and not ends([6, 5, 7])


def test_dual_phase_under_every_policy(dual_env: Any) -> None:
    """dual_phase works under the queue policies and the fair ones."""
    for policy in ("fcfs", "wfq", "vtc", "dlpm"):
        s = build({"output_budget": 2}, dual_env, policy=policy)
        assert s.fairq_dualphase is not None and s.fairq_dualphase.output_budget == 2
        assert (s.fairq_dualphase.fair is not None) == (policy in ("vtc", "dlpm"))
    dual_env("fcfs")
    s = harness.build_scheduler(fsched.FairqScheduler, block_size=BLOCK)
    assert s.fairq_dualphase is None


# -- the rules on vLLM's scheduler -----------------------------------------------


@pytest.mark.parametrize("cls", ["FairqScheduler", "FairqAsyncScheduler"])
def test_output_keeps_per_step_service_under_think_flood(dual_env: Any, cls: str) -> None:
    """4 requests end thinking at once; 40 keep thinking. Every step, every
    running output-phase request is served, and think gets at most
    floor(output_budget * multiplier) of the running slots."""
    s = build(
        {"output_budget": 4, "think_batch_multiplier": 2.0, "min_think_reservation": 0},
        dual_env,
        cls=cls,
    )
    d = Driver(s)
    for i in range(4):
        d.add(f"out{i}", 0, 60)
    for i in range(40):
        d.add(f"think{i}", 1000, 40)
    d.run()
    assert all(d.finished[r] == 1 for r in d.max_tokens)
    saw_flood = 0
    for ran, skipped in d.log:
        assert not [r for r, p in skipped.items() if p == "output"]
        think_ran = [r for r, p in ran.items() if p == "think"]
        n_out = sum(p == "output" for p in {**ran, **skipped}.values())
        if n_out >= 4:
            assert len(think_ran) <= 8
            saw_flood += bool([r for r, p in skipped.items() if p == "think"])
    assert saw_flood > 10
    m = s.fairq_dualphase.queue.metrics()
    assert m["phase_transitions_total"] == 4
    assert s.fairq_dualphase.scheduled_tokens["output"] >= 4 * 59


def test_think_not_starved_beyond_the_reservation(dual_env: Any) -> None:
    """Output requests under their budget grow until they fill KV memory, so
    vLLM preempts (think first). With the guard (reservation 1) the reserved
    think slot is ahead of output (tokens and KV first): every step that
    starts with a think request running serves one, and think is served in
    far more steps than without the guard, where every think request is
    preempted as soon as memory runs out. (A think request preempted waits
    for re-admission under the waiting queue's policy: the guard covers the
    running requests, see docs/design/engines.md.)"""
    served_steps = {}
    for reservation in (0, 1):
        s = build(
            {"output_budget": 8, "min_think_reservation": reservation},
            dual_env,
            num_blocks=64,
            max_num_seqs=16,
            max_num_batched_tokens=64,
        )
        d = Driver(s)
        for i in range(4):
            d.add(f"out{i}", 0, 400)
        for i in range(3):
            d.add(f"think{i}", 1000, 300)
        starved_running = served = 0
        while s.has_requests():
            d.step()
            ran, skipped = d.log[-1]
            running_think = [r for r, p in {**ran, **skipped}.items() if p == "think"]
            think_ran = [r for r, p in ran.items() if p == "think"]
            served += bool(think_ran)
            if running_think and not think_ran:
                starved_running += 1
        assert all(d.finished[r] == 1 for r in d.max_tokens)
        dual = s.fairq_dualphase
        assert dual.preemptions["think"] > 0
        if reservation:
            assert starved_running == 0
            assert dual.reserved_ahead_total > 0
        served_steps[reservation] = served
    assert served_steps[1] > served_steps[0] + 50, served_steps  # 540 vs 440 steps


@pytest.mark.parametrize("cls", ["FairqScheduler", "FairqAsyncScheduler"])
def test_preemption_takes_think_first_and_loses_nothing(dual_env: Any, cls: str) -> None:
    """KV memory runs out: victims are think-phase requests while any is
    running; each request finishes exactly once with all its tokens, and a
    preempted request resumes in the phase it had."""
    s = build(
        {"output_budget": 4, "min_think_reservation": 0},
        dual_env,
        num_blocks=40,
        max_num_seqs=16,
        cls=cls,
    )
    d = Driver(s)
    for i in range(4):
        d.add(f"out{i}", 2, 120)
    for i in range(10):
        d.add(f"think{i}", 60, 100)
    dual = s.fairq_dualphase
    phase_at_preempt: dict[str, str] = {}
    checked = 0
    for _ in range(5000):
        if not s.has_requests():
            break
        before = {r.request_id: dual.phase_of(r) for r in s.running}
        out = d.step()
        now = {r.request_id for r in s.running}
        gone = [r for r in before if r not in now and r not in d.finished]
        if gone:
            thinking = [r for r, p in before.items() if p == "think"]
            for r in gone:
                if thinking:
                    assert before[r] == "think", (r, before)
                phase_at_preempt[r] = before[r]
        for r in now:
            if r in phase_at_preempt and r in out.scheduled_cached_reqs.req_ids:
                assert dual.queue.phase_of(r) == phase_at_preempt.pop(r) or (
                    d.s.requests[r].num_output_tokens > d.think_len[r]
                )
                checked += 1
    assert not s.has_requests()
    assert dual.preemptions["think"] > 0
    assert all(d.finished[r] == 1 for r in d.max_tokens), d.finished
    assert checked > 0


def test_phase_survives_preemption_and_resumption(dual_env: Any) -> None:
    """An output-phase request preempted (only output requests run, KV is
    short) comes back in output, at once; no second transition is counted."""
    s = build(
        {"output_budget": 8, "min_think_reservation": 0}, dual_env, num_blocks=24, max_num_seqs=8
    )
    d = Driver(s)
    for i in range(6):
        d.add(f"r{i}", 0, 100)
    dual = s.fairq_dualphase
    preempted = set()
    for _ in range(3000):
        if not s.has_requests():
            break
        before = {r.request_id for r in s.running}
        d.step()
        now = {r.request_id for r in s.running}
        preempted |= {r for r in before - now if r not in d.finished}
        for r in now & preempted:
            assert dual.queue.phase_of(r) == "output"
    assert preempted and dual.preemptions["output"] > 0
    assert dual.queue.metrics()["phase_transitions_total"] == 6
    assert all(d.finished[r] == 1 for r in d.max_tokens)


def test_a_reused_request_id_starts_afresh(dual_env: Any) -> None:
    """A finished output-phase request's id used again by a new request:
    the new one starts in think (its own prompt decides), not in output."""
    s = build({"output_budget": 4}, dual_env)
    d = Driver(s)
    d.add("x", 0, 5)
    d.run()
    assert d.finished == {"x": 1}
    d.add("x", 3, 8)
    d.step()
    assert s.fairq_dualphase.queue.phase_of("x") == "think"
    d.run()
    assert d.finished == {"x": 2}
    assert s.fairq_dualphase.queue.metrics()["phase_transitions_total"] == 2


@pytest.mark.parametrize("cls", ["FairqScheduler", "FairqAsyncScheduler"])
def test_transition_between_steps_end_and_next_token_in_one_step(dual_env: Any, cls: str) -> None:
    """A request that emits end-of-think (synchronous scheduler: with the
    next token in the same step, as a speculative step would) is output from
    the next schedule() on, at the front of the output slots; never in the
    middle of a step. (The async scheduler's placeholders count one token
    per step without drafts, so there it emits end-of-think alone.)"""
    s = build(
        {"output_budget": 1, "think_batch_multiplier": 1.0, "min_think_reservation": 0},
        dual_env,
        cls=cls,
    )
    d = Driver(s)
    d.add("a", 3, 30)
    d.add("b", 0, 30)
    if cls == "FairqScheduler":
        d.double.add("a")
    dual = s.fairq_dualphase
    seen_a_output = False
    for _ in range(200):
        if not s.has_requests():
            break
        r = s.requests.get("a")
        ended = r is not None and END in list(r.output_token_ids)
        if r is not None and r.request_id in dual.queue:
            assert dual.queue.phase_of("a") == ("output" if ended else "think")
        d.step()
        ran, _ = d.log[-1]
        if ran.get("a") == "output" and not seen_a_output:
            seen_a_output = True
            # output budget 1: "a" (front of output) took it, "b" waited
            assert "b" not in ran
    assert seen_a_output
    assert dual.queue.metrics()["phase_transitions_total"] == 2
    assert d.finished == {"a": 1, "b": 1}


def test_fair_within_a_phase(dual_env: Any) -> None:
    """VTC inside each phase: a greedy tenant with long reasoning and many
    requests cannot take a well-behaved tenant's output slots."""
    results = {}
    for policy in ("fcfs", "vtc", "dlpm"):
        s = build({"output_budget": 2, "min_think_reservation": 0}, dual_env, policy=policy)
        d = Driver(s)
        for i in range(8):  # greedy: long thinking, arrives first
            d.add(f"g{i}", 40 if i >= 4 else 0, 80, tenant="greedy")
        for _ in range(3):
            d.step()
        for i in range(4):
            d.add(f"p{i}", 0, 40, tenant="polite")
        d.run()
        assert all(d.finished[r] == 1 for r in d.max_tokens)
        # output slots per tenant while both had output requests running
        got = {"greedy": 0, "polite": 0}
        for ran, skipped in d.log:
            both = {**ran, **skipped}
            outs = {r[0] for r, p in both.items() if p == "output"}
            if outs == {"g", "p"}:
                for r, p in ran.items():
                    if p == "output":
                        got["greedy" if r[0] == "g" else "polite"] += 1
        results[policy] = got
    share = {p: g["polite"] / (g["polite"] + g["greedy"]) for p, g in results.items()}
    # fcfs: round robin over the output requests, greedy has most of them;
    # vtc: the polite tenant (less service) gets at least half the slots
    assert share["vtc"] >= 0.5 > share["fcfs"] + 0.1, (share, results)
    assert share["dlpm"] >= 0.5, (share, results)


@pytest.mark.parametrize("policy", ["vtc", "dlpm"])
def test_fair_order_within_a_phase_keeps_the_stated_rule(dual_env: Any, policy: str) -> None:
    """The design's rule (docs/design/engines.md), checked every step on the output phase: a tenant
    f that got n_f slots while tenant g left a request without one had
    service_f / w_f + (n_f - 1) * c_f <= service_g / w_g + n_g * c_g
    (c = w_out / w, one output token's charge), with weights."""
    dual_env(
        policy,
        tenant_weights={"a": 2},
        dual_phase={"end_think_token_id": END, "output_budget": 3, "min_think_reservation": 0},
    )
    s = harness.build_scheduler(
        fsched.FairqScheduler, block_size=BLOCK, num_blocks=1024, max_num_seqs=64
    )
    d = Driver(s)
    for t, n in (("a", 6), ("b", 6), ("c", 3)):
        for i in range(n):
            d.add(f"{t}{i}", 0, 30 + 7 * i, tenant=t)
    w = {"a": 2.0, "b": 1.0, "c": 1.0}
    checked = 0
    while s.has_requests():
        key = {t: s.fairq.service(t) / w[t] for t in w}
        d.step()
        ran, skipped = d.log[-1]
        n = {t: sum(1 for r, p in ran.items() if p == "output" and r[0] == t) for t in w}
        left = {r[0] for r, p in skipped.items() if p == "output"}
        for f in w:
            for g in left:
                if n[f] and f != g:
                    c_f, c_g = 2.0 / w[f], 2.0 / w[g]
                    assert key[f] + (n[f] - 1) * c_f <= key[g] + n[g] * c_g + 1e-9
                    checked += 1
    assert checked > 50
    assert all(d.finished[r] == 1 for r in d.max_tokens)


def test_metrics_on_the_schedulers_path(dual_env: Any) -> None:
    from fairq.metrics import FairqCollector

    s = build({"output_budget": 2}, dual_env, policy="vtc")
    d = Driver(s)
    d.add("a", 2, 10)
    d.add("b", 0, 10)
    d.run()
    objs = dict(s._fairq_objects())
    assert "vllm-dualphase" in objs
    names = {f.name for f in FairqCollector(objs["vllm-dualphase"], "x").collect()}
    assert {"fairq_dualphase_queue_depth", "fairq_dualphase_phase_transitions"} <= names
    fams = {f.name: f for f in s._fairq_families()}
    tok = fams["fairq_vllm_dualphase_scheduled_tokens"]
    by = {smp.labels["phase"]: smp.value for smp in tok.samples}
    assert by["output"] > 0 and by["think"] > 0
    assert "fairq_vllm_dualphase_preemptions" in fams
    assert "fairq_vllm_dualphase_waiting" in fams
    # the path to the server's /metrics: vLLM's SchedulerStats from make_stats()
    from fairq.vllm.stats import decode_families, take_payload

    s._fairq_packer.interval_s = 0.0  # (it ships at most once a second)
    stats = s.make_stats()
    payload = take_payload(stats)
    assert payload is not None
    shipped = {f.name: f for f in decode_families(payload, {"engine": "0"})}
    depth = shipped["fairq_dualphase_queue_depth"]
    assert {smp.labels["name"] for smp in depth.samples} == {"vllm-dualphase"}
    assert "fairq_vllm_dualphase_scheduled_tokens" in shipped
