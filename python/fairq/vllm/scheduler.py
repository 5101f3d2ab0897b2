"""vLLM scheduler classes that use fairq's queues (``--scheduler-cls``).

Usage::

    FAIRQ_VLLM_POLICY=priority vllm serve MODEL \\
        --scheduler-cls fairq.vllm.scheduler.FairqAsyncScheduler

(or ``fairq.vllm.scheduler.FairqScheduler`` for vLLM's synchronous
``Scheduler``). After vLLM's own ``__init__`` the scheduler's waiting queues
(``waiting`` and ``kv_holding_waiting``; ``skipped_waiting`` on older vLLM)
are replaced by fairq queues of the policy named by the environment variable
``FAIRQ_VLLM_POLICY`` (``fcfs``, ``priority``, ``wfq``); without it, the policy
vLLM was configured with (``--scheduling-policy``). ``FAIRQ_VLLM_OPTIONS`` may
hold a JSON object of queue options for that policy, e.g.
``FAIRQ_VLLM_OPTIONS='{"virtual_clock": "finish"}'`` with ``wfq``. The classes also call
:func:`fairq.vllm.install` so the temporary queues vLLM builds inside
``schedule()`` are fairq's too.

With the option ``state_file`` (and ``state_interval_s``) the policy's
fairness state survives a restart: :mod:`fairq.vllm.persist`. Under every
policy the classes time fairq's code and the engine step, count each
tenant's requests, prompt tokens and prefix hits (:class:`TenantTally`), and
ship fairq's metrics with vLLM's scheduler statistics to the server's
``/metrics`` (``make_stats``, :mod:`fairq.vllm.stats`). Building one on an
untested vLLM raises (:mod:`fairq.vllm.compat`).

vLLM is imported only when one of the class names is first looked up, so
importing this module is cheap and works without vLLM (the names then raise
``ImportError`` on access).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

from fairq.vllm._base import RequestQueue, SchedulingPolicy
from fairq.vllm.tenants import FAIR_POLICIES

__all__ = [
    "ENV_VAR",
    "OPTIONS_ENV_VAR",
    "resolve_options",
    "check_queue_env_options",
    "QUEUE_ATTRS",
    "replace_queues",
    "resolve_policy",
    "attach_fair_policy",
]

# FairqScheduler / FairqAsyncScheduler are built on first access (they need
# vLLM), so they are not in __all__.

#: Environment variable naming the fairq policy of the waiting queues.
ENV_VAR = "FAIRQ_VLLM_POLICY"
#: Environment variable holding a JSON object of queue options.
OPTIONS_ENV_VAR = "FAIRQ_VLLM_OPTIONS"
#: Scheduler attributes holding waiting queues (whichever exist are replaced).
QUEUE_ATTRS = ("waiting", "kv_holding_waiting", "skipped_waiting")

_BASES = {
    "FairqScheduler": ("vllm.v1.core.sched.scheduler", "Scheduler"),
    "FairqAsyncScheduler": ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler"),
}


def resolve_policy(scheduler: Any) -> SchedulingPolicy:
    """The fairq policy for ``scheduler``: ``$FAIRQ_VLLM_POLICY`` or vLLM's own.

    An unknown name in the environment variable is a ``ValueError``.
    """
    from fairq.vllm import as_policy

    name = os.environ.get(ENV_VAR, "").strip()
    if name:
        try:
            return as_policy(name.lower())
        except ValueError:
            known = ", ".join(p.value for p in SchedulingPolicy)
            msg = f"{ENV_VAR}={name!r} is not a fairq policy (one of: {known})"
            raise ValueError(msg) from None
    return as_policy(getattr(scheduler, "policy", SchedulingPolicy.FCFS))


def resolve_options() -> dict[str, Any]:
    """Queue options from ``$FAIRQ_VLLM_OPTIONS`` (a JSON object; empty if unset).

    Malformed JSON or a non-object is a ``ValueError`` naming the variable.
    """
    from fairq.engineopts import json_options

    return json_options(os.environ.get(OPTIONS_ENV_VAR, ""), OPTIONS_ENV_VAR, "queue options")


def check_queue_env_options(policy: SchedulingPolicy, options: dict[str, Any]) -> None:
    """Refuse an option ``$FAIRQ_VLLM_OPTIONS`` gives a queue policy (``fcfs``,
    ``priority``, ``wfq``) that it does not take, with a ``ValueError``
    listing the ones it does: the queue's own
    (:data:`fairq.vllm.QUEUE_OPTIONS`) and, for ``wfq``, ``tenant`` and the
    saved state's ``state_file`` / ``state_interval_s``."""
    from fairq.vllm import QUEUE_OPTIONS
    from fairq.vllm.dualphase import OPTION as DUAL_PHASE
    from fairq.vllm.tenants import STATE_KEYS

    allowed = (*QUEUE_OPTIONS[policy], DUAL_PHASE)
    if policy is SchedulingPolicy.WFQ:
        allowed = (*allowed, "tenant", *STATE_KEYS)
    for key in options:
        if key not in allowed:
            valid = ", ".join(sorted(allowed)) or "none"
            raise ValueError(
                f"{OPTIONS_ENV_VAR}: unknown option {key!r} for policy {policy.value!r} "
                f"(options: {valid})"
            )


