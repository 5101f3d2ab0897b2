"""The step hooks an engine's scheduler calls, as one declared protocol.

An engine integration's scheduler holds a list of hook objects (the fair
policy's event translation over the :class:`~fairq.ledger.Ledger`, the saved
state's :class:`PersistHook`, the per-tenant tally, vLLM's dual-phase policy,
WFQ's settlement...) and calls every hook at each point of its step, in list
order, through :class:`Hooks`. A hook implements the points it cares about;
:class:`StepHook` gives the others as no-ops.

The points (vLLM's names; another engine calls those it has):

* ``before_schedule(scheduler)``: the step starts;
* ``after_schedule(scheduler, output)``: the engine decided what runs;
* ``output_snapshot(scheduler_output, requests)`` before the engine
  processes the step's output, and ``after_update(snapshot)`` after it,
  with what the hook's own ``output_snapshot`` returned;
* ``before_finish(scheduler, request_ids)`` and ``after_finish(before)``
  around an abort (``request_ids`` None: every request; ``before``: each
  id's request as it was before, None if unknown to the engine);
* ``idle()``: the engine has no request left (flush what was deferred);
* ``shutdown()``: the engine shuts down.

A hook must never raise for a well-formed request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["StepHook", "StepHookProtocol", "Hooks", "PersistHook", "LedgerView"]


@runtime_checkable
class StepHookProtocol(Protocol):
    """What :class:`Hooks` calls (see the module doc)."""

    def before_schedule(self, scheduler: Any) -> None: ...
    def after_schedule(self, scheduler: Any, output: Any) -> None: ...
    def output_snapshot(self, scheduler_output: Any, requests: Mapping[str, Any]) -> Any: ...
    def after_update(self, snapshot: Any) -> None: ...
    def before_finish(self, scheduler: Any, request_ids: list[str] | None) -> None: ...
    def after_finish(self, before: Mapping[str, Any]) -> None: ...
    def idle(self) -> None: ...
    def shutdown(self) -> None: ...


class StepHook:
    """A base whose every step point is a no-op: a hook overrides the ones
    it needs (any object with these methods will do)."""

    def before_schedule(self, scheduler: Any) -> None:
        """The step starts."""

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """The engine decided what runs this step (``output``)."""

    def output_snapshot(self, scheduler_output: Any, requests: Mapping[str, Any]) -> Any:
        """Before the step's output is processed: what :meth:`after_update` needs."""
        return None

    def after_update(self, snapshot: Any) -> None:
        """The step's output was processed; ``snapshot`` is :meth:`output_snapshot`'s."""

    def before_finish(self, scheduler: Any, request_ids: list[str] | None) -> None:
        """Requests are about to be aborted (None: every request)."""

    def after_finish(self, before: Mapping[str, Any]) -> None:
        """Requests were aborted; ``before`` maps each id to its request (or None)."""

    def idle(self) -> None:
        """The engine has no request left."""

    def shutdown(self) -> None:
        """The engine shuts down."""


class Hooks:
    """The hook objects of one engine scheduler, called in order."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self.items: list[Any] = [h for h in items if h is not None]

    def add(self, hook: Any) -> None:
        """Append ``hook`` (None is ignored)."""
        if hook is not None:
            self.items.append(hook)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def before_schedule(self, scheduler: Any) -> None:
        for h in self.items:
            h.before_schedule(scheduler)

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        for h in self.items:
            h.after_schedule(scheduler, output)

    def output_snapshot(self, scheduler_output: Any, requests: Mapping[str, Any]) -> list[Any]:
        return [h.output_snapshot(scheduler_output, requests) for h in self.items]

    def after_update(self, snapshots: list[Any]) -> None:
        for h, snap in zip(self.items, snapshots, strict=True):
            h.after_update(snap)

    def before_finish(self, scheduler: Any, request_ids: list[str] | None) -> None:
        for h in self.items:
            h.before_finish(scheduler, request_ids)

    def after_finish(self, before: Mapping[str, Any]) -> None:
        for h in self.items:
            h.after_finish(before)

    def idle(self) -> None:
        for h in self.items:
            h.idle()

    def shutdown(self) -> None:
        for h in self.items:
            h.shutdown()


class PersistHook(StepHook):
    """The saved state's points in the step (``persistence``: a
    :class:`fairq.ledger.persist.Persistence`): a save check at the end of
    ``schedule()`` (which also ends a pre-abort hold) and after each
    output, a save before an abort of every request (``has_requests()``
    of the scheduler says whether any is queued), one when the engine goes
    idle (in the caller, or, with :attr:`wake` set, in a flusher's thread
    woken at once), and the final one at shutdown."""

    def __init__(self, persistence: Any) -> None:
        self.persistence = persistence
        #: when set (a :meth:`fairq.ledger.Flusher.wake`), the idle save is
        #: left to the flusher's thread, out of the engine's step
        self.wake: Any = None

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        self.persistence.step()

    def after_update(self, snapshot: Any) -> None:
        self.persistence.tick()

    def before_finish(self, scheduler: Any, request_ids: list[str] | None) -> None:
        if request_ids is None:
            has = getattr(scheduler, "requests", None)
            self.persistence.before_abort_all(bool(has) if has is not None else True)

    def idle(self) -> None:
        if self.wake is not None:
            self.wake()
        else:
            self.persistence.flush()

    def shutdown(self) -> None:
        self.persistence.shutdown()


class LedgerView:
    """What an engine's translator (which holds a :class:`~fairq.ledger.Ledger`
    as ``ledger``) exposes of it by the names the integrations use: the
    book's maps, the change counter the saved state reads, the schedulers,
    the service, and the saved state's source methods."""

    ledger: Any

    @property
    def tenant_of(self) -> dict[str, str]:
        """Tenant of each request fairq holds."""
        return self.ledger.tenant_of

    @property
    def waiting(self) -> dict[str, Any]:
        """Waiting in fairq (arrival order)."""
        return self.ledger.waiting

    @property
    def version(self) -> int:
        """Counts the ledger's changes (the saved state's dirty check)."""
        return int(self.ledger.version)

    def schedulers(self) -> dict[int, Any]:
        """The fairq local scheduler of each priority tier (0 without tiers)."""
        return self.ledger.schedulers()

    def service(self, tenant: str) -> float:
        """Weighted tokens served to ``tenant`` (summed over tiers)."""
        return float(self.ledger.service(tenant))

    def persisted_options(self) -> dict[str, Any]:
        """:meth:`fairq.ledger.Ledger.persisted_options`."""
        return self.ledger.persisted_options()

    def persisted(self) -> dict[str, Any]:
        """:meth:`fairq.ledger.Ledger.persisted`."""
        return self.ledger.persisted()

    def restore(self, saved: Any) -> None:
        """:meth:`fairq.ledger.Ledger.restore` (before any request)."""
        self.ledger.restore(saved)
