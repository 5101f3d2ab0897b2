"""Plug fairq's policies into an installed SGLang (``fairq.sglang.install()``).

SGLang 0.5.23 has no registry for outside scheduling policies: the policy
object is built in one method, ``Scheduler.init_schedule_policy`` (as
``SchedulePolicy(name, tree_cache, ...)``), and the prefill adder class is
chosen by another, ``Scheduler.get_prefill_adder_class``, an explicit
extension point. :func:`install` wraps both methods of SGLang's
``Scheduler`` class (and journals its ``waiting_queue``, below): after
SGLang built its own policy, a scheduler whose policy is one of fairq's
gets :class:`FairSchedulePolicy` (a subclass of SGLang's
``SchedulePolicy``) instead, and adders of a fair-policy subclass of
SGLang's own adder. Nothing else of SGLang changes, and a scheduler with
one of SGLang's own policies runs SGLang's code unchanged.

So that fairq's per-step work follows what changed rather than the length of
the waiting list, a fair scheduler's ``waiting_queue`` becomes a
:class:`fairq.sglang.queue.WaitingList` (a ``list`` journaling membership
changes) and ``Scheduler.waiting_queue`` a class-level
:class:`~fairq.sglang.queue.TrackedAttribute`, which keeps SGLang's
``self.waiting_queue = [...]`` reassignments journaled (reads are not
intercepted; other schedulers' lists stay plain lists). :func:`uninstall`
removes it.

:func:`plugin` is SGLang's way in from its own command line: fairq registers
it as a general plugin (entry point group ``sglang.srt.plugins``, name
``fairq``), which SGLang loads at the start of each of its processes, its
scheduler processes included, so ``FAIRQ_SGLANG_POLICY=fairq-dlpm python -m
sglang.launch_server ...`` runs fairq's DLPM in every scheduler.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Any

from fairq import engineopts
from fairq.engineopts import FairOptions
from fairq.ledger.persist import rank_path
from fairq.sglang.queue import TrackedAttribute
from fairq.sglang.tenants import POLICIES, load_options, make_options, policy_key

__all__ = ["install", "uninstall", "is_fair_policy", "plugin", "POLICY_ENV_VAR"]

#: Environment variable naming the policy :func:`plugin` installs
#: (``fairq-fcfs``, ``fairq-lpm``, ``fairq-vtc``, ``fairq-dlpm``).
POLICY_ENV_VAR = "FAIRQ_SGLANG_POLICY"

_ORIGINAL = "__fairq_original__"
_SCHED_MOD = "sglang.srt.managers.scheduler"
_POLICY_MOD = "sglang.srt.managers.schedule_policy"
_QUEUE_ATTR = "waiting_queue"


def is_fair_policy(name: Any) -> bool:
    """Whether ``name`` is one of fairq's policy names (``fairq-dlpm``, ...)."""
    try:
        return (
            isinstance(name, str)
            and name.strip().lower().startswith("fairq-")
            and bool(policy_key(name))
        )
    except ValueError:
        return False


def _modules() -> tuple[Any, Any]:
    try:
        return importlib.import_module(_SCHED_MOD), importlib.import_module(_POLICY_MOD)
    except ImportError as e:
        raise ImportError(
            f"fairq.sglang.install() needs SGLang (module {_SCHED_MOD} could not be "
            f"imported: {e}); install sglang==0.5.23 (see .ci/sglang-requirements.txt)"
        ) from e


def build_policy(scheduler: Any, options: FairOptions) -> Any:
    """fairq's ``SchedulePolicy`` for an SGLang ``scheduler`` (its tree cache and
    priority settings), and the adder class that goes with it."""
    from fairq.sglang.fair import fair_adder_class, fair_schedule_policy_class

    pm = importlib.import_module(_POLICY_MOD)
    cls = fair_schedule_policy_class(pm.SchedulePolicy)
    return cls(
        options.policy,
        scheduler.tree_cache,
        getattr(scheduler, "enable_hierarchical_cache", False),
        getattr(scheduler, "enable_priority_scheduling", False),
        getattr(scheduler, "schedule_low_priority_values_first", False),
        options=options,
        **_state_place(scheduler, options),
    ), fair_adder_class


