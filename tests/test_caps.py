"""Admission control (fairq.ledger.caps): the limits' validation, the
decision against an obviously correct model (tests/reference/caps.py), the
bounds, the token bucket and the Retry-After estimate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairq.ledger.caps import AdmissionControl, Limits

from reference.caps import RefCaps


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    "raw, field",
    [
        ({"max_requests": 0}, "limits.max_requests"),
        ({"max_tokens": 1.5}, "limits.max_tokens"),
        ({"tenant_max_requests": True}, "limits.tenant_max_requests"),
        ({"tenant_token_rate": -1}, "limits.tenant_token_rate"),
        ({"tenant_token_rate": float("inf")}, "limits.tenant_token_rate"),
        ({"tenant_token_burst": 10**400, "tenant_token_rate": 1}, "limits.tenant_token_burst"),
        ({"tenant_token_burst": 5}, "limits.tenant_token_burst"),
        ({"max_request": 5}, "limits.max_request"),
        ([1], "limits"),
    ],
)
def test_bad_limits_name_their_field(raw: object, field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field.replace(".", r"\.")):
        Limits.from_mapping(raw)


def test_limits_built_directly_are_checked_as_from_a_mapping() -> None:
    with pytest.raises(ValueError, match=r"limits\.max_requests must be an integer >= 1"):
        Limits(max_requests=0)
    with pytest.raises(ValueError, match=r"limits\.tenant_token_rate"):
        Limits(tenant_token_rate=-1.0)
    with pytest.raises(ValueError, match=r"limits\.tenant_token_burst needs"):
        Limits(tenant_token_burst=5.0)
    assert Limits(tenant_token_rate=2).tenant_token_rate == 2.0
    assert isinstance(Limits(tenant_token_rate=2).tenant_token_rate, float)


def test_engine_options_validate_limits_once_with_the_same_text() -> None:
    from fairq.sglang.tenants import FairOptions as SGLangOptions
    from fairq.vllm.tenants import FairOptions as VLLMOptions

    texts = []
    for cls, policy in ((VLLMOptions, "vtc"), (SGLangOptions, "vtc")):
        with pytest.raises(ValueError) as e:
            cls.from_mapping(policy, {"limits": {"tenant_max_tokens": 0}})
        texts.append(str(e.value))
    assert texts[0] == texts[1] == "limits.tenant_max_tokens must be an integer >= 1, got 0"
    ok = VLLMOptions.from_mapping("vtc", {"limits": {"max_requests": 3}})
    assert ok.limits == Limits(max_requests=3)


def test_flood_is_refused_and_light_tenants_admitted_up_to_their_share() -> None:
    ac = AdmissionControl(Limits(max_requests=8))
    for _ in range(8):
        assert ac.offer("flood", 10) is None
    r = ac.offer("flood", 10)
    assert r is not None and r.reason == "global" and r.status == 429
    # a light tenant arriving at the full server is under its share (8 / 2)
    for _ in range(4):
        assert ac.offer("light", 10) is None
    r = ac.offer("light", 10)
    assert r is not None and r.reason == "global"
    assert ac.requests == 12 <= 2 * 8
    # nothing accepted is dropped: every release is exact
    for _ in range(8):
        ac.release("flood", 10)
    for _ in range(4):
        ac.release("light", 10)
    assert (ac.requests, ac.tokens) == (0, 0)


def test_the_policy_account_picks_the_tenant_refused() -> None:
    ac = AdmissionControl(Limits(max_tokens=100))
    for t, n in (("a", 10), ("b", 10), ("c", 80)):
        assert ac.offer(t, n) is None
    # the server is full; a and b hold less than their share (33 tokens)
    ac.set_accounts({"a": 100.0, "b": 0.0, "c": 0.0})
    r = ac.offer("a", 5)  # the policy says a is furthest over: refused
    assert r is not None and r.reason == "global"
    assert ac.offer("b", 5) is None  # b is neither: admitted past the soft cap
    ac.set_accounts({})
    assert ac.offer("a", 5) is None  # now c (80 held) is the heaviest
    assert ac.offer("c", 5) is not None


def test_weights_scale_shares_and_caps() -> None:
    ac = AdmissionControl(Limits(max_requests=6, tenant_max_requests=2), {"gold": 2.0})
    assert [ac.offer("gold", 1) for _ in range(5)][:4] == [None] * 4
    assert ac.held("gold") == (4, 4)
    assert ac.offer("free", 1) is None
    assert ac.offer("free", 1) is None
    r = ac.offer("free", 1)
    assert r is not None and r.reason == "tenant_requests"


def test_too_large_is_413_without_retry_after() -> None:
    ac = AdmissionControl(Limits(max_tokens=100))
    r = ac.offer("a", 101)
    assert r is not None and r.reason == "too_large" and r.status == 413
    assert r.retry_after_header() is None
    assert "limits.max_tokens" in r.message


def test_token_bucket_refills_and_charges_only_accepted_requests() -> None:
    clock = Clock()
    ac = AdmissionControl(Limits(tenant_token_rate=10.0, tenant_token_burst=50.0), clock=clock)
    assert ac.offer("a", 40) is None
    r = ac.offer("a", 20)
    assert r is not None and r.reason == "tenant_rate"
    assert r.retry_after_s == pytest.approx(1.0)  # 10 missing at 10/s
    clock.t = 1.0
    assert ac.offer("a", 20) is None
    assert ac.offer("b", 50) is None  # its own bucket


def test_retry_after_follows_the_tenant_completion_rate() -> None:
    clock = Clock()
    ac = AdmissionControl(Limits(tenant_max_requests=2), clock=clock)
    for _i in range(40):
        assert ac.offer("a", 1) is None
        clock.t += 0.1
        ac.release("a", 1)  # about 10 completions / s
    ac.offer("a", 1)
    ac.offer("a", 1)
    r = ac.offer("a", 1)
    assert r is not None and r.retry_after_s is not None
    assert 1.0 <= r.retry_after_s <= 2.0
    assert r.retry_after_header() in ("1", "2")


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.sampled_from("abcd"), st.integers(0, 40)),
        st.tuples(st.just("release"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("accounts"), st.integers(0, 1000), st.integers(0, 200)),
    ),
    max_size=120,
)
LIMITS = st.fixed_dictionaries(
    {
        "max_requests": st.one_of(st.none(), st.integers(1, 12)),
        "max_tokens": st.one_of(st.none(), st.integers(1, 200)),
        "tenant_max_requests": st.one_of(st.none(), st.integers(1, 8)),
        "tenant_max_tokens": st.one_of(st.none(), st.integers(1, 150)),
    }
)


@settings(max_examples=300, deadline=None)
@given(LIMITS, st.sampled_from([{}, {"a": 2.0}, {"b": 0.5, "c": 3.0}]), OPS)
def test_decisions_match_the_reference_and_bounds_hold(
    limits: dict, weights: dict, ops: list
) -> None:
    ac = AdmissionControl(Limits(**limits), weights)
    ref = RefCaps(**limits, weights=dict(weights))
    held: list[tuple[str, int]] = []
    for op, x, y in ops:
        if op == "offer":
            r = ac.offer(x, y)
            want = ref.decide(x, y)
            assert (r.reason if r else None) == want
            if r is None:
                held.append((x, y))
            elif r.reason == "global":
                # refused at the soft cap: only the heaviest or an over-share tenant
                assert r.retry_after_s is not None and r.retry_after_s >= 1
        elif op == "release" and held:
            t, n = held.pop(x % len(held))
            ac.release(t, n)
            ref.release(t, n)
        elif op == "accounts":
            acc = {t: float((x * (i + 1)) % (y + 1)) for i, t in enumerate("abcd")}
            ac.set_accounts(acc)
            ref.accounts = acc
        # nothing accepted is lost; the hard bounds hold
        assert ac.requests == len(held) and ac.tokens == sum(n for _, n in held)
        if limits["max_requests"] is not None:
            assert ac.requests <= 2 * limits["max_requests"]
        if limits["max_tokens"] is not None:
            assert ac.tokens <= 2 * limits["max_tokens"]
        for t in "abcd":
            r_t, k_t = ac.held(t)
            w = weights.get(t, 1.0)
            if limits["tenant_max_requests"] is not None:
                assert r_t <= max(1, int(limits["tenant_max_requests"] * w))
            if limits["tenant_max_tokens"] is not None:
                assert k_t <= max(1, int(limits["tenant_max_tokens"] * w))


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "vtc", "dlpm", "las"])
def test_ledger_share_leads_rank_the_tenant_served_more(policy: str) -> None:
    from fairq.engineopts import POLICIES
    from fairq.ledger import Ledger
    from fairq.vllm.tenants import FairOptions

    opts = FairOptions.from_mapping(policy, {}, policies=tuple(POLICIES))
    led = Ledger(opts, on_new_scheduler=lambda s, n: None)
    led.add("h", object(), list(range(100)), tenant="heavy")
    led.add("l", object(), [7] * 5, tenant="light")
    while led.waiting:
        led.admit(8)
    for rid, n in (("h", 100), ("l", 5)):
        led.take(rid)
        led.charge_prompt(rid, 0, n, n)
    led.settle()
    led.charge_output("h", 30)
    leads = led.share_leads()
    assert leads["heavy"] > leads["light"]
    ac = AdmissionControl(Limits(max_requests=1))
    ac.offer("heavy", 1)
    ac.set_accounts(leads)
    assert ac.offer("light", 1) is None


def test_wfq_share_lead_is_the_flow_finish_tag_past_virtual_time() -> None:
    from fairq import WFQQueue

    q = WFQQueue()
    q.add("x", tokens=100, flow="heavy")
    q.add("y", tokens=10, flow="light")
    assert q.share_lead("heavy") == pytest.approx(100.0)
    assert q.share_lead("light") == pytest.approx(10.0)
    assert q.share_lead("nobody") == 0.0


def test_idle_tenants_are_forgotten_so_state_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import fairq.ledger.caps as caps

    monkeypatch.setattr(caps, "MAX_IDLE_TENANTS", 50)
    clock = Clock()
    ac = AdmissionControl(Limits(tenant_token_rate=1.0, tenant_token_burst=10.0), clock=clock)
    assert ac.offer("holder", 1) is None
    for i in range(1000):
        assert ac.offer(f"t{i}", 5) is None
        ac.release(f"t{i}", 5)
        clock.t += 0.1  # a bucket refills in 5 s: about 50 tenants refilling at once
    assert len(ac.stats()) <= 2 * 52
    assert ac.held("holder") == (1, 1)  # a tenant holding something is kept
    # a tenant whose bucket is still refilling is kept (forgetting it would refill it)
    assert ac.offer("t999", 6) is not None


def test_bad_offer_and_release_change_nothing() -> None:
    ac = AdmissionControl(Limits(max_requests=4))
    assert ac.offer("a", 10) is None
    before = (ac.stats(), ac.requests, ac.tokens, ac.held("a"))
    for bad in (1.5, "7", None, True):
        with pytest.raises(TypeError, match="tokens must be an int"):
            ac.offer("new", bad)
    with pytest.raises(ValueError, match="holds 10 tokens"):
        ac.release("a", 11)  # more than it holds: counts would go below 0
    with pytest.raises(ValueError, match="holds 10 tokens"):
        ac.release("a", 3)  # its one request was offered with 10
    with pytest.raises(KeyError, match="'nobody' holds no request"):
        ac.release("nobody", 1)
    assert (ac.stats(), ac.requests, ac.tokens, ac.held("a")) == before
    ac.release("a", 10)
    assert (ac.requests, ac.tokens) == (0, 0)


@pytest.mark.parametrize(
    "weights, match",
    [
        ({"a": 0.0}, r"tenant_weights\['a'\] must be finite and > 0"),
        ({"a": float("nan")}, r"tenant_weights\['a'\]"),
        ({"": 1.0}, "tenant names must be non-empty"),
        ([("a", 1.0)], "tenant_weights must be a mapping"),
    ],
)
def test_bad_weights_name_the_field_as_the_engine_options_do(weights: object, match: str) -> None:
    # a weight of 0 divided a lead by zero at the first offer
    with pytest.raises((ValueError, TypeError), match=match):
        AdmissionControl(Limits(max_requests=1), weights)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be a Limits"):
        AdmissionControl({"max_requests": 1})  # type: ignore[arg-type]
