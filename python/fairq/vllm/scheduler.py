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

The fair policies (:data:`fairq.vllm.tenants.FAIR_POLICIES`: every policy
of :data:`fairq.sched.POLICY_INFO` but ``fcfs``) run on the engine-neutral
:class:`fairq.ledger.Ledger` (:mod:`fairq.vllm.fair` translates vLLM's
events). The classes hold their step hooks as one list
(``scheduler.fairq_hooks``, :class:`fairq.ledger.Hooks`: the dual-phase
policy, the fair policy or WFQ's settlement, the saved state, the tally),
and run every fairq entry point under one lock (the ledger's).

With the option ``state_file`` (and ``state_interval_s``) the policy's
fairness state survives a restart: :mod:`fairq.ledger.persist`. Under every
policy the classes time fairq's code and the engine step, count each
tenant's requests, prompt tokens and prefix hits (:class:`TenantTally`), and
ship fairq's metrics with vLLM's scheduler statistics to the server's
``/metrics`` (``make_stats``, :mod:`fairq.vllm.stats`). When the engine goes
idle (no unfinished request) the state is saved if it changed and the
step's statistics carry the metrics as they are then; while it is idle a
background :class:`fairq.ledger.Flusher` saves when due and sends changed
metrics through the engine core's output queue. Building one on an
untested vLLM raises (:mod:`fairq.vllm.compat`).

vLLM is imported only when one of the class names is first looked up, so
importing this module is cheap and works without vLLM (the names then raise
``ImportError`` on access).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from typing import Any

from fairq.vllm._base import RequestQueue, SchedulingPolicy
from fairq.vllm.stats import TenantTally
from fairq.vllm.tenants import FAIR_POLICIES, OPTIONS_ENV_VAR

__all__ = [
    "ENV_VAR",
    "OPTIONS_ENV_VAR",
    "resolve_options",
    "check_queue_env_options",
    "QUEUE_ATTRS",
    "replace_queues",
    "resolve_policy",
    "attach_fair_policy",
    "fair_options",
    "queue_options",
    "FairPolicyName",
    "TenantTally",
]

# FairqScheduler / FairqAsyncScheduler are built on first access (they need
# vLLM), so they are not in __all__.

#: Environment variable naming the fairq policy of the waiting queues.
ENV_VAR = "FAIRQ_VLLM_POLICY"

#: Options the front door reads (:mod:`fairq.vllm.door`), which a queue
#: policy accepts and ignores.
DOOR_KEYS = ("limits", "tenant_weights")
# OPTIONS_ENV_VAR ("FAIRQ_VLLM_OPTIONS", a JSON object of options) lives in
# fairq.vllm.tenants (which reads it) and is re-exported here.
#: Scheduler attributes holding waiting queues (whichever exist are replaced).
QUEUE_ATTRS = ("waiting", "kv_holding_waiting", "skipped_waiting")

_BASES = {
    "FairqScheduler": ("vllm.v1.core.sched.scheduler", "Scheduler"),
    "FairqAsyncScheduler": ("vllm.v1.core.sched.async_scheduler", "AsyncScheduler"),
}


class FairPolicyName(str):
    """A fair policy of :data:`fairq.vllm.tenants.FAIR_POLICIES` that
    :class:`SchedulingPolicy` does not list (one added to the core since):
    a string with the enum's ``value``."""

    @property
    def value(self) -> str:
        return str(self)


def resolve_policy(scheduler: Any) -> Any:
    """The fairq policy for ``scheduler``: ``$FAIRQ_VLLM_POLICY`` or vLLM's own
    (a :class:`SchedulingPolicy`, or a :class:`FairPolicyName` for a fair
    policy the enum does not list).

    An unknown name in the environment variable is a ``ValueError``.
    """
    from fairq.vllm import as_policy

    name = os.environ.get(ENV_VAR, "").strip()
    if name:
        try:
            return as_policy(name.lower())
        except ValueError:
            if name.lower() in FAIR_POLICIES:
                return FairPolicyName(name.lower())
            known = ", ".join(dict.fromkeys([*(p.value for p in SchedulingPolicy), *FAIR_POLICIES]))
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
    saved state's ``state_file`` / ``state_interval_s``; for every one, the
    front door's ``limits`` and ``tenant_weights`` (:mod:`fairq.vllm.door`
    validates and reads them)."""
    from fairq.vllm import QUEUE_OPTIONS
    from fairq.vllm.dualphase import OPTION as DUAL_PHASE
    from fairq.vllm.tenants import STATE_KEYS

    allowed = (*QUEUE_OPTIONS[policy], DUAL_PHASE, *DOOR_KEYS)
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

    options = fair_options(policy)
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


def fair_options(policy: str) -> Any:
    """The :class:`fairq.vllm.tenants.FairOptions` of fair policy ``policy``
    from the environment (:func:`fairq.vllm.tenants.load_options`; its
    ``policy`` and ``dual_phase`` keys are read elsewhere). A bad option
    raises ``ValueError``/``TypeError`` naming the field."""
    from fairq.vllm.tenants import FairOptions, load_options

    raw = load_options()
    raw.pop("policy", None)
    raw.pop("dual_phase", None)  # fairq.vllm.dualphase's, read by the scheduler class
    return FairOptions.from_mapping(policy, raw)


def queue_options(policy: SchedulingPolicy) -> tuple[dict[str, Any], str | None, float]:
    """``(options, state_file, state_interval_s)`` of queue policy ``policy``
    (``fcfs``, ``priority``, ``wfq``) from ``$FAIRQ_VLLM_OPTIONS``: the
    queue's constructor options (``wfq``: one flow per tenant unless
    ``flow_key`` is given) and the saved state's. A bad option raises,
    naming the field."""
    from fairq.vllm.tenants import STATE_KEYS, state_options

    options = resolve_options()
    check_queue_env_options(policy, options)
    state_file, interval_s = state_options(options)
    for key in (*STATE_KEYS, "dual_phase", *DOOR_KEYS):
        options.pop(key, None)
    if policy is SchedulingPolicy.WFQ and "flow_key" not in options:
        # one WFQ flow per tenant, resolved as for the fair policies
        from fairq.vllm.tenants import FairOptions

        tenant = FairOptions.from_mapping("vtc", {"tenant": options.pop("tenant", {})})
        options["flow_key"] = tenant.tenant
    return options, state_file, interval_s


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
    from fairq.ledger.persist import Persistence, rank_path

    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    ranks = int(getattr(parallel, "data_parallel_size", 1) or 1)
    path = rank_path(path, ranks, int(getattr(parallel, "data_parallel_rank", 0) or 0))
    p = Persistence(source, path, policy, interval_s)
    p.start()
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


def _queue_policy(scheduler: Any) -> Any:
    """Set up a queue policy (``fcfs``, ``priority``, ``wfq``): replace the
    waiting queues; for ``wfq``, its settlement (returned: the scheduler's
    ``fairq``) and saved state."""
    policy = scheduler.fairq_policy
    options, state_file, interval_s = queue_options(policy)
    replace_queues(scheduler, policy, **options)
    if policy is not SchedulingPolicy.WFQ:
        return None
    from fairq.vllm.wfq import WfqSettlement

    settlement = WfqSettlement(scheduler.waiting, getattr(scheduler, "requests", None))
    scheduler.fairq_persist = _persistence(scheduler, settlement, "wfq", state_file, interval_s)
    return settlement


#: Seconds between two rounds of the background flusher (at most; the
#: state file's own ``state_interval_s`` when shorter, but not below
#: :data:`MIN_FLUSH_INTERVAL_S`).
FLUSH_INTERVAL_S = 1.0
MIN_FLUSH_INTERVAL_S = 0.05


def _scheduler_hooks(s: Any) -> Any:
    """The scheduler's step hooks, in the order they run: the dual-phase
    policy, the fair policy (or WFQ's settlement), the saved state, the
    per-tenant tally."""
    from fairq.ledger import Hooks, PersistHook

    hooks = Hooks([s.fairq_dualphase, s.fairq])
    if s.fairq_persist is not None:
        hooks.add(PersistHook(s.fairq_persist))
    hooks.add(s.fairq_tally)
    return hooks


def _build(name: str) -> type:
    module, base_name = _BASES[name]
    try:
        base = getattr(importlib.import_module(module), base_name)
    except ImportError as e:
        raise ImportError(
            f"fairq.vllm.scheduler.{name} needs vLLM ({module}.{base_name}): {e}"
        ) from e
    cls = type(name, (_FairqMixin, base), {"__module__": __name__})
    cls.__qualname__ = name
    cls.__doc__ = (
        f"vLLM ``{base_name}`` whose waiting queues are fairq queues "
        f"(policy from ``${ENV_VAR}`` or vLLM's ``--scheduling-policy``; "
        "the fair policies run per-tenant fairness inside its step on the "
        "ledger, :mod:`fairq.vllm.fair`)."
    )
    return cls


class _FairqMixin:
    """fairq's part of the scheduler classes (before vLLM's class in the MRO).

    Every entry point that reaches fairq (``add_request``, ``schedule``,
    ``update_from_output``, ``finish_requests``, ``make_stats``,
    ``shutdown``) runs under one lock (the ledger's), which the background
    flusher takes too. The step hooks are one list (:attr:`fairq_hooks`,
    :class:`fairq.ledger.Hooks`). When no unfinished request is left, the
    hooks' ``idle()`` runs (the state file is saved if it changed) and the
    step's ``SchedulerStats`` gets fairq's families as they are then.
    """

    #: fairq's fair-policy or WFQ hook (:class:`fairq.vllm.fair.FairState`,
    #: :class:`fairq.vllm.wfq.WfqSettlement`), or None; class defaults too,
    #: for instances made without __init__.
    fairq: Any = None
    #: :class:`fairq.vllm.stats.StepClock` (None until ``__init__``)
    fairq_clock: Any = None
    #: the saved fairness state (:class:`fairq.ledger.Persistence`) or None
    fairq_persist: Any = None
    #: the dual-phase policy (:class:`fairq.vllm.dualphase.DualPhasePolicy`) or None
    fairq_dualphase: Any = None
    #: the step hooks (:class:`fairq.ledger.Hooks`), None until ``__init__``
    fairq_hooks: Any = None
    #: the background flusher (:class:`fairq.ledger.Flusher`) or None
    fairq_flusher: Any = None
    _fairq_lock: Any = contextlib.nullcontext()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from fairq.vllm import install
        from fairq.vllm.compat import check_vllm
        from fairq.vllm.stats import EngineCoreLink

        _adopt_vllm_logging()
        check_vllm()
        install()
        link = EngineCoreLink.find()
        # Cooperative: a vLLM class deriving from both fairq's scheduler
        # and another Scheduler subclass still runs every base's __init__.
        super().__init__(*args, **kwargs)
        self.fairq_policy = resolve_policy(self)
        if self.fairq_policy.value in FAIR_POLICIES:
            self.fairq = attach_fair_policy(self, self.fairq_policy.value)
        else:
            self.fairq = _queue_policy(self)
        ledger = getattr(self.fairq, "ledger", None)
        self._fairq_lock = ledger.lock if ledger is not None else threading.RLock()
        self.fairq_dualphase = _dual_phase(self)
        self._fairq_observe()
        self.fairq_hooks = _scheduler_hooks(self)
        self._fairq_link = link
        self._fairq_start_flusher()

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

    def _fairq_start_flusher(self) -> None:
        """A background flusher when there is something to flush: a state
        file, or a server's ``/metrics`` (an engine core to send through)."""
        persist = self.fairq_persist
        if persist is None and self._fairq_link.queue is None:
            return
        from fairq.ledger import Flusher, PersistHook

        interval = FLUSH_INTERVAL_S
        if persist is not None:
            interval = max(min(interval, persist.interval_s), MIN_FLUSH_INTERVAL_S)
        self.fairq_flusher = Flusher(
            self._fairq_lock, interval, [Flusher.weak_job(self, "_fairq_flush")]
        ).start()
        for hook in self.fairq_hooks:
            if isinstance(hook, PersistHook):  # the idle save out of the step
                hook.wake = self.fairq_flusher.wake

    def _fairq_flush(self) -> None:
        """The background flusher's round (under the lock), while the engine
        is idle (a stepping engine saves and ships from its hooks): the
        state file if it changed, and fairq's families to ``/metrics`` if
        they changed since last sent. Woken at once when the engine goes
        idle (the save leaves the engine's step)."""
        if self.has_unfinished_requests():  # type: ignore[attr-defined]
            return
        persist = self.fairq_persist
        if persist is not None:
            persist.flush()  # if it changed: idle, so at most once a round
        if self._fairq_link.queue is not None:
            packer = self._fairq_packer
            if packer.render(self._fairq_objects, self._fairq_families) != packer.last_payload:
                stats = super().make_stats()  # type: ignore[misc]
                if stats is not None and packer.attach(
                    stats, self._fairq_objects, self._fairq_families, force=True
                ):
                    self._fairq_link.send(stats)

    def _fairq_idle(self, outputs: Any = None) -> None:
        """No unfinished request is left: the hooks' ``idle()``, and the
        families as they are now on this step's ``SchedulerStats``."""
        try:
            self.fairq_hooks.idle()
            for eco in (outputs or {}).values():
                stats = getattr(eco, "scheduler_stats", None)
                if stats is not None:
                    self._fairq_packer.attach(
                        stats, self._fairq_objects, self._fairq_families, force=True
                    )
        except Exception:  # noqa: BLE001 (never raise in the engine's step)
            return

    def add_request(self, *args: Any, **kwargs: Any) -> Any:
        with self._fairq_lock:
            return super().add_request(*args, **kwargs)  # type: ignore[misc]

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        clock = self.fairq_clock
        if clock is None:  # an instance made without __init__
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        with self._fairq_lock:
            started = clock.schedule_started()
            hooks = self.fairq_hooks
            hooks.before_schedule(self)
            output = super().schedule(*args, **kwargs)  # type: ignore[misc]
            hooks.after_schedule(self, output)
            clock.schedule_done(started, bool(output.total_num_scheduled_tokens))
            return output

    def make_stats(self, *args: Any, **kwargs: Any) -> Any:
        with self._fairq_lock:
            stats = super().make_stats(*args, **kwargs)  # type: ignore[misc]
            if stats is not None and self.fairq_clock is not None:
                self._fairq_packer.attach(stats, self._fairq_objects, self._fairq_families)
            return stats

    def _fairq_objects(self) -> list[tuple[str, Any]]:
        state = self.fairq
        dual = self.fairq_dualphase
        extra = [] if dual is None else [("vllm-dualphase", dual.queue)]
        ledger = getattr(state, "ledger", None)
        if ledger is not None:
            return ledger.metric_objects() + extra
        return [("vllm-waiting", self.waiting)] + extra  # type: ignore[attr-defined]

    def _fairq_families(self) -> list[Any]:
        out = self.fairq_tally.families(self.fairq_policy.value, self.fairq_clock)
        if self.fairq_dualphase is not None:
            out += self.fairq_dualphase.families("vllm-dualphase", self)
        return out

    def update_from_output(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        hooks = self.fairq_hooks
        if hooks is None:
            return super().update_from_output(scheduler_output, *args, **kwargs)  # type: ignore[misc]
        with self._fairq_lock:
            snaps = hooks.output_snapshot(scheduler_output, self.requests)  # type: ignore[attr-defined]
            out = super().update_from_output(scheduler_output, *args, **kwargs)  # type: ignore[misc]
            hooks.after_update(snaps)
            if not self.has_unfinished_requests():  # type: ignore[attr-defined]
                self._fairq_idle(out)
            return out

    def finish_requests(self, request_ids: Any, *args: Any, **kwargs: Any) -> Any:
        hooks = self.fairq_hooks
        if hooks is None:
            return super().finish_requests(request_ids, *args, **kwargs)  # type: ignore[misc]
        with self._fairq_lock:
            requests = self.requests  # type: ignore[attr-defined]
            if request_ids is None:
                ids = list(requests)
            elif isinstance(request_ids, str):
                ids = [request_ids]
            else:
                ids = list(request_ids)
            # vLLM aborts every request (its shutdown in abort mode): the
            # saved state first, the waiting tenants still backlogged
            hooks.before_finish(self, None if request_ids is None else ids)
            before = {rid: requests.get(rid) for rid in ids}
            out = super().finish_requests(  # type: ignore[misc]
                None if request_ids is None else ids, *args, **kwargs
            )
            hooks.after_finish(before)
            if not self.has_unfinished_requests():  # type: ignore[attr-defined]
                self._fairq_idle()
            return out

    def shutdown(self, *args: Any, **kwargs: Any) -> Any:
        # vLLM's EngineCore.shutdown() calls this when the engine core
        # exits; the final save never raises
        try:
            return super().shutdown(*args, **kwargs)  # type: ignore[misc]
        finally:
            if self.fairq_flusher is not None:
                self.fairq_flusher.stop()
            if self.fairq_hooks is not None:
                with self._fairq_lock:
                    self.fairq_hooks.shutdown()


def __getattr__(name: str) -> Any:
    if name in _BASES:
        cls = _build(name)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
