"""fairq's front door on vLLM's OpenAI server: per-tenant admission control
with fair 429s (``--middleware fairq.vllm.door.FairAdmission``).

Usage::

    FAIRQ_VLLM_POLICY=vtc \\
    FAIRQ_VLLM_OPTIONS='{"limits": {"max_requests": 256, "tenant_max_requests": 128}}' \\
    vllm serve MODEL --scheduler-cls fairq.vllm.scheduler.Scheduler \\
        --middleware fairq.vllm.door.FairAdmission

The options are the scheduler's (``$FAIRQ_VLLM_CONFIG`` /
``$FAIRQ_VLLM_OPTIONS``): ``limits`` (:class:`fairq.ledger.caps.Limits`),
``tenant_weights`` and ``tenant`` (the resolver). They are read and
validated when vLLM imports this module, as it builds its app: a bad one
stops the server before it serves, with an error naming the field.

Where the decision lives, and why here: vLLM's scheduler runs in the engine
core, another process, and sees a request only after the API server has
parsed, tokenized and sent it, and vLLM has no path from a scheduler's
refusal to an HTTP status. So the decision is made in the API server, by an
ASGI middleware (vLLM's supported ``--middleware``), on the request's body
before vLLM reads it, with the door's own exact count of the requests and
tokens each tenant holds (:class:`fairq.ledger.door.AdmissionDoor`). What
it needs from the scheduler, the policy's account of each tenant
(``fairq_scheduler_share_lead``), arrives by the path fairq's metrics take
to the API server (:mod:`fairq.vllm.stats`, :mod:`fairq.vllm.statlogger`),
at most a second old; the bounds do not depend on it.

The tenant is resolved by the scheduler's own resolver
(:class:`fairq.vllm.tenants.TenantResolver`) over a view of the HTTP
request (``vllm_xargs``, the LoRA adapter named by ``model``, the
``X-Request-Id`` header as vLLM turns it into the request id,
``cache_salt``) plus the ``header`` source (GIE's
``x-gateway-inference-fairness-id``, llm-d's
``x-llm-d-inference-fairness-id``): a tenant found in a header is written
into ``vllm_xargs`` so the scheduler sees the tenant the gateway saw.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from fairq.ledger.caps import Limits
from fairq.ledger.door import AdmissionDoor
from fairq.vllm.tenants import FairOptions, load_options

__all__ = ["FairAdmission", "door_options"]

#: The request-id prefix vLLM's server gives each endpoint.
_ID_PREFIX = {"/v1/chat/completions": "chatcmpl-", "/v1/completions": "cmpl-"}


def door_options(env: Mapping[str, str] | None = None) -> FairOptions:
    """The door's options: ``limits``, ``tenant_weights`` and ``tenant`` of
    the scheduler's options, validated by the one validator (the same
    errors, naming the field, as the scheduler's)."""
    raw = load_options(env)
    keep: dict[str, Any] = {k: raw[k] for k in ("limits", "tenant_weights", "tenant") if k in raw}
    return FairOptions.from_mapping("vtc", keep)


#: Validated at import: vLLM imports this module while it builds its app.
_OPTIONS = door_options()


class FairAdmission(AdmissionDoor):
    """The ASGI middleware vLLM's ``--middleware`` adds (see the module doc)."""

    def __init__(self, app: Any, options: FairOptions | None = None) -> None:
        self.options = options or _OPTIONS
        super().__init__(
            app, self.options.limits or Limits(), self.options.tenant_weights, name="vllm-door"
        )
        self._payloads: dict[int, str] = {}

    def tenant(
        self, body: Mapping[str, Any], headers: Mapping[str, str], scope: Any
    ) -> tuple[str, bool]:
        resolver: Any = self.options.tenant
        xargs = body.get("vllm_xargs")
        rid = headers.get("x-request-id")
        view = SimpleNamespace(
            headers=headers,
            sampling_params=SimpleNamespace(extra_args=xargs if isinstance(xargs, dict) else None),
            lora_request=_lora(scope.get("app"), body.get("model")),
            request_id=None if rid is None else _ID_PREFIX.get(scope.get("path"), "") + rid,
            cache_salt=body.get("cache_salt"),
        )
        tenant, source = resolver.resolve(view)
        return tenant, source == "header"

    def hand_on(self, body: dict[str, Any], tenant: str) -> None:
        xargs = body.get("vllm_xargs")
        xargs = dict(xargs) if isinstance(xargs, dict) else {}
        xargs[self.options.tenant.extra_args_key] = tenant  # type: ignore[attr-defined]
        body["vllm_xargs"] = xargs

    def accounts(self) -> Mapping[str, float] | None:
        # the stat-logger plugin vLLM loaded in this process (not imported
        # here: it imports vLLM)
        statlogger = sys.modules.get("fairq.vllm.statlogger")
        latest = getattr(statlogger, "_LATEST", None)
        if latest is None:
            return None
        with latest.lock:
            payloads = dict(latest.by_engine)
        if payloads == self._payloads:
            return None
        self._payloads = payloads
        return share_leads(payloads.values())


def share_leads(payloads: Any) -> dict[str, float]:
    """``fairq_scheduler_share_lead`` per tenant (the largest over engines and
    tiers) from the JSON payloads fairq's metrics travel in."""
    out: dict[str, float] = {}
    for payload in payloads:
        for name, _kind, _doc, samples in json.loads(payload):
            if name != "fairq_scheduler_share_lead":
                continue
            for _sname, labels, value in samples:
                t = labels.get("tenant")
                if t is not None:
                    out[t] = max(out.get(t, value), value)
    return out


def _lora(app: Any, model: Any) -> Any:
    """``lora_request`` as vLLM will set it: the adapter ``model`` names, if
    the server serves one of that name (else None). ``app``: the FastAPI
    app (Starlette's ``scope["app"]``)."""
    if not isinstance(model, str):
        return None
    models = getattr(getattr(app, "state", None), "openai_serving_models", None)
    loras = getattr(models, "lora_requests", None)
    if isinstance(loras, Mapping) and model in loras:
        return SimpleNamespace(lora_name=model)
    return None