def _state_place(scheduler: Any, options: FairOptions) -> dict[str, Any]:
    """Where ``scheduler`` keeps the saved state: with data parallelism each
    data-parallel rank its own file, ``<state_file>.dp<rank>``; of the
    tensor-parallel ranks (which make the same decisions) rank 0 saves, the
    others only load."""
    path = options.state_file
    if path is None:
        return {}
    dp_size = int(getattr(getattr(scheduler, "server_args", None), "dp_size", 1) or 1)
    path = rank_path(path, dp_size, int(getattr(scheduler, "dp_rank", 0) or 0))
    return {"state_path": path, "saves": int(getattr(scheduler, "tp_rank", 0) or 0) == 0}


def install(policy: str | None = None, **options: Any) -> list[str]:
    """Make SGLang's schedulers built from now on (in this process) able to run
    fairq's policies: ``fairq-fcfs``, ``fairq-lpm``, ``fairq-vtc``,
    ``fairq-dlpm``.

    With ``policy`` given, every scheduler runs it, whatever its
    ``schedule_policy``; without, a scheduler whose ``schedule_policy`` is a
    fairq name runs that one (SGLang's CLI offers only its own names, so
    that is for ``ServerArgs`` built in code) and the others run SGLang's.
    ``options``: the policy's options (:func:`fairq.sglang.tenants.make_options`:
    ``quantum``, ``w_e``, ``tenant_weights``, ``tenant``, ...); none given:
    ``$FAIRQ_SGLANG_CONFIG`` / ``$FAIRQ_SGLANG_OPTIONS``. Options are
    validated now (each error names its field), before anything is patched.

    Idempotent; call it before the scheduler is built (in the scheduler's
    process). Returns the dotted names it patched. ``ImportError`` with a
    clear message if SGLang is not installed.
    """
    raw = dict(options) if options else load_options()
    fixed = make_options(policy, raw) if policy is not None else None
    if policy is None:
        for name in POLICIES:  # validate for every name
            make_options(name, {k: v for k, v in raw.items() if k in _common(name, raw)})
    sm, pm = _modules()
    sched_cls = sm.Scheduler
    init_orig = getattr(sched_cls.init_schedule_policy, _ORIGINAL, sched_cls.init_schedule_policy)
    adder_orig = getattr(
        sched_cls.get_prefill_adder_class, _ORIGINAL, sched_cls.get_prefill_adder_class
    )

    def init_schedule_policy(self: Any) -> None:
        name = getattr(self, "schedule_policy", None)
        if fixed is not None:
            opts = fixed
        elif is_fair_policy(name):
            key = policy_key(name)
            opts = make_options(key, {k: raw[k] for k in _common(key, raw)})
        else:
            self._fairq_adder_cls = None
            init_orig(self)
            return
        # SGLang's own setup (delayers, trackers) with a name it knows; its
        # policy object is then replaced by fairq's
        self.schedule_policy = "fcfs"
        try:
            init_orig(self)
        finally:
            self.schedule_policy = name
        self.policy, make_adder = build_policy(self, opts)
        if isinstance(sched_cls.__dict__.get(_QUEUE_ATTR), TrackedAttribute):
            TrackedAttribute.track(self, _QUEUE_ATTR)  # fairq reads what changed
        base = adder_orig(self)
        cls = make_adder(base, pm.AddReqResult)
        self._fairq_adder_cls = type(cls.__name__, (cls,), {"fairq": self.policy.fairq})

    def get_prefill_adder_class(self: Any) -> type:
        cls = getattr(self, "_fairq_adder_cls", None)
        return cls if cls is not None else adder_orig(self)

    if not any(_QUEUE_ATTR in vars(c) for c in sched_cls.__mro__):
        # assignments to ``scheduler.waiting_queue`` journaled (fairq.sglang.queue)
        setattr(sched_cls, _QUEUE_ATTR, TrackedAttribute(_QUEUE_ATTR))
    labels = _install_labels()
    setattr(init_schedule_policy, _ORIGINAL, init_orig)
    setattr(get_prefill_adder_class, _ORIGINAL, adder_orig)
    sched_cls.init_schedule_policy = init_schedule_policy
    sched_cls.get_prefill_adder_class = get_prefill_adder_class
    return [
        f"{_SCHED_MOD}.Scheduler.init_schedule_policy",
        f"{_SCHED_MOD}.Scheduler.get_prefill_adder_class",
        f"{_SCHED_MOD}.Scheduler.{_QUEUE_ATTR}",
        *labels,
    ]


