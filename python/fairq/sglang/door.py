"""fairq's front door on SGLang's HTTP server: per-tenant admission control
with fair 429s, as for vLLM (:mod:`fairq.vllm.door`; the rule:
:mod:`fairq.ledger.caps`).

SGLang 0.5 has no option to add an ASGI middleware, but its HTTP server's
FastAPI ``app`` is a module attribute built at import, and SGLang loads
fairq's general plugin (:func:`fairq.sglang._install.plugin`) in its main
process before it starts serving: there, with ``limits`` among the options
(``$FAIRQ_SGLANG_CONFIG`` / ``$FAIRQ_SGLANG_OPTIONS``), :func:`install_door`
adds :class:`FairAdmission` to that app. A bad limit ends the process with
an error naming the field.

The tenant is resolved by SGLang's resolver
(:class:`fairq.sglang.tenants.TenantResolver`) over the request body
(``custom_labels``, ``routing_key``, ``extra_key``, ``lora_path``, ``rid``)
and the gateway headers (the ``header`` source); a tenant found in a header
is written into the body's ``custom_labels`` (which fairq carries to the
scheduler, :mod:`fairq.sglang.labels`). What is missing in SGLang:

* its OpenAI chat route takes custom labels only from the header named by
  ``--tokenizer-metrics-custom-labels-header``, not from the body, so a
  header tenant reaches the scheduler on ``/generate`` and
  ``/v1/completions`` only;
* the policy's accounts (``fairq_scheduler_share_lead``) live in the
  scheduler processes; the door reads them from prometheus's multiprocess
  files (``$PROMETHEUS_MULTIPROC_DIR``, SGLang's ``--enable-metrics``),
  once a second; without them it ranks tenants by what they hold;
* the door's own metrics reach ``/metrics`` the same way (gauges written
  to those files, :class:`fairq.ledger.promsync.GaugeMirror`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from fairq.ledger.caps import Limits
from fairq.ledger.door import AdmissionDoor
from fairq.ledger.promsync import multiprocess_dir

__all__ = ["FairAdmission", "door_options", "install_door"]

_HTTP_MOD = "sglang.srt.entrypoints.http_server"


def door_options(env: Mapping[str, str] | None = None) -> Any:
    """``limits``, ``tenant_weights`` and ``tenant`` of SGLang's options,
    validated by the one validator (errors name the field)."""
    from fairq.sglang.tenants import FairOptions, load_options

    raw = load_options(env)
    keep: dict[str, Any] = {k: raw[k] for k in ("limits", "tenant_weights", "tenant") if k in raw}
    return FairOptions.from_mapping("vtc", keep)


class FairAdmission(AdmissionDoor):
    """The ASGI middleware on SGLang's app (see the module doc)."""

    def __init__(self, app: Any, options: Any = None) -> None:
        self.options = options if options is not None else door_options()
        super().__init__(
            app, self.options.limits or Limits(), self.options.tenant_weights, name="sglang-door"
        )
        self._mirror: Any = None
        self._last = float("-inf")
        if multiprocess_dir() is not None:
            from fairq.ledger.promsync import GaugeMirror

            self._mirror = GaugeMirror()

    def tenant(
        self, body: Mapping[str, Any], headers: Mapping[str, str], scope: Any
    ) -> tuple[str, bool]:
        labels = body.get("custom_labels")
        view = SimpleNamespace(
            headers=headers,
            custom_labels=labels if isinstance(labels, dict) else None,
            routing_key=body.get("routing_key"),
            extra_key=body.get("extra_key"),
            lora_id=body.get("lora_path"),
            rid=body.get("rid"),
        )
        tenant, source = self.options.tenant.resolve(view)
        return tenant, source == "header"

    def hand_on(self, body: dict[str, Any], tenant: str) -> None:
        labels = body.get("custom_labels")
        labels = dict(labels) if isinstance(labels, dict) else {}
        labels[self.options.tenant.label_key] = tenant
        body["custom_labels"] = labels

    def accounts(self) -> Mapping[str, float] | None:
        now = time.monotonic()
        if now - self._last < 1.0 or multiprocess_dir() is None:
            return None
        self._last = now
        from prometheus_client import CollectorRegistry, multiprocess

        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        out: dict[str, float] = {}
        for fam in reg.collect():
            for smp in fam.samples:
                if smp.name == "fairq_scheduler_share_lead" and "tenant" in smp.labels:
                    t = smp.labels["tenant"]
                    out[t] = max(out.get(t, smp.value), smp.value)
        if self._mirror is not None:
            from fairq.metrics import FairqCollector

            self._mirror.write(FairqCollector(self.control, self.name).collect())
        return out


def install_door(env: Mapping[str, str] | None = None) -> bool:
    """Add :class:`FairAdmission` to SGLang's HTTP app when this is the
    process that serves it (its module is loaded) and the options hold
    limits. Returns whether it did; bad options raise, naming the field."""
    options = door_options(env)
    if options.limits is None or not options.limits.active:
        return False
    http = sys.modules.get(_HTTP_MOD)
    if http is None or getattr(http, "app", None) is None:
        return False
    http.app.add_middleware(FairAdmission, options=options)
    return True
