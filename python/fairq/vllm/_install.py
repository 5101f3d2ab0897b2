"""Plug fairq's queues into an installed vLLM (``fairq.vllm.install()``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from fairq.vllm._base import RequestQueue, SchedulingPolicy

__all__ = ["install", "uninstall", "PATCH_MODULES"]

#: Modules whose global ``create_request_queue`` vLLM's schedulers call.
PATCH_MODULES = (
    "vllm.v1.core.sched.request_queue",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.sched.async_scheduler",
)

_ORIGINAL = "__fairq_original__"


def _make_factory(
    original: Callable[..., Any], override: SchedulingPolicy | None, options: dict[str, Any]
) -> Callable[..., Any]:
    from fairq.vllm import as_policy, create_request_queue

    def fairq_create_request_queue(policy: Any) -> Any:
        """fairq's queues for the policies fairq knows; vLLM's for the rest."""
        if override is not None:
            return create_request_queue(override, **options)
        try:
            p = as_policy(policy)
        except ValueError:
            return original(policy)  # e.g. a newer vLLM policy fairq lacks
        return create_request_queue(p)

    setattr(fairq_create_request_queue, _ORIGINAL, original)
    return fairq_create_request_queue


def install(policy: SchedulingPolicy | str | None = None, **options: Any) -> list[str]:
    """Make an installed vLLM use fairq's request queues.

    1. Registers :class:`fairq.vllm.RequestQueue` (hence every fairq queue) as
       a virtual subclass of vLLM's ``RequestQueue`` ABC.
    2. Replaces ``create_request_queue`` in each module of
       :data:`PATCH_MODULES` that defines it (the scheduler looks the name up
       in its own module) with a function returning fairq's queue for the
       policy (``fcfs`` / ``priority``; a policy fairq does not know falls
       through to vLLM's original). With ``policy`` given, every queue is of
       that fairq policy instead (e.g. ``install("wfq")``), built with
       ``options`` (e.g. ``install("wfq", virtual_clock="finish")``); options
       need an explicit ``policy`` and are checked here by building one queue
       (a bad option raises now, not inside vLLM's scheduler).

    Idempotent; call it before the engine builds its scheduler. Returns the
    dotted names it registered or patched. Raises ``ImportError`` with a
    clear message if vLLM is not installed. :func:`uninstall` undoes step 2.
    """
    from fairq.vllm import as_policy

    override = as_policy(policy) if policy is not None else None
    if options:
        if override is None:
            raise TypeError(
                f"fairq.vllm.install(): queue options {sorted(options)} need an explicit "
                "policy, e.g. install('wfq', virtual_clock='finish')"
            )
        from fairq.vllm import create_request_queue

        create_request_queue(override, **options)  # validate before patching anything
    try:
        rq = importlib.import_module("vllm.v1.core.sched.request_queue")
    except ImportError as e:
        raise ImportError(
            "fairq.vllm.install() needs vLLM (module vllm.v1.core.sched.request_queue "
            f"could not be imported: {e}); install vllm, or use fairq.vllm's queues directly"
        ) from e
    done: list[str] = []
    base = getattr(rq, "RequestQueue", None)
    if base is not None and hasattr(base, "register"):
        base.register(RequestQueue)  # idempotent
        done.append(
            "vllm.v1.core.sched.request_queue.RequestQueue.register(fairq.vllm.RequestQueue)"
        )
    for name in PATCH_MODULES:
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = importlib.import_module(name)
            except ImportError:
                continue
        current = getattr(mod, "create_request_queue", None)
        if current is None:
            continue
        original = getattr(current, _ORIGINAL, current)
        mod.create_request_queue = _make_factory(original, override, dict(options))  # type: ignore[attr-defined]
        done.append(f"{name}.create_request_queue")
    return done


def uninstall() -> list[str]:
    """Restore vLLM's own ``create_request_queue`` where :func:`install` replaced it.

    The virtual-subclass registration cannot be undone (``abc`` has no
    unregister) and is harmless. Returns the dotted names restored.
    """
    done: list[str] = []
    for name in PATCH_MODULES:
        mod = sys.modules.get(name)
        current = getattr(mod, "create_request_queue", None) if mod is not None else None
        original = getattr(current, _ORIGINAL, None)
        if mod is not None and original is not None:
            mod.create_request_queue = original  # type: ignore[attr-defined]
            done.append(f"{name}.create_request_queue")
    return done
