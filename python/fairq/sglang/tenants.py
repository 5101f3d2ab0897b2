"""Which tenant an SGLang request belongs to, and the fair policies' options.

Pure Python (no SGLang import): requests are read through duck typing
(``sglang.srt.managers.schedule_batch.Req``'s attributes). The options are
validated by the one validator fairq's engine integrations share
(:meth:`fairq.engineopts.FairOptions.from_mapping`), each error naming its
field, when :func:`fairq.sglang.install` is called; what is SGLang's own is
here: its policy names, tenant sources and environment variables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fairq import engineopts as _engineopts
from fairq.engineopts import STATE_KEYS
from fairq.sched import POLICY_INFO
from fairq.tenancy import GATEWAY_HEADERS, SourceOrder

__all__ = [
    "CONFIG_ENV_VAR",
    "OPTIONS_ENV_VAR",
    "FairOptions",
    "POLICIES",
    "SOURCES",
    "TenantResolver",
    "load_options",
    "make_options",
    "policy_key",
]

#: Environment variable naming a YAML or JSON file of options.
CONFIG_ENV_VAR = "FAIRQ_SGLANG_CONFIG"
#: Environment variable holding a JSON object of options (over the file's).
OPTIONS_ENV_VAR = "FAIRQ_SGLANG_OPTIONS"

#: fairq's policies inside SGLang, by the name SGLang is given
#: (``fairq-<policy>``): every local policy of
#: :data:`fairq.sched.POLICY_INFO` (one added to the core needs no edit here).
POLICIES = tuple(POLICY_INFO)

#: Where a tenant can come from, in the default resolution order.
SOURCES = ("header", "custom_labels", "routing_key", "extra_key", "lora", "rid")


def policy_key(name: Any) -> str:
    """``"fairq-dlpm"`` / ``"dlpm"`` (any case, surrounding space) -> ``"dlpm"``;
    anything else is a ``ValueError`` naming the choices."""
    if isinstance(name, str):
        key = name.strip().lower()
        if key.startswith("fairq-"):
            key = key[len("fairq-") :]
        if key in POLICIES:
            return key
    choices = ", ".join(f"fairq-{p}" for p in POLICIES)
    raise ValueError(f"policy must be one of {choices}, got {name!r}")


class TenantResolver(SourceOrder):
    """Maps an SGLang ``Req`` to a tenant name, trying ``order`` in turn.

    * ``"custom_labels"``: ``request.custom_labels[label_key]`` (the
      ``/generate`` body's ``custom_labels``; OpenAI routes: the labels of
      the header SGLang's ``--tokenizer-metrics-custom-labels-header``
      names). SGLang 0.5.23 keeps them in its tokenizer manager; they reach
      the scheduler's ``Req`` only with :func:`fairq.sglang.install` run in
      the server's main process too (fairq's plugin is: SGLang loads plugins
      there), which carries them (:mod:`fairq.sglang.labels`). Not through
      SGLang's Rust HTTP server or gRPC paths;
    * ``"routing_key"``: ``request.routing_key`` (the body's ``routing_key``);
    * ``"extra_key"``: ``request.extra_key`` (the body's ``extra_key``; it
      also namespaces SGLang's prefix cache, so tenants set this way never
      share cached prefixes);
    * ``"lora"``: ``request.lora_id`` (the LoRA adapter the request uses);
    * ``"rid"``: the text before the first ``separator`` in the request id
      (the body's ``rid``: ``"alice:42"`` -> ``"alice"``);
    * ``"header"``: the first of ``headers`` (default the gateways',
      :data:`fairq.tenancy.GATEWAY_HEADERS`) an HTTP request carries: only the front door
      (:mod:`fairq.sglang.door`) sees headers; it writes the tenant into
      ``custom_labels[label_key]``, so ``"custom_labels"`` must come later
      in ``order``.

    A source that yields nothing (absent, empty, not a string) falls through
    to the next; none: ``default``. Never raises for a request.
    """

    SOURCES = SOURCES
    label_key: str
    #: the keys of the options' ``tenant`` mapping (constructor keywords)
    OPTIONS = ("order", "label_key", "separator", "default", "headers")
    #: those of them that are lists
    LIST_OPTIONS = ("order", "headers")

    def __init__(
        self,
        order: tuple[str, ...] | list[str] = SOURCES,
        label_key: str = "tenant",
        separator: str = ":",
        default: str = "default",
        headers: tuple[str, ...] | list[str] = GATEWAY_HEADERS,
    ) -> None:
        self._set_order(order, separator, default, label_key=label_key)
        self.headers = self._check_headers(headers, "custom_labels")

    def _from(self, src: str, request: Any) -> Any:
        if src == "header":
            return self._header(request)
        if src == "custom_labels":
            labels = getattr(request, "custom_labels", None)
            return labels.get(self.label_key) if isinstance(labels, Mapping) else None
        if src == "routing_key":
            return getattr(request, "routing_key", None)
        if src == "extra_key":
            return getattr(request, "extra_key", None)
        if src == "lora":
            return getattr(request, "lora_id", None)
        rid = getattr(request, "rid", None)
        if isinstance(rid, str):
            head, sep, _ = rid.partition(self.separator)
            return head if sep else None
        return None


@dataclass(frozen=True)
class FairOptions(_engineopts.FairOptions):
    """Validated options of a fair policy inside SGLang: the shared
    :class:`fairq.engineopts.FairOptions` with SGLang's policies
    (:data:`POLICIES`) and tenant resolver (:class:`TenantResolver`, also
    ``tenant``'s default); further keys: the saved state's
    (:data:`fairq.engineopts.STATE_KEYS`: ``state_file``,
    ``state_interval_s``)."""

    ENGINE_POLICIES: ClassVar[tuple[str, ...]] = POLICIES
    RESOLVER: ClassVar[Any] = TenantResolver
    ENGINE_KEYS: ClassVar[tuple[str, ...]] = STATE_KEYS

    tenant: Callable[[Any], str] = field(default_factory=TenantResolver)


def make_options(policy: Any, raw: Mapping[str, Any] | None = None) -> FairOptions:
    """Validated options of ``policy`` (``fairq-dlpm`` or ``dlpm``) from plain
    data; every error names its field. Keys: the policy's own (VTC
    ``w_in``/``w_out``, DLPM ``quantum``/``w_e``/``w_q``), ``tenant_weights``,
    ``tenant`` (:class:`TenantResolver`'s keywords), ``state_file`` and
    ``state_interval_s`` (the saved state, :mod:`fairq.ledger.persist`),
    and ``policy`` (ignored here: the caller resolved it)."""
    key = policy_key(policy)
    if raw is not None and not isinstance(raw, Mapping):
        raise TypeError(f"options must be a mapping, got {raw!r}")
    return FairOptions.from_mapping(key, dict(raw or {}))


def load_options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The raw options: the file named by ``$FAIRQ_SGLANG_CONFIG`` (YAML or
    JSON), then ``$FAIRQ_SGLANG_OPTIONS`` (a JSON object) over it
    (:func:`fairq.engineopts.load_options`)."""
    return _engineopts.load_options(env, config_var=CONFIG_ENV_VAR, options_var=OPTIONS_ENV_VAR)
