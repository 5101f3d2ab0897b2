"""Work done at a bounded interval whether or not the engine steps.

An engine refreshes fairq's metrics and saves its state file from its step
hooks; an engine that goes idle steps no more, so without this thread what
happened in its last interval would wait for the next request. A
:class:`Flusher` is a daemon thread that runs its jobs every ``interval_s``
seconds under the ledger's lock (``lock``: the Rust objects must not be read
while the engine changes them; the engine's scheduler holds the same lock
while it calls into fairq). A job that raises is logged (once until it
works again) and never stops the thread or the engine; a job that returns
:data:`Flusher.DONE` is dropped, and the thread ends when no job is left
(a job over a weak reference returns it once its engine is gone).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Flusher"]

logger = logging.getLogger(__name__)


class Flusher:
    """Runs ``jobs`` every ``interval_s`` seconds under ``lock`` (see the
    module doc). :meth:`start` starts the daemon thread, :meth:`stop` ends
    it (and waits up to ``timeout_s``); :meth:`run_once` runs the jobs now
    in the caller's thread; :meth:`wake` runs a round at once."""

    #: What a job returns to be dropped.
    DONE = object()

    def __init__(
        self,
        lock: Any,
        interval_s: float,
        jobs: list[Callable[[], Any]] | None = None,
        name: str = "fairq-flusher",
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.lock = lock
        self.interval_s = float(interval_s)
        self.jobs: list[Callable[[], Any]] = list(jobs or [])
        self.name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[int] = set()
        #: completed rounds (tests, diagnostics)
        self.rounds = 0

    @staticmethod
    def weak_job(owner: Any, method: str) -> Callable[[], Any]:
        """A job calling ``owner.<method>()`` through a weak reference: once
        nothing else holds ``owner`` the job returns :data:`DONE` (and the
        thread, with no job left, ends)."""
        import weakref

        ref = weakref.ref(owner)

        def job() -> Any:
            obj = ref()
            if obj is None:
                return Flusher.DONE
            getattr(obj, method)()
            return None

        return job

    def add(self, job: Callable[[], Any]) -> None:
        """Run ``job`` too (from the next round)."""
        self.jobs.append(job)

    def start(self) -> Flusher:
        """Start the thread (once); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (the current round finishes first)."""
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)

    def wake(self) -> None:
        """Run a round now rather than at the end of the interval (what an
        engine going idle calls: the work leaves the engine's step)."""
        self._wake.set()

    def _run(self) -> None:
        while self.jobs:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.run_once()

    def run_once(self) -> None:
        """Run every job now, under the lock. Never raises."""
        done = []
        with self.lock:
            for job in list(self.jobs):
                try:
                    if job() is Flusher.DONE:
                        done.append(job)
                except Exception as e:  # noqa: BLE001 (never stop the engine)
                    if id(job) not in self._failing:
                        logger.warning("fairq: background flush job %r failed: %s", job, e)
                    self._failing.add(id(job))
                else:
                    self._failing.discard(id(job))
        for job in done:
            self.jobs.remove(job)
        self.rounds += 1