def _install_labels() -> list[str]:
    """:func:`fairq.sglang.labels.install` (requests' ``custom_labels`` to the
    scheduler's ``Req``); where this SGLang lacks its extension points, a
    warning, and the ``custom_labels`` tenant source finds nothing."""
    try:
        from fairq.sglang import labels

        return labels.install()
    except (ImportError, AttributeError, TypeError) as e:
        warnings.warn(
            f"fairq.sglang: custom_labels will not reach SGLang's scheduler ({e})",
            RuntimeWarning,
            stacklevel=3,
        )
        return []


def _common(name: str, raw: dict[str, Any]) -> set[str]:
    """The keys of ``raw`` that policy ``name`` takes or every policy takes
    (a policy's own option given for another policy is not an error when
    the policy is chosen per scheduler)."""
    mine = set(engineopts.POLICIES[name][1])
    every = {"tenant_weights", "tenant", "policy"}
    theirs = {k for p in POLICIES for k in engineopts.POLICIES[p][1]}
    return {k for k in raw if k in mine or k in every or k not in theirs}


def uninstall() -> list[str]:
    """Restore SGLang's own methods where :func:`install` replaced them."""
    try:
        sm = importlib.import_module(_SCHED_MOD)
    except ImportError:
        return []
    done = []
    for name in ("init_schedule_policy", "get_prefill_adder_class"):
        current = getattr(sm.Scheduler, name)
        original = getattr(current, _ORIGINAL, None)
        if original is not None:
            setattr(sm.Scheduler, name, original)
            done.append(f"{_SCHED_MOD}.Scheduler.{name}")
    labels = sys.modules.get("fairq.sglang.labels")
    if labels is not None:
        done += labels.uninstall()
    if isinstance(vars(sm.Scheduler).get(_QUEUE_ATTR), TrackedAttribute):
        # schedulers built meanwhile keep their WaitingList (a list) as is
        delattr(sm.Scheduler, _QUEUE_ATTR)
        done.append(f"{_SCHED_MOD}.Scheduler.{_QUEUE_ATTR}")
    return done


def plugin() -> None:
    """SGLang's general-plugin entry point (group ``sglang.srt.plugins``,
    name ``fairq``; SGLang calls it early in every process it starts).

    With ``$FAIRQ_SGLANG_POLICY`` set, :func:`install` that policy for every
    scheduler of the process, its options from ``$FAIRQ_SGLANG_CONFIG`` /
    ``$FAIRQ_SGLANG_OPTIONS``; unset, nothing (SGLang runs as if fairq were
    not installed). A bad policy or option ends the process with
    ``SystemExit`` and a message naming the field: SGLang catches a plugin's
    ``Exception``, logs it and would serve its own policy instead, so the
    server must not start.

    In the process that serves HTTP, with ``limits`` among the options, it
    also adds fairq's front door to SGLang's app
    (:func:`fairq.sglang.door.install_door`), with or without a policy.
    """
    from fairq.sglang.door import install_door

    try:
        install_door()
    except (ValueError, TypeError) as e:
        raise SystemExit(f"fairq: {e}") from None
    name = os.environ.get(POLICY_ENV_VAR, "").strip()
    if not name:
        return
    try:
        install(name)
    except (ValueError, TypeError, ImportError) as e:
        raise SystemExit(f"fairq: {POLICY_ENV_VAR}={name!r}: {e}") from None