def replace_queues(scheduler: Any, policy: SchedulingPolicy | str, **options: Any) -> list[str]:
    """Replace each waiting queue of ``scheduler`` by a fairq queue of ``policy``
    (built with ``options``).

    Requests already queued move over in their current order. Returns the
    attribute names replaced.
    """
    from fairq.metrics import publish
    from fairq.vllm import create_request_queue
    from fairq.wfq import WFQQueue

    replaced = []
    for attr in QUEUE_ATTRS:
        old = getattr(scheduler, attr, None)
        if old is None:
            continue
        new: RequestQueue = create_request_queue(policy, **options)
        for request in list(old):
            new.add_request(request)
        setattr(scheduler, attr, new)
        replaced.append(attr)
        if isinstance(new, WFQQueue):  # the queues with fairness state
            publish(new, f"vllm-{attr.strip('_')}")
    return replaced


def attach_fair_policy(scheduler: Any, policy: str) -> Any:
    """Put a fair policy (``vtc``, ``lpm``, ``dlpm``) into a built vLLM
    scheduler: its ``waiting`` queue becomes a
    :class:`fairq.vllm.fair.FairWaitingQueue` (requests already queued move
    over in order), LPM/DLPM follow its prefix cache
    (:class:`fairq.vllm.mirror.PrefixCacheMirror`), and the returned
    :class:`fairq.vllm.fair.FairState` charges what it schedules. Options:
    :func:`fairq.vllm.tenants.load_options` (a bad one raises here, naming the
    field). With vLLM's ``priority`` scheduling policy, each priority value is
    a tier served strictly before higher values, fairly within itself.
    """
    from fairq.vllm.fair import FairState, FairWaitingQueue
    from fairq.vllm.tenants import FairOptions, load_options

    raw = load_options()
    raw.pop("policy", None)
    raw.pop("dual_phase", None)  # fairq.vllm.dualphase's, read by the scheduler class
    options = FairOptions.from_mapping(policy, raw)
    vllm_policy = getattr(getattr(scheduler, "policy", None), "value", "fcfs")
    state = FairState(options, int(scheduler.block_size), tiers=vllm_policy == "priority")
    if state.mirror is not None:
        state.mirror.attach(scheduler.kv_cache_manager)
    # the saved state first, before any request (one already queued would
    # block the restore)
    scheduler.fairq_persist = _persistence(
        scheduler, state, policy, options.state_file, options.state_interval_s
    )
    old = scheduler.waiting
    queue = FairWaitingQueue(state)
    for request in list(old):
        queue.add_request(request)
    scheduler.waiting = queue
    return state


