"""Options of the D2LPM Ray Serve router, validated at construction (no Ray import)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fairq
from fairq.ledger.caps import Limits
from fairq.ray.extract import TenantExtractor, TokensExtractor
from fairq.ray.feedback import FEEDBACK_KEY
from fairq.tenancy import tenant_weights


def _load(field: str, spec: Any) -> Callable[..., Any] | None:
    """A callable, or ``"package.module:attribute"`` naming one; None stays None."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise TypeError(f"{field} must be a callable or a 'module:attribute' string, got {spec!r}")
    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{field} = {spec!r} cannot be imported: {e}") from e
    if not callable(obj):
        raise TypeError(f"{field} = {spec!r} is not callable")
    return obj


@dataclass(frozen=True)
class RouterOptions:
    """The router's ``request_router_kwargs``; every field is checked when the
    options are built, and errors name the field.

    Attributes:
        worker_quantum: D2LPM's ``Q_w``, credit per refill round in (pseudo-)
            tokens; ``> 0``, ``float("inf")`` for pure prefix affinity.
        w_e, w_q: cost of an input and an output token (``>= 0``, finite).
        placement_slack: D2LPM's agreed placement (an int ``>= 0``; 0: the
            paper's least-loaded choice): among the candidates loaded at most
            this many requests above the least, a new prefix goes to the
            replica its rendezvous hash ranks first (replicas are named by
            their Serve replica id), so routers whose views of the loads
            differ by less than this place a document alike.
        match_threshold: D2LPM's ``match_threshold`` (a fraction in [0,
            1]; 0, the default: every match counts, the paper's rule): a
            longest held prefix covering less of the prompt than this (a
            system prompt every document shares) does not pull the request
            to the replicas holding it; credit and load place it.
        spread_by_credit: D2LPM's ``spread_by_credit`` (default False, the
            paper's least loaded): a request its held prefix does not place
            goes to the replica where its tenant has the most credit left,
            so each tenant's documents spread over the replicas as its
            credit will later ask.
        max_replicas: worker slots of the dispatcher (1..4096); replicas take
            a free slot when they appear and give it back when they go.
        shared_view: apply what the replicas publish of the other routers'
            work (:mod:`fairq.ray.view`: their requests in flight, their
            tenants' charges, the prefixes they placed); False: this router's
            own dispatches only.
        view_max_age_s: a replica's view older than this (> 0 seconds;
            nothing new in its routing stats) is dropped: its load counts this
            router's requests only until the view comes back. Set it to a few
            ``request_routing_stats_period_s``.
        view_hub: also share dispatches through one named Ray actor per
            deployment (:mod:`fairq.ray.hub`): each router posts a dispatch
            when it makes it and keeps a pull waiting at the hub, so the
            others' placements may arrive before the routing stats bring
            them (0.4-1.7 s measured). Needs ``shared_view``. Default False.
        view_hub_wait_s: the longest a pull waits at the hub for news before
            the router pulls again (> 0, finite).
        hub_placement: a new document (a prompt with at least 256 tokens
            past its longest held prefix) goes where the hub says, the same
            for every router: where the hub placed it before, else D2LPM's
            choice unless that replica holds more than
            ``hub_placement_slack`` documents above the fewest, else the
            one with the fewest (:class:`fairq.dispatch.FirstPlacement`).
            One round trip per new document, waited for up to
            ``fairq.ray.hub.PLACE_TIMEOUT_S``; past that the router keeps
            D2LPM's choice. Needs ``view_hub``. Default False.
        hub_placement_slack: documents a replica may hold above the fewest
            and still take a new one D2LPM chose for it (an int ``>= 0``; 0:
            the documents spread evenly, D2LPM's choice breaking ties).
        default_tenant: tenant of a request the extractor finds none for.
        tenant_header: HTTP header read for the tenant of proxy requests.
        tenant_extractor: ``(args, kwargs) -> str``, or ``"module:attr"``;
            None: :func:`fairq.ray.extract.default_tenant`.
        tokens_extractor: ``(args, kwargs) -> token ids``, or
            ``"module:attr"``; None: ``default_tokens``.
        spill: when the D2LPM choice cannot take the request now (its queue is
            at ``max_ongoing_requests`` or it does not answer), offer the other
            replicas (least-loaded first, Ray's choice) instead of waiting.
        feedback_key: routing-stats key the replicas report under.
        recent_requests: completed requests remembered for output counts that
            arrive after completion (> 0).
        limits: admission limits (:class:`fairq.ledger.caps.Limits` fields,
            errors name ``limits.<field>``); a refused request fails with
            Serve's ``BackPressureError`` (HTTP 429 and ``Retry-After`` at
            Serve's proxy; 413 for one no cap can hold). None: no limits.
        tenant_weights: ``{tenant: weight > 0}`` for the limits' shares.
    """

    worker_quantum: float = 4096.0
    w_e: float = 1.0
    w_q: float = 2.0
    placement_slack: int = 0
    match_threshold: float = 0.0
    spread_by_credit: bool = False
    max_replicas: int = 256
    shared_view: bool = True
    view_max_age_s: float = 30.0
    view_hub: bool = False
    view_hub_wait_s: float = 1.0
    hub_placement: bool = False
    hub_placement_slack: int = 0
    default_tenant: str = "default"
    tenant_header: str = "x-fairq-tenant"
    tenant_extractor: TenantExtractor | str | None = None
    tokens_extractor: TokensExtractor | str | None = None
    spill: bool = True
    feedback_key: str = FEEDBACK_KEY
    recent_requests: int = 65536
    limits: Mapping[str, Any] | Limits | None = None
    tenant_weights: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        for name in ("shared_view", "view_hub", "hub_placement", "spill", "spread_by_credit"):
            flag = getattr(self, name)
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        for name in ("view_max_age_s", "view_hub_wait_s"):
            age = getattr(self, name)
            number = isinstance(age, (int, float)) and not isinstance(age, bool)
            if not number or not 0 < age < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {age!r}")
        if self.view_hub and not self.shared_view:
            raise ValueError("view_hub needs shared_view (the hub feeds the shared view)")
        if self.hub_placement and not self.view_hub:
            raise ValueError("hub_placement needs view_hub (the hub places the documents)")
        for name, least in (
            ("max_replicas", 1),
            ("recent_requests", 1),
            ("hub_placement_slack", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"{name} must be an int >= {least}, got {v!r}")
        if self.max_replicas > 4096:
            raise ValueError(f"max_replicas must be <= 4096, got {self.max_replicas}")
        for name in ("default_tenant", "tenant_header", "feedback_key"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{name} must be a non-empty str, got {v!r}")
        object.__setattr__(
            self, "tenant_extractor", _load("tenant_extractor", self.tenant_extractor)
        )
        object.__setattr__(
            self, "tokens_extractor", _load("tokens_extractor", self.tokens_extractor)
        )
        if not isinstance(self.limits, Limits):
            object.__setattr__(self, "limits", Limits.from_mapping(self.limits))
        object.__setattr__(self, "tenant_weights", tenant_weights(self.tenant_weights))
        self.dispatcher()  # the core validates the dispatcher's knobs

    def dispatcher(self) -> fairq.D2LPM:
        """A fresh D2LPM over ``max_replicas`` slots with these knobs."""
        return fairq.D2LPM(
            self.max_replicas,
            self.worker_quantum,
            w_e=self.w_e,
            w_q=self.w_q,
            placement_slack=self.placement_slack,
            match_threshold=self.match_threshold,
            spread_by_credit=self.spread_by_credit,
        )
