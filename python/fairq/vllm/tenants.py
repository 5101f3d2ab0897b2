"""Which tenant a vLLM request belongs to, and the fair policies' options.

Pure Python (no vLLM import): the scheduler integration
(:mod:`fairq.vllm.fair`) reads requests through duck typing, and the options
are validated when the scheduler is built, each error naming its field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fairq.tenancy import SourceOrder

__all__ = [
    "VLLM_ID_PREFIXES",
    "CONFIG_ENV_VAR",
    "FAIR_POLICIES",
    "SOURCES",
    "FairOptions",
    "TenantResolver",
    "load_options",
    "STATE_KEYS",
    "state_options",
]

#: Environment variable naming a YAML or JSON file of fair-policy options
#: (``FAIRQ_VLLM_OPTIONS``, a JSON object, overrides its keys).
CONFIG_ENV_VAR = "FAIRQ_VLLM_CONFIG"

#: The fair policies that run inside vLLM's scheduler (not standalone queues).
FAIR_POLICIES = ("vtc", "lpm", "dlpm")

#: Where a tenant can come from, in the default resolution order.
SOURCES = ("extra_args", "lora", "request_id", "cache_salt")

#: Prefixes vLLM's OpenAI server puts before a client's ``X-Request-Id``.
VLLM_ID_PREFIXES = ("chatcmpl-", "cmpl-", "embd-", "score-", "rerank-", "classify-", "pool-")


class TenantResolver(SourceOrder):
    """Maps a vLLM request to a tenant name, trying ``order`` in turn.

    * ``"extra_args"``: ``request.sampling_params.extra_args[extra_args_key]``
      (what the OpenAI server's ``vllm_xargs`` sets: ``{"vllm_xargs":
      {"tenant": "alice"}}`` in the request body);
    * ``"lora"``: the LoRA adapter's name;
    * ``"request_id"``: the text before the first ``separator`` in the
      request id (``"alice:0f3c"`` -> ``"alice"``), after dropping one of
      ``strip_prefixes``: vLLM's OpenAI server builds the engine's id from
      a client's ``X-Request-Id`` header as ``"cmpl-<header>"`` (chat:
      ``"chatcmpl-"``), so ``X-Request-Id: alice:42`` gives ``"alice"``;
    * ``"cache_salt"``: the request's ``cache_salt``.

    A source that yields nothing (absent, empty, not a string) falls through
    to the next; none: ``default``. Never raises for a request.
    """

    SOURCES = SOURCES
    extra_args_key: str
    #: the keys of the options' ``tenant`` mapping (constructor keywords)
    OPTIONS = ("order", "extra_args_key", "separator", "default", "strip_prefixes")
    #: those of them that are lists
    LIST_OPTIONS = ("order", "strip_prefixes")

    def __init__(
        self,
        order: tuple[str, ...] | list[str] = SOURCES,
        extra_args_key: str = "tenant",
        separator: str = ":",
        default: str = "default",
        strip_prefixes: tuple[str, ...] | list[str] = VLLM_ID_PREFIXES,
    ) -> None:
        strip = tuple(strip_prefixes)
        for i, p in enumerate(strip):
            if not isinstance(p, str) or not p:
                raise ValueError(
                    f"tenant.strip_prefixes[{i}] must be a non-empty string, got {p!r}"
                )
        self._set_order(order, separator, default, extra_args_key=extra_args_key)
        self.strip_prefixes = strip

    def _from(self, src: str, request: Any) -> Any:
        if src == "extra_args":
            extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
            return extra.get(self.extra_args_key) if isinstance(extra, Mapping) else None
        if src == "lora":
            return getattr(getattr(request, "lora_request", None), "lora_name", None)
        if src == "request_id":
            rid = getattr(request, "request_id", None)
            if isinstance(rid, str):
                for p in self.strip_prefixes:
                    if rid.startswith(p):
                        rid = rid[len(p) :]
                        break
                head, sep, _ = rid.partition(self.separator)
                return head if sep else None
            return None
        return getattr(request, "cache_salt", None)

    def __repr__(self) -> str:
        return (
            f"TenantResolver(order={list(self.order)}, extra_args_key={self.extra_args_key!r}, "
            f"separator={self.separator!r}, default={self.default!r})"
        )


#: The options of the saved fairness state (:mod:`fairq.vllm.persist`), taken
#: by every policy of fairq's scheduler classes.
STATE_KEYS = ("state_file", "state_interval_s")


def state_options(raw: Mapping[str, Any]) -> tuple[str | None, float]:
    """``(state_file, state_interval_s)`` from ``raw`` (``None`` and the
    default interval when absent), each error naming its field."""
    from fairq.vllm.persist import DEFAULT_INTERVAL_S

    path = raw.get("state_file")
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise ValueError(f"state_file must be a non-empty path string, got {path!r}")
    interval = raw.get("state_interval_s", DEFAULT_INTERVAL_S)
    return path, _number("state_interval_s", interval, positive=True)


def _number(name: str, v: Any, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number, got {v!r}")
    x = float(v)
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        kind = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {kind}, got {v!r}")
    return x


@dataclass(frozen=True)
class FairOptions:
    """Validated options of a fair policy inside vLLM.

    ``policy_options``: the local scheduler's own (VTC ``w_in``/``w_out``,
    DLPM ``quantum``/``w_e``/``w_q``; defaults as the transformers
    integration's). ``tenant_weights``: ``{tenant: weight > 0}`` (a weight
    divides the tenant's charges: weight 2 gets twice the service).
    ``tenant``: the :class:`TenantResolver`.
    """

    policy: str
    policy_options: dict[str, float] = field(default_factory=dict)
    tenant_weights: dict[str, float] = field(default_factory=dict)
    tenant: Callable[[Any], str] = field(default_factory=TenantResolver)
    #: the saved fairness state's file (:mod:`fairq.vllm.persist`), or None
    state_file: str | None = None
    #: seconds between saves of the state
    state_interval_s: float = 10.0

    @classmethod
    def from_mapping(
        cls,
        policy: str,
        raw: Mapping[str, Any],
        *,
        policies: tuple[str, ...] = FAIR_POLICIES,
        resolver: Any = None,
        engine_keys: tuple[str, ...] = ("dual_phase", *STATE_KEYS),
    ) -> FairOptions:
        """Build from plain data (the parsed file / JSON), naming any bad field.

        The engine integrations share this one validator: ``policies`` are the
        policy names the engine accepts, ``resolver`` the tenant resolver
        class (default :class:`TenantResolver`, vLLM's; it lists the keys of
        ``tenant`` it takes in ``OPTIONS``), ``engine_keys`` the further keys
        the engine reads itself (vLLM: ``dual_phase`` and the saved state's).
        """
        from fairq.integrations.transformers.policies import POLICIES, policy_options

        resolver_cls = TenantResolver if resolver is None else resolver
        if policy not in policies:
            raise ValueError(f"policy must be one of {', '.join(policies)} here, got {policy!r}")
        known = set(POLICIES[policy][1]) | {"tenant_weights", "tenant", "policy", *engine_keys}
        for key in raw:
            if key not in known:
                raise ValueError(
                    f"unknown option {key!r} for policy {policy!r} "
                    f"(options: {', '.join(sorted(known - {'policy'}))})"
                )
        opts = policy_options(policy, {k: v for k, v in raw.items() if k in POLICIES[policy][1]})
        weights_raw = raw.get("tenant_weights") or {}
        if not isinstance(weights_raw, Mapping):
            raise TypeError(
                f"tenant_weights must be a mapping of tenant -> weight, got {weights_raw!r}"
            )
        weights: dict[str, float] = {}
        for t, w in weights_raw.items():
            if not isinstance(t, str) or not t:
                raise ValueError(
                    f"tenant_weights: tenant names must be non-empty strings, got {t!r}"
                )
            weights[t] = _number(f"tenant_weights[{t!r}]", w, positive=True)
        tenant_raw = raw.get("tenant") or {}
        if not isinstance(tenant_raw, Mapping):
            raise TypeError(f"tenant must be a mapping of resolver options, got {tenant_raw!r}")
        allowed = resolver_cls.OPTIONS
        for k in tenant_raw:
            if k not in allowed:
                raise ValueError(f"unknown option tenant.{k} (options: {', '.join(allowed)})")
        for key in resolver_cls.LIST_OPTIONS:
            if key in tenant_raw and not isinstance(tenant_raw[key], (list, tuple)):
                raise TypeError(f"tenant.{key} must be a list, got {tenant_raw[key]!r}")
        tenant = resolver_cls(**dict(tenant_raw))
        state_file, interval = state_options(raw) if "state_file" in engine_keys else (None, 10.0)
        return cls(policy, opts, weights, tenant, state_file, interval)


def _read_file(path: str, var: str = CONFIG_ENV_VAR) -> dict[str, Any]:
    """The mapping in the YAML or JSON file ``path`` (named by ``$var``)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"{var}={path!r} cannot be read: {e}") from None
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"{var}={path!r} is not valid YAML: {e}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{var}={path!r} is not valid JSON: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{var}={path!r} must hold a mapping of options, got {data!r}")
    return data


def load_options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The raw options: the file named by ``$FAIRQ_VLLM_CONFIG`` (YAML or
    JSON), then ``$FAIRQ_VLLM_OPTIONS`` (a JSON object) over it."""
    from fairq.vllm.scheduler import OPTIONS_ENV_VAR, resolve_options

    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    path = env.get(CONFIG_ENV_VAR, "").strip()
    if path:
        out.update(_read_file(path))
    if env is os.environ:
        out.update(resolve_options())
    elif env.get(OPTIONS_ENV_VAR, "").strip():
        data = json.loads(env[OPTIONS_ENV_VAR])
        if not isinstance(data, dict):
            raise ValueError(f"{OPTIONS_ENV_VAR} must be a JSON object of queue options")
        out.update(data)
    return out
