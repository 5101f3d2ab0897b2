"""The options of fairq's policies inside an engine, shared by every engine
integration (pure Python; no engine is imported).

* The policy table: :data:`POLICIES` (policy name -> fairq class name and the
  engine's default options), :func:`check_policy`, :func:`policy_options`
  and :func:`build_policy`, used by the transformers, vLLM and SGLang
  integrations alike.
* :class:`FairOptions`: the validated options of a fair policy (the policy's
  own, ``tenant_weights``, the ``tenant`` resolver's, the saved state's),
  each error naming its field. One validator, :meth:`FairOptions.from_mapping`;
  each engine subclasses :class:`FairOptions` to name what is its own: the
  policy names it runs, its tenant resolver class (a
  :class:`fairq.tenancy.SourceOrder`) and the further keys it reads itself
  (:class:`fairq.vllm.tenants.FairOptions`,
  :class:`fairq.sglang.tenants.FairOptions`).
* :func:`load_options`: the raw options from an engine's two environment
  variables (a YAML or JSON file, then a JSON object over it), whose names
  the engine gives (``FAIRQ_VLLM_CONFIG`` / ``FAIRQ_VLLM_OPTIONS``,
  ``FAIRQ_SGLANG_CONFIG`` / ``FAIRQ_SGLANG_OPTIONS``).

WFQ and DRR are not in the table: they order flows by virtual finish time /
per-class deficits over *classes* of requests, not per client with prefix
reuse, and the engine integrations are about the latter (see
docs/RESULTS.md; they remain available as standalone queues).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fairq.sched import POLICY_INFO, make_scheduler, policy_name
from fairq.tenancy import finite_number as _number
from fairq.tenancy import tenant_weights

if TYPE_CHECKING:
    from fairq.ledger.caps import Limits

__all__ = [
    "DEFAULT_INTERVAL_S",
    "POLICIES",
    "STATE_KEYS",
    "FairOptions",
    "build_policy",
    "check_policy",
    "json_options",
    "load_options",
    "policy_options",
    "read_options_file",
    "state_options",
    "tenant_weights",
]

#: policy name -> (fairq class name, keyword arguments it accepts with the
#: engine's defaults: DLPM's quantum sized for one engine batch), from the
#: core's registry (:data:`fairq.sched.POLICY_INFO`)
POLICIES: dict[str, tuple[str, dict[str, float]]] = {
    key: (info.class_name, dict(info.engine_defaults)) for key, info in POLICY_INFO.items()
}


def check_policy(name: str) -> str:
    """Return the normalized policy name (a ``"fairq-"`` prefix is accepted)
    or raise ``ValueError`` naming the choices (:func:`fairq.sched.policy_name`)."""
    if isinstance(name, str) and name.strip().lower().startswith("fairq-"):
        name = name.strip()[len("fairq-") :]
    return policy_name(name)


def policy_options(name: str, options: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Defaults for ``name`` overridden by ``options``; rejects unknown or bad
    options when the scheduler class is made, before the engine builds it.

    DLPM's quantum is automatic by default (``quantum_scale`` > 0 times the
    recent mean request charge, ``quantum`` its value until the first
    admission), with strict credit (ALGORITHMS.md §6). ``quantum="auto"``
    asks for that explicitly; a number for ``quantum`` is the paper's DLPM:
    a fixed quantum (``quantum_scale`` 0) and admission at ``q > 0``
    (``strict_credit`` off), each unless given, as before either existed.
    """
    key = check_policy(name)
    defaults = dict(POLICIES[key][1])
    given = dict(options or {})
    if "quantum_scale" in defaults and "quantum" in given:
        q = given["quantum"]
        if isinstance(q, str) and q.strip().lower() == "auto":
            del given["quantum"]
            scale = given.get("quantum_scale")
            if scale is not None and not isinstance(scale, bool) and scale == 0:
                raise ValueError(
                    "option 'quantum_scale' must be > 0 with quantum \"auto\" (0 is a fixed "
                    "quantum: give quantum a number), got 0"
                )
        else:
            given.setdefault("quantum_scale", 0.0)
            given.setdefault("strict_credit", False)
    flags = POLICY_INFO[key].flags
    for opt, value in given.items():
        if opt not in defaults:
            allowed = ", ".join(sorted(defaults)) or "none"
            raise ValueError(f"policy {key!r} has no option {opt!r} (options: {allowed})")
        if opt in flags:  # a switch: true / false (or 1 / 0)
            if value not in (True, False) or not isinstance(value, (bool, int, float)):
                raise ValueError(f"option {opt!r} must be true or false, got {value!r}")
            defaults[opt] = float(value)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            auto = ' or "auto"' if opt == "quantum" and "quantum_scale" in defaults else ""
            raise TypeError(f"option {opt!r} must be a number{auto}, got {value!r}")
        # as the schedulers check them: every weight and the quantum finite
        # and > 0; quantum_scale >= 0 (0: a fixed quantum)
        low = "finite number >= 0" if opt == "quantum_scale" else "finite number > 0"
        x = float(value)
        if not math.isfinite(x) or x < 0 or (x == 0 and opt != "quantum_scale"):
            raise ValueError(f"option {opt!r} must be a {low}, got {value!r}")
        defaults[opt] = x
    return defaults


