"""Tenant resolution and fair-policy options for vLLM (no vLLM needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS
from typing import Any

import pytest

from fairq.vllm.tenants import FairOptions, TenantResolver, load_options


def req(
    rid: str = "r1", extra: Any = None, lora: str | None = None, salt: str | None = None
) -> Any:
    return NS(
        request_id=rid,
        sampling_params=NS(extra_args=extra),
        lora_request=NS(lora_name=lora) if lora else None,
        cache_salt=salt,
    )


def test_default_order_and_fallthrough() -> None:
    r = TenantResolver()
    assert r(req(extra={"tenant": "alice"}, lora="ad", salt="s")) == "alice"
    assert r(req(extra={"tenant": ""}, lora="ad")) == "ad"  # empty falls through
    assert r(req(extra={"tenant": 7}, lora=None, rid="bob:1")) == "bob"  # not a str
    assert r(req(rid="cmpl-carol:9")) == "carol"  # vLLM's OpenAI id prefix dropped
    assert r(req(rid="chatcmpl-dan:x")) == "dan"
    assert r(req(rid="nosep", salt="salty")) == "salty"
    assert r(req(rid="nosep")) == "default"
    assert r(NS()) == "default"  # nothing at all: never raises


def test_custom_order_key_separator_default() -> None:
    r = TenantResolver(
        ["request_id", "extra_args"],
        extra_args_key="org",
        separator="/",
        default="anon",
        strip_prefixes=[],
    )
    assert r(req(rid="acme/5", extra={"org": "x"})) == "acme"
    assert r(req(rid="cmpl-acme/5")) == "cmpl-acme"
    assert r(req(rid="plain", extra={"org": "x"})) == "x"
    assert r(req(rid="plain")) == "anon"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"tenant": {"order": ["bogus"]}}, r"tenant.order\[0\]"),
        ({"tenant": {"order": ["header"]}}, "'header' needs 'extra_args' after it"),
        ({"tenant": {"headers": [""]}}, r"tenant.headers\[0\]"),
        ({"tenant": {"order": ["lora", "lora"]}}, "duplicate"),
        ({"tenant": {"separator": ""}}, "tenant.separator"),
        ({"tenant": {"colour": 1}}, "tenant.colour"),
        ({"tenant": {"strip_prefixes": [""]}}, r"tenant.strip_prefixes\[0\]"),
        ({"tenant_weights": {"a": -1}}, r"tenant_weights\['a'\]"),
        ({"tenant_weights": {"a": float("nan")}}, r"tenant_weights\['a'\]"),
        ({"quantum": 0}, "quantum"),
        ({"quant": 1}, "quant"),
    ],
)
def test_bad_options_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        FairOptions.from_mapping("dlpm", raw)


def test_options_types_and_defaults() -> None:
    o = FairOptions.from_mapping("dlpm", {"quantum": 64, "tenant_weights": {"g": 2}})
    assert o.policy_options["quantum"] == 64.0 and o.policy_options["w_q"] == 2.0
    assert o.tenant_weights == {"g": 2.0}
    with pytest.raises(TypeError, match="tenant_weights"):
        FairOptions.from_mapping("vtc", {"tenant_weights": [1]})
    with pytest.raises(ValueError, match="policy"):
        FairOptions.from_mapping("wfq", {})


def test_load_options_file_then_json(tmp_path: Any) -> None:
    f = tmp_path / "o.json"
    f.write_text(json.dumps({"quantum": 8, "tenant_weights": {"a": 3}}))
    env = {"FAIRQ_VLLM_CONFIG": str(f), "FAIRQ_VLLM_OPTIONS": '{"quantum": 16}'}
    assert load_options(env) == {"quantum": 16, "tenant_weights": {"a": 3}}
    bad = tmp_path / "bad.yaml"
    bad.write_text("[1, 2")
    with pytest.raises(ValueError, match="FAIRQ_VLLM_CONFIG"):
        load_options({"FAIRQ_VLLM_CONFIG": str(bad)})
    with pytest.raises(ValueError, match="cannot be read"):
        load_options({"FAIRQ_VLLM_CONFIG": str(tmp_path / "missing.json")})


def test_a_resolver_built_with_one_header_string_is_refused_not_split_into_letters() -> None:
    from fairq.sglang.tenants import TenantResolver as SGLangResolver

    for cls in (TenantResolver, SGLangResolver):
        with pytest.raises(TypeError, match="tenant.headers must be a list"):
            cls(headers="x-team")  # was: headers 'x', '-', 't', ... one letter each
