"""Which tenant a vLLM request belongs to, and the fair policies' options.

Pure Python (no vLLM import): the scheduler integration
(:mod:`fairq.vllm.fair`) reads requests through duck typing, and the options
are validated when the scheduler is built, each error naming its field.
The options' validator and loader are the engine integrations' shared ones
(:mod:`fairq.engineopts`); what is vLLM's own is here: its policies,
tenant sources and request-id prefixes, and its environment variables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fairq import engineopts as _engineopts
from fairq.engineopts import STATE_KEYS, state_options
from fairq.sched import POLICY_INFO
from fairq.tenancy import GATEWAY_HEADERS, SourceOrder

__all__ = [
    "VLLM_ID_PREFIXES",
    "CONFIG_ENV_VAR",
    "OPTIONS_ENV_VAR",
    "QUEUE_POLICIES",
    "FAIR_POLICIES",
    "SOURCES",
    "GATEWAY_HEADERS",
    "FairOptions",
    "TenantResolver",
    "load_options",
    "STATE_KEYS",
    "state_options",
]

#: Environment variable naming a YAML or JSON file of fair-policy options
#: (``FAIRQ_VLLM_OPTIONS``, a JSON object, overrides its keys).
CONFIG_ENV_VAR = "FAIRQ_VLLM_CONFIG"

#: Environment variable holding a JSON object of options (over the file's).
OPTIONS_ENV_VAR = "FAIRQ_VLLM_OPTIONS"

#: The policies vLLM runs as standalone waiting queues (``fairq.vllm``'s
#: FCFS, priority and WFQ queues), not on the ledger.
QUEUE_POLICIES = ("fcfs", "priority", "wfq")

#: The fair policies that run inside vLLM's scheduler on the ledger: every
#: local policy of :data:`fairq.sched.POLICY_INFO` but the queue policies
#: (a policy added to the core is one of them with no edit here).
FAIR_POLICIES = tuple(p for p in POLICY_INFO if p not in QUEUE_POLICIES)

#: Where a tenant can come from, in the default resolution order.
SOURCES = ("header", "extra_args", "lora", "request_id", "cache_salt")


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
    * ``"cache_salt"``: the request's ``cache_salt``;
    * ``"header"``: the first of ``headers`` (HTTP headers, default
      :data:`fairq.tenancy.GATEWAY_HEADERS`) a request carries. Only the front door
      (:mod:`fairq.vllm.door`) sees HTTP headers; it hands the tenant it
      resolved to the engine as ``vllm_xargs[extra_args_key]``, so the
      scheduler, for which this source yields nothing, resolves the same
      tenant through ``"extra_args"`` (which must then come later in
      ``order``).

    A source that yields nothing (absent, empty, not a string) falls through
    to the next; none: ``default``. Never raises for a request.
    """

    SOURCES = SOURCES
    extra_args_key: str
    #: the keys of the options' ``tenant`` mapping (constructor keywords)
    OPTIONS = ("order", "extra_args_key", "separator", "default", "strip_prefixes", "headers")
    #: those of them that are lists
    LIST_OPTIONS = ("order", "strip_prefixes", "headers")

    def __init__(
        self,
        order: tuple[str, ...] | list[str] = SOURCES,
        extra_args_key: str = "tenant",
        separator: str = ":",
        default: str = "default",
        strip_prefixes: tuple[str, ...] | list[str] = VLLM_ID_PREFIXES,
        headers: tuple[str, ...] | list[str] = GATEWAY_HEADERS,
    ) -> None:
        strip = tuple(strip_prefixes)
        for i, p in enumerate(strip):
            if not isinstance(p, str) or not p:
                raise ValueError(
                    f"tenant.strip_prefixes[{i}] must be a non-empty string, got {p!r}"
                )
        self._set_order(order, separator, default, extra_args_key=extra_args_key)
        self.headers = self._check_headers(headers, "extra_args")
        self.strip_prefixes = strip

    def _from(self, src: str, request: Any) -> Any:
        if src == "header":
            return self._header(request)
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


@dataclass(frozen=True)
class FairOptions(_engineopts.FairOptions):
    """Validated options of a fair policy inside vLLM: the shared
    :class:`fairq.engineopts.FairOptions` with vLLM's policies
    (:data:`FAIR_POLICIES`), tenant resolver (:class:`TenantResolver`, also
    ``tenant``'s default) and further keys (``dual_phase`` and the saved
    state's, :data:`STATE_KEYS`)."""

    ENGINE_POLICIES: ClassVar[tuple[str, ...]] = FAIR_POLICIES
    RESOLVER: ClassVar[Any] = TenantResolver
    ENGINE_KEYS: ClassVar[tuple[str, ...]] = ("dual_phase", *STATE_KEYS)

    tenant: Callable[[Any], str] = field(default_factory=TenantResolver)


def load_options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The raw options: the file named by ``$FAIRQ_VLLM_CONFIG`` (YAML or
    JSON), then ``$FAIRQ_VLLM_OPTIONS`` (a JSON object) over it
    (:func:`fairq.engineopts.load_options`)."""
    return _engineopts.load_options(env, config_var=CONFIG_ENV_VAR, options_var=OPTIONS_ENV_VAR)