def build_policy(name: str, tree: Any, options: Mapping[str, Any] | None = None) -> Any:
    """Instantiate the fairq scheduler for ``name`` over ``tree``
    (:func:`fairq.sched.make_scheduler` with the engine's defaults)."""
    key = check_policy(name)
    return make_scheduler(key, tree, **policy_options(key, options))


#: The options of the saved fairness state (:mod:`fairq.vllm.persist`), taken
#: by every policy of an engine that saves it (vLLM's scheduler classes).
STATE_KEYS = ("state_file", "state_interval_s")
#: Default ``state_interval_s``.
DEFAULT_INTERVAL_S = 10.0


def state_options(raw: Mapping[str, Any]) -> tuple[str | None, float]:
    """``(state_file, state_interval_s)`` from ``raw`` (``None`` and the
    default interval when absent), each error naming its field."""
    path = raw.get("state_file")
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise ValueError(f"state_file must be a non-empty path string, got {path!r}")
    interval = raw.get("state_interval_s", DEFAULT_INTERVAL_S)
    return path, _number("state_interval_s", interval, positive=True)


def _one_tenant(request: Any) -> str:
    """The tenant of every request where no resolver is given."""
    return "default"


_F = TypeVar("_F", bound="FairOptions")


@dataclass(frozen=True)
class FairOptions:
    """Validated options of a fair policy inside an engine.

    ``policy_options``: the local scheduler's own (VTC ``w_in``/``w_out``,
    DLPM ``quantum``/``w_e``/``w_q``; defaults from :data:`POLICIES`).
    ``tenant_weights``: ``{tenant: weight > 0}`` (a weight divides the
    tenant's charges: weight 2 gets twice the service). ``tenant``: request
    -> tenant (built by :meth:`from_mapping` from the engine's
    :attr:`RESOLVER`). ``limits``: the admission limits
    (:class:`fairq.ledger.caps.Limits`, from the ``limits`` mapping; None:
    none), which every engine's front door enforces.

    An engine's subclass sets the class attributes :attr:`ENGINE_POLICIES`,
    :attr:`RESOLVER` and :attr:`ENGINE_KEYS` (and gives ``tenant`` its
    resolver as default); they are :meth:`from_mapping`'s defaults.
    """

    #: the policy names the engine accepts
    ENGINE_POLICIES: ClassVar[tuple[str, ...]] = tuple(POLICIES)
    #: the engine's tenant resolver class (lists the keys of ``tenant`` it
    #: takes in ``OPTIONS``, the list-valued ones in ``LIST_OPTIONS``)
    RESOLVER: ClassVar[Any] = None
    #: the further keys the engine reads itself (vLLM: ``dual_phase`` and
    #: :data:`STATE_KEYS`)
    ENGINE_KEYS: ClassVar[tuple[str, ...]] = ()

    policy: str
    policy_options: dict[str, float] = field(default_factory=dict)
    tenant_weights: dict[str, float] = field(default_factory=dict)
    tenant: Callable[[Any], str] = _one_tenant
    #: the saved fairness state's file (:mod:`fairq.vllm.persist`), or None
    state_file: str | None = None
    #: seconds between saves of the state
    state_interval_s: float = DEFAULT_INTERVAL_S
    #: admission limits (``limits``; None when not given)
    limits: Limits | None = None

    @classmethod
    def from_mapping(
        cls: type[_F],
        policy: str,
        raw: Mapping[str, Any],
        *,
        policies: tuple[str, ...] | None = None,
        resolver: Any = None,
        engine_keys: tuple[str, ...] | None = None,
    ) -> _F:
        """Build from plain data (the parsed file / JSON), naming any bad field.

        ``policies`` are the policy names the engine accepts, ``resolver``
        the tenant resolver class, ``engine_keys`` the further keys the
        engine reads itself (the saved state's are validated here when they
        are among them); each defaults to the class's :attr:`ENGINE_POLICIES`,
        :attr:`RESOLVER`, :attr:`ENGINE_KEYS`.
        """
        policies = cls.ENGINE_POLICIES if policies is None else policies
        resolver_cls = cls.RESOLVER if resolver is None else resolver
        engine_keys = cls.ENGINE_KEYS if engine_keys is None else engine_keys
        if resolver_cls is None:
            raise TypeError(f"{cls.__name__}.from_mapping needs a tenant resolver class")
        if policy not in policies:
            raise ValueError(f"policy must be one of {', '.join(policies)} here, got {policy!r}")
        known = set(POLICIES[policy][1]) | {
            "tenant_weights",
            "tenant",
            "policy",
            "limits",
            *engine_keys,
        }
        for key in raw:
            if key not in known:
                raise ValueError(
                    f"unknown option {key!r} for policy {policy!r} "
                    f"(options: {', '.join(sorted(known - {'policy'}))})"
                )
        opts = policy_options(policy, {k: v for k, v in raw.items() if k in POLICIES[policy][1]})
        weights = tenant_weights(raw.get("tenant_weights"))
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
        state = state_options(raw) if "state_file" in engine_keys else (None, DEFAULT_INTERVAL_S)
        from fairq.ledger.caps import Limits

        limits = Limits.from_mapping(raw["limits"]) if raw.get("limits") is not None else None
        return cls(policy, opts, weights, tenant, *state, limits=limits)


def read_options_file(path: str, var: str) -> dict[str, Any]:
    """The mapping in the YAML or JSON file ``path`` (named by ``$var``,
    which every error names)."""
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


def json_options(text: str, var: str, what: str = "options") -> dict[str, Any]:
    """The JSON object ``text`` (the value of ``$var``; empty: ``{}``).
    Malformed JSON or a non-object is a ``ValueError`` naming ``var``."""
    text = text.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{var} is not valid JSON ({e}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{var} must be a JSON object of {what}, got {text!r}")
    return value


def load_options(
    env: Mapping[str, str] | None = None, *, config_var: str, options_var: str
) -> dict[str, Any]:
    """The raw options: the file named by ``$config_var`` (YAML or JSON),
    then ``$options_var`` (a JSON object) over it; ``env`` defaults to
    ``os.environ``."""
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    path = env.get(config_var, "").strip()
    if path:
        out.update(read_options_file(path, config_var))
    out.update(json_options(env.get(options_var, ""), options_var))
    return out