class TenantTally:
    """Per tenant, under every fairq policy: requests, prompt tokens and
    vLLM's prefix-cache hits when each request is first scheduled (its
    ``num_computed_tokens`` then is the hit), resolved with ``resolver``.

    Bounded: the first ``max_tenants`` tenants seen are counted by name, every
    later one under :attr:`OTHER` (so memory and the exported series stay
    bounded however many tenants a server sees, and every counter still only
    grows, as Prometheus requires)."""

    #: The tenant label that counts the tenants beyond ``max_tenants``.
    OTHER = "(other)"

    def __init__(self, resolver: Any, max_tenants: int = 1000) -> None:
        self.resolver = resolver
        self.max_tenants = max_tenants
        self.requests: dict[str, int] = {}
        self.prompt_tokens: dict[str, int] = {}
        self.hit_tokens: dict[str, int] = {}
        self._seen: set[str] = set()

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """Count the requests ``output`` schedules for the first time."""
        try:
            new = output.scheduled_new_reqs
            if not new:
                return
            requests = scheduler.requests
            seen = self._seen
            if len(seen) > 4 * len(requests) + 1024:  # forget the finished
                seen.intersection_update(requests)
            for data in new:
                rid = data.req_id
                if rid in seen:
                    continue
                seen.add(rid)
                request = requests.get(rid)
                if request is None:
                    continue
                t = self.resolver(request)
                if t not in self.requests and len(self.requests) >= self.max_tenants:
                    t = self.OTHER
                self.requests[t] = self.requests.get(t, 0) + 1
                self.prompt_tokens[t] = self.prompt_tokens.get(t, 0) + int(
                    request.num_prompt_tokens
                )
                hit = max(int(data.num_computed_tokens), 0)
                self.hit_tokens[t] = self.hit_tokens.get(t, 0) + hit
        except Exception:  # noqa: BLE001 (a tally must never stop a step)
            return

    def families(self, policy: str, clock: Any) -> list[Any]:
        """Prometheus families of the tallies and of ``clock``."""
        from prometheus_client.core import CounterMetricFamily

        name = f"vllm-{policy}"
        out = []
        for key, doc, values in (
            ("requests", "Requests first scheduled", self.requests),
            ("prompt_tokens", "Prompt tokens of requests first scheduled", self.prompt_tokens),
            ("prefix_hit_tokens", "Of those, vLLM's prefix-cache hits", self.hit_tokens),
        ):
            fam = CounterMetricFamily(f"fairq_vllm_{key}", doc, labels=["name", "tenant"])
            for t, v in values.items():
                fam.add_metric([name, t], v)
            out.append(fam)
        for key, doc, v in (
            ("steps", "schedule() calls", clock.steps),
            ("schedule_seconds", "Wall time in vLLM's schedule()", clock.schedule_s),
            ("fairq_seconds", "Wall time in fairq's code (queue and hooks)", clock.fairq_s),
            ("step_seconds", "Engine step wall time (busy steps)", clock.step_s),
        ):
            fam = CounterMetricFamily(f"fairq_vllm_{key}", doc, labels=["name"])
            fam.add_metric([name], v)
            out.append(fam)
        return out


def _persistence(
    scheduler: Any, source: Any, policy: str, path: str | None, interval_s: float
) -> Any:
    """The :class:`fairq.vllm.persist.Persistence` of ``source`` (the
    scheduler's hooks) when a state file is configured (None otherwise),
    with the file's state already loaded (or, at a fresh start, a first
    save made). With data
    parallelism each engine keeps its own file, ``<state_file>.dp<rank>``."""
    if path is None:
        return None
    from fairq.vllm.persist import Persistence

    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    if int(getattr(parallel, "data_parallel_size", 1) or 1) > 1:
        path = f"{path}.dp{int(getattr(parallel, 'data_parallel_rank', 0) or 0)}"
    p = Persistence(source, path, policy, interval_s)
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(p.file.path), exist_ok=True)
    if not p.load():
        p.save()  # a fresh start: the file exists (and its path works) at once
    return p


def _dual_phase(scheduler: Any) -> Any:
    """The :class:`fairq.vllm.dualphase.DualPhasePolicy` of ``scheduler``
    when the options (``FAIRQ_VLLM_CONFIG`` file, ``FAIRQ_VLLM_OPTIONS``)
    hold ``dual_phase``; else None. A bad option raises here, naming it."""
    from fairq.vllm.tenants import load_options

    raw = load_options().get("dual_phase")
    if raw is None or raw is False:
        return None
    from fairq.vllm.dualphase import build_dual_phase

    fair = scheduler.fairq if hasattr(scheduler.fairq, "tenant_of") else None
    policy = build_dual_phase(scheduler, raw, fair=fair)
    import logging

    logging.getLogger("fairq.vllm").info(
        "fairq dual_phase: end-of-think token ids %s from %s; output_budget %d",
        sorted(policy.end_ids),
        policy.source,
        policy.output_budget,
    )
    return policy


