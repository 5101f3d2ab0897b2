"""Which tenant a transformers request belongs to, and the fair policies'
options (pure Python, no torch needed).

transformers' continuous batching knows a request by its id only (its
``RequestState`` carries no user field), so the tenant comes from the id:
an explicit ``mapping`` first, then the text before the first ``separator``
(``"alice/17"`` belongs to ``"alice"``). :class:`TenantResolver` is that
rule as the engines' shared :class:`fairq.tenancy.SourceOrder`;
:class:`FairOptions` the engines' shared options
(:class:`fairq.engineopts.FairOptions`) with transformers' resolver, every
local policy of :data:`fairq.sched.POLICY_INFO` and the saved state's keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from fairq import engineopts as _engineopts
from fairq.engineopts import STATE_KEYS, check_policy
from fairq.sched import POLICY_INFO
from fairq.tenancy import SourceOrder

__all__ = ["SOURCES", "FAIR_POLICIES", "TenantResolver", "FairOptions", "make_options"]

#: Where a tenant can come from, in the default resolution order.
SOURCES = ("mapping", "request_id")

#: The policies transformers runs: every local policy of the core (a policy
#: added there is one of them with no edit here).
FAIR_POLICIES = tuple(POLICY_INFO)


class TenantResolver(SourceOrder):
    """Maps a transformers request (a ``RequestState``, or its id: any
    object, compared as ``str``) to a tenant name, trying ``order`` in turn.

    * ``"mapping"``: ``mapping[request_id]`` (explicit entries, copied);
    * ``"request_id"``: the text before the first ``separator`` in the id,
      when the id contains it and that text is not empty.

    None of them: ``default``. Never raises for a request. The constructor
    raises ``ValueError`` naming a bad option (``tenant.separator``,
    ``tenant.mapping['r1']``...); positional arguments are the old
    ``ClientResolver``'s (``separator, mapping, default``).
    """

    SOURCES = SOURCES
    #: the keys of the options' ``tenant`` mapping (constructor keywords)
    OPTIONS = ("order", "separator", "mapping", "default")
    #: those of them that are lists
    LIST_OPTIONS = ("order",)

    def __init__(
        self,
        separator: str = "/",
        mapping: Mapping[Any, str] | None = None,
        default: str = "default",
        order: tuple[str, ...] | list[str] = SOURCES,
    ) -> None:
        if mapping is not None and not isinstance(mapping, Mapping):
            raise TypeError(
                f"tenant.mapping must be a mapping of request id -> tenant, got {mapping!r}"
            )
        entries: dict[str, str] = {}
        for rid, tenant in (mapping or {}).items():
            if not isinstance(tenant, str) or not tenant:
                raise ValueError(
                    f"tenant.mapping[{rid!r}] must be a non-empty tenant name, got {tenant!r}"
                )
            entries[str(rid)] = tenant
        self._set_order(order, separator, default)
        self.mapping = entries

    def _from(self, src: str, request: Any) -> Any:
        rid = str(getattr(request, "request_id", request))
        if src == "mapping":
            return self.mapping.get(rid)
        head, sep, _ = rid.partition(self.separator)
        return head if sep else None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(separator={self.separator!r}, "
            f"mapping=<{len(self.mapping)} entries>, default={self.default!r}, "
            f"order={list(self.order)})"
        )


@dataclass(frozen=True)
class FairOptions(_engineopts.FairOptions):
    """Validated options of a fair policy inside transformers: the shared
    :class:`fairq.engineopts.FairOptions` with every local policy
    (:data:`FAIR_POLICIES`), transformers' tenant resolver
    (:class:`TenantResolver`, also ``tenant``'s default) and the saved
    state's keys (:data:`fairq.engineopts.STATE_KEYS`)."""

    ENGINE_POLICIES: ClassVar[tuple[str, ...]] = FAIR_POLICIES
    RESOLVER: ClassVar[Any] = TenantResolver
    ENGINE_KEYS: ClassVar[tuple[str, ...]] = STATE_KEYS

    tenant: Callable[[Any], str] = field(default_factory=TenantResolver)


def make_options(
    policy: str,
    options: Mapping[str, Any] | FairOptions | None = None,
    *,
    client_of: Callable[[Any], str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> FairOptions:
    """Validated options of ``policy`` (``"dlpm"`` or ``"fairq-dlpm"``);
    every error names its field.

    ``options``: plain data with the keys every engine takes (the policy's
    own: VTC ``w_in``/``w_out``, DLPM ``quantum``/``w_e``/``w_q``;
    ``tenant_weights``; ``tenant``: :class:`TenantResolver`'s keywords;
    ``state_file``, ``state_interval_s``), or a built :class:`FairOptions`
    of the same policy. The older keywords still work: ``client_of`` (any
    callable request id -> tenant, instead of ``tenant``) and ``weights``
    (instead of ``tenant_weights``); giving both forms is an error.
    """
    key = check_policy(policy)
    if isinstance(options, FairOptions):
        if options.policy != key:
            raise ValueError(f"options are for policy {options.policy!r}, not {key!r}")
        built = options
    else:
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options must be a mapping, got {options!r}")
        raw = dict(options or {})
        if weights is not None:
            if "tenant_weights" in raw:
                raise ValueError("give tenant_weights in options or weights=, not both")
            raw["tenant_weights"] = dict(weights)
        raw.pop("policy", None)
        built = FairOptions.from_mapping(key, raw)
        weights = None
    if client_of is not None:
        if not callable(client_of):
            raise TypeError(f"client_of must be callable, got {client_of!r}")
        if isinstance(options, Mapping) and "tenant" in options:
            raise ValueError("give tenant in options or client_of=, not both")
        built = replace(built, tenant=client_of)
    if weights is not None:
        raise ValueError("give tenant_weights in the FairOptions, not weights=")
    return built
