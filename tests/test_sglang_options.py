"""fairq.sglang's options and tenants (pure Python: no SGLang needed)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from fairq.sglang.tenants import (
    CONFIG_ENV_VAR,
    OPTIONS_ENV_VAR,
    TenantResolver,
    load_options,
    make_options,
    policy_key,
)


def req(**kw: Any) -> Any:
    base = {
        "rid": "r1",
        "custom_labels": None,
        "routing_key": None,
        "extra_key": None,
        "lora_id": None,
    }
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize(
    ("name", "key"),
    [("fairq-dlpm", "dlpm"), (" FAIRQ-VTC ", "vtc"), ("lpm", "lpm"), ("fairq-fcfs", "fcfs")],
)
def test_policy_names(name: str, key: str) -> None:
    assert policy_key(name) == key


@pytest.mark.parametrize("bad", ["fairq-wfq", "dfs-weight", "", None, 3])
def test_unknown_policy_names_the_choices(bad: Any) -> None:
    with pytest.raises(ValueError, match="fairq-fcfs, fairq-lpm, fairq-vtc, fairq-dlpm"):
        policy_key(bad)


def test_tenant_sources_in_order_with_fallthrough() -> None:
    r = TenantResolver()
    assert r(req(custom_labels={"tenant": "lab"}, routing_key="rk", rid="x:1")) == "lab"
    assert r(req(custom_labels={"other": "lab"}, routing_key="rk")) == "rk"
    assert r(req(routing_key="", extra_key="ek", lora_id="lo")) == "ek"
    assert r(req(lora_id="lo", rid="alice:7")) == "lo"
    assert r(req(rid="alice:7")) == "alice"
    assert r(req(rid="no-separator")) == "default"
    assert r(SimpleNamespace()) == "default"  # nothing there: never raises
    custom = TenantResolver(order=["rid", "routing_key"], separator="/", default="anon")
    assert custom(req(rid="bob/1", routing_key="rk")) == "bob"
    assert custom(req(rid="bob:1", routing_key="rk")) == "rk"
    assert custom(req(rid="x", extra_key="ek")) == "anon"


def test_options_from_one_mapping() -> None:
    o = make_options(
        "fairq-dlpm",
        {"quantum": 256, "w_q": 3, "tenant_weights": {"gold": 2}, "tenant": {"order": ["rid"]}},
    )
    assert o.policy == "dlpm"
    # a number for quantum is a fixed quantum (quantum_scale 0)
    assert o.policy_options == {
        "quantum": 256.0,
        "w_e": 1.0,
        "w_q": 3.0,
        "quantum_scale": 0.0,
        "strict_credit": 0.0,
    }
    assert o.tenant_weights == {"gold": 2.0}
    assert o.tenant(req(rid="gold:1")) == "gold"
    assert make_options("vtc").policy_options == {"w_in": 1.0, "w_out": 2.0}


@pytest.mark.parametrize(
    ("policy", "raw", "field"),
    [
        ("dlpm", {"quantm": 1}, "'quantm'"),
        ("dlpm", {"quantum": 0}, "'quantum'"),
        ("vtc", {"quantum": 5}, "'quantum'"),
        # SGLang keeps the saved state too (issue 30): its options are checked
        ("fcfs", {"state_file": ""}, "state_file"),
        ("vtc", {"state_interval_s": 0}, "state_interval_s"),
        ("lpm", {"tenant_weights": {"a": -1}}, r"tenant_weights\['a'\]"),
        ("lpm", {"tenant_weights": [1]}, "tenant_weights"),
        ("lpm", {"tenant": {"order": ["request_id"]}}, r"tenant.order\[0\]"),
        ("lpm", {"tenant": {"order": "rid"}}, "tenant.order"),
        ("lpm", {"tenant": {"extra_args_key": "t"}}, "tenant.extra_args_key"),
        ("lpm", {"tenant": {"default": ""}}, "tenant.default"),
    ],
)
def test_bad_options_name_the_field(policy: str, raw: dict[str, Any], field: str) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        make_options(policy, raw)


def test_options_from_environment(tmp_path: Any) -> None:
    path = tmp_path / "fair.yaml"
    path.write_text("quantum: 128\ntenant:\n  order: [routing_key]\n")
    env = {CONFIG_ENV_VAR: str(path), OPTIONS_ENV_VAR: json.dumps({"w_e": 2})}
    raw = load_options(env)
    assert raw == {"quantum": 128, "tenant": {"order": ["routing_key"]}, "w_e": 2}
    assert make_options("dlpm", raw).policy_options["quantum"] == 128.0
    with pytest.raises(ValueError, match=OPTIONS_ENV_VAR):
        load_options({OPTIONS_ENV_VAR: "[1]"})
    with pytest.raises(ValueError, match=CONFIG_ENV_VAR):
        load_options({CONFIG_ENV_VAR: str(tmp_path / "missing.json")})