def _adopt_vllm_logging() -> None:
    """Send fairq's log records (``fairq.*``: the state file, the version
    check) through vLLM's handlers, at vLLM's level, so they show in the
    server's log as vLLM's own lines do. Done once, only where vLLM has
    configured its ``vllm`` logger and nobody configured ``fairq``'s."""
    import logging

    ours = logging.getLogger("fairq")
    theirs = logging.getLogger("vllm")
    if ours.handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False


def _build(name: str) -> type:
    module, base_name = _BASES[name]
    try:
        base = getattr(importlib.import_module(module), base_name)
    except ImportError as e:
        raise ImportError(
            f"fairq.vllm.scheduler.{name} needs vLLM ({module}.{base_name}): {e}"
        ) from e

    class FairqSchedulerClass(base):  # type: ignore[misc, valid-type]
        #: fairq's hooks in the step, or None: the fair policy's state
        #: (:class:`fairq.vllm.fair.FairState`), or WFQ's settlement
        #: (:class:`fairq.vllm.wfq.WfqSettlement`); a class default too, for
        #: instances made without __init__.
        fairq: Any = None
        #: :class:`fairq.vllm.stats.StepClock` (None until ``__init__``)
        fairq_clock: Any = None
        #: the saved fairness state (:class:`fairq.vllm.persist.Persistence`)
        #: when the option ``state_file`` is set, else None
        fairq_persist: Any = None
        #: the dual-phase policy (:class:`fairq.vllm.dualphase.DualPhasePolicy`)
        #: when the option ``dual_phase`` is set, else None
        fairq_dualphase: Any = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            from fairq.vllm import install
            from fairq.vllm.compat import check_vllm

            _adopt_vllm_logging()
            check_vllm()
            install()
            # Cooperative: a vLLM class deriving from both fairq's scheduler
            # and another Scheduler subclass (e.g. one built with
            # ``AsyncScheduler`` as a second base) still runs every base's
            # ``__init__``.
            super().__init__(*args, **kwargs)
            self.fairq_policy = resolve_policy(self)
            if self.fairq_policy.value in FAIR_POLICIES:
                self.fairq = attach_fair_policy(self, self.fairq_policy.value)
            else:
                from fairq.vllm.tenants import STATE_KEYS, state_options

                options = resolve_options()
                check_queue_env_options(self.fairq_policy, options)
                state_file, interval_s = state_options(options)
                for key in (*STATE_KEYS, "dual_phase"):
                    options.pop(key, None)
                if self.fairq_policy is SchedulingPolicy.WFQ and "flow_key" not in options:
                    # one WFQ flow per tenant, resolved as for the fair policies
                    from fairq.vllm.tenants import FairOptions

                    tenant = FairOptions.from_mapping("vtc", {"tenant": options.pop("tenant", {})})
                    options["flow_key"] = tenant.tenant
                replace_queues(self, self.fairq_policy, **options)
                if self.fairq_policy is SchedulingPolicy.WFQ:
                    from fairq.vllm.wfq import WfqSettlement

                    self.fairq = WfqSettlement(self.waiting, getattr(self, "requests", None))
                    self.fairq_persist = _persistence(
                        self, self.fairq, "wfq", state_file, interval_s
                    )
            self.fairq_dualphase = _dual_phase(self)
            self._fairq_observe()

        def _fairq_observe(self) -> None:
            """Per-tenant tallies, the step clock and the metrics packer
            (:mod:`fairq.vllm.stats`)."""
            from fairq.vllm.stats import StatsPacker, StepClock, time_fairq
            from fairq.vllm.tenants import TenantResolver

            self.fairq_clock = StepClock()
            if self.fairq is not None:
                time_fairq(self.fairq, self.fairq_clock)
            if self.fairq_dualphase is not None:
                time_fairq(self.fairq_dualphase, self.fairq_clock)
            options = getattr(self.fairq, "options", None)
            resolver = getattr(options, "tenant", None) or TenantResolver()
            self.fairq_tally = TenantTally(resolver)
            self._fairq_packer = StatsPacker()

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            clock = self.fairq_clock
            if clock is None:  # an instance made without __init__
                return super().schedule(*args, **kwargs)
            started = clock.schedule_started()
            dual = self.fairq_dualphase
            if dual is not None:
                dual.before_schedule(self)
            output = super().schedule(*args, **kwargs)
            if dual is not None:
                dual.after_schedule(self, output)
            if self.fairq is not None:
                self.fairq.after_schedule(self, output)
                if self.fairq_persist is not None:
                    self.fairq_persist.step()
            self.fairq_tally.after_schedule(self, output)
            clock.schedule_done(started, bool(output.total_num_scheduled_tokens))
            return output

        def make_stats(self, *args: Any, **kwargs: Any) -> Any:
            stats = super().make_stats(*args, **kwargs)
            if stats is not None and self.fairq_clock is not None:
                self._fairq_packer.attach(stats, self._fairq_objects, self._fairq_families)
            return stats

        def _fairq_objects(self) -> list[tuple[str, Any]]:
            state = self.fairq
            dual = self.fairq_dualphase
            extra = [] if dual is None else [("vllm-dualphase", dual.queue)]
            if state is not None and hasattr(state, "schedulers"):
                pol = self.fairq_policy.value
                return [
                    (f"vllm-{pol}-tier{t}", s) for t, s in sorted(state.schedulers().items())
                ] + extra
            return [(f"vllm-{a.strip('_')}", getattr(self, a)) for a in ("waiting",)] + extra

        def _fairq_families(self) -> list[Any]:
            out = self.fairq_tally.families(self.fairq_policy.value, self.fairq_clock)
            if self.fairq_dualphase is not None:
                out += self.fairq_dualphase.families("vllm-dualphase", self)
            return out

        def update_from_output(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            dual = self.fairq_dualphase
            if self.fairq is None and dual is None:
                return super().update_from_output(scheduler_output, *args, **kwargs)
            snapshot = (
                None
                if self.fairq is None
                else self.fairq.output_snapshot(scheduler_output, self.requests)
            )
            dual_snap = (
                None if dual is None else dual.output_snapshot(scheduler_output, self.requests)
            )
            out = super().update_from_output(scheduler_output, *args, **kwargs)
            if self.fairq is not None:
                self.fairq.after_update(snapshot)
                if self.fairq_persist is not None:
                    self.fairq_persist.tick()
            if dual is not None:
                dual.after_update(dual_snap)
            return out

        def finish_requests(self, request_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if self.fairq is None:
                return super().finish_requests(request_ids, *args, **kwargs)
            if request_ids is None:
                # vLLM aborts every request (its shutdown in abort mode):
                # save the state first, the waiting tenants still backlogged
                if self.fairq_persist is not None:
                    self.fairq_persist.before_abort_all(bool(self.requests))
                ids = list(self.requests)
            elif isinstance(request_ids, str):
                ids = [request_ids]
            else:
                ids = list(request_ids)
            before = {rid: self.requests.get(rid) for rid in ids}
            out = super().finish_requests(None if request_ids is None else ids, *args, **kwargs)
            self.fairq.after_finish(before)
            return out

        def shutdown(self, *args: Any, **kwargs: Any) -> Any:
            # vLLM's EngineCore.shutdown() calls this when the engine core
            # exits; the final save never raises
            try:
                return super().shutdown(*args, **kwargs)
            finally:
                if self.fairq_persist is not None:
                    self.fairq_persist.shutdown()

    FairqSchedulerClass.__name__ = FairqSchedulerClass.__qualname__ = name
    FairqSchedulerClass.__module__ = __name__
    FairqSchedulerClass.__doc__ = (
        f"vLLM ``{base_name}`` whose waiting queues are fairq queues "
        f"(policy from ``${ENV_VAR}`` or vLLM's ``--scheduling-policy``; "
        "``vtc``/``lpm``/``dlpm`` run per-tenant fairness inside its step, "
        ":mod:`fairq.vllm.fair`)."
    )
    return FairqSchedulerClass


def __getattr__(name: str) -> Any:
    if name in _BASES:
        cls = _build(name)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
