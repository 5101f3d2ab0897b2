"""Fairness state that survives a restart (the ``state_file`` option),
for every engine (pure Python; no engine is imported).

An engine's scheduler with a fair policy (the :class:`fairq.ledger.Ledger`,
priority tiers included) or vLLM's ``wfq`` and the option
``"state_file": "/var/lib/fairq/state.json"`` keeps the policy's fairness
state in that file:

* **load** when the scheduler is built, before any request arrives;
* **save** from the step hooks (:meth:`Persistence.step`,
  :meth:`Persistence.tick`) once ``state_interval_s`` seconds (default 10)
  have passed since the last save (one ``time.monotonic()`` call per hook
  otherwise), once at a fresh start (so an unwritable path is reported at
  start), **when the engine goes idle** (:meth:`Persistence.flush`: the
  last requests of a burst are in the file at once), **every
  ``state_interval_s`` whether or not the engine steps** (the same
  :meth:`Persistence.flush` from a :class:`fairq.ledger.flush.Flusher`
  thread, under the ledger's lock), just before the engine aborts every
  request (vLLM's ``finish_requests(None)``: its SIGTERM path in abort
  mode), and at ``shutdown()``. Only a server whose state changed since
  the last save saves again: an idle server leaves the file as it is
  (after a restore, which tenants were backlogged at the save lives only
  in the Rust objects until they send again; rewriting the file would
  lose it).

What is saved is what the policy's Rust objects report through
``state_dict()`` (:meth:`fairq.ledger.Ledger.persisted`,
:meth:`fairq.vllm.wfq.WfqSettlement.persisted`), in an envelope (the
``format`` is the engine's: ``fairq.vllm.state`` for vLLM, as every file
vLLM's integration wrote, ``fairq.sglang.state`` for SGLang)::

    {"format": "fairq.vllm.state", "version": 1, "policy": "vtc",
     "fingerprint": "<sha256 of the options that matter>",
     "options": {...those options...}, "saved_at": <unix time>,
     "state": {...the policy's own...}}

Never the waiting requests: they do not survive the restart (the clients
send them again). A restart acts as an abort of every request at the save,
exactly as fairq treats aborts, with one rule from the Rust restore
(``rust/sched/state.rs``): a tenant that had requests waiting at the save
is still backlogged when it sends its next request (VTC does not lift its
counter to the others'), so an interrupted tenant keeps its place.

**A file that cannot be used never stops the server** (a restarting server
must come up, and the state is worth less than the service): a missing
file is a fresh start (logged at INFO); a file that cannot be read, is not
valid JSON, has another format or version, another policy or options with
another fingerprint (``quantum`` changed, say), or a state the Rust core
rejects is logged as a WARNING naming the reason, moved aside to
``<state_file>.bad-<UTC time>`` (kept for inspection or a rollback;
otherwise the next save would overwrite it) and the server starts fresh.
Errors while saving (disk full, directory gone, permissions) are logged
(WARNING at the first failure, INFO when saving works again) and never
raised inside vLLM's step.

Writes are atomic: the document goes to a temporary file in the same
directory (``.<name>.tmp-<pid>``), is flushed and ``fsync``-ed, then
``os.replace``-d over the file (and the directory ``fsync``-ed), so a crash
at any point leaves the old file or the new one, never a partial one;
temporary files a crash left behind are removed at the next start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fairq.engineopts import DEFAULT_INTERVAL_S

__all__ = [
    "FORMAT",
    "VERSION",
    "DEFAULT_INTERVAL_S",
    "StateSource",
    "StateFile",
    "Persistence",
    "fingerprint",
    "rank_path",
]

logger = logging.getLogger(__name__)


def rank_path(path: str, ranks: int, rank: int) -> str:
    """The state file of one data-parallel rank: ``path`` itself with one
    rank, ``<path>.dp<rank>`` with several (each rank schedules its own
    requests, so each keeps its own file)."""
    return f"{path}.dp{rank}" if ranks > 1 else path


#: The envelope's ``format`` of vLLM's files (the default).
FORMAT = "fairq.vllm.state"
#: The engines' names of their formats (in messages).
_ENGINES = {
    FORMAT: "vLLM",
    "fairq.sglang.state": "SGLang",
    "fairq.transformers.state": "transformers",
}
#: The logger of each engine's format (vLLM's as it always was).
_LOGGERS = {
    FORMAT: "fairq.vllm.persist",
    "fairq.sglang.state": "fairq.sglang.persist",
    "fairq.transformers.state": "fairq.transformers",
}
#: The envelope version this build writes and reads.
VERSION = 1


class StateSource(Protocol):
    """What :class:`Persistence` saves and restores (the scheduler's
    ``fairq`` hook object)."""

    def persisted_options(self) -> dict[str, Any]:
        """The options a saved state depends on (plain JSON data)."""
        ...

    def persisted(self) -> dict[str, Any]:
        """The state to save (plain JSON data, from the Rust objects)."""
        ...

    def restore(self, state: Any) -> None:
        """Load a saved state; raise (changing nothing) if it is not valid."""
        ...


def fingerprint(options: Mapping[str, Any]) -> str:
    """A stable digest of ``options`` (canonical JSON, sha256)."""
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class StateFile:
    """One state file: atomic writes, and reads that never raise."""

    def __init__(self, path: str, log: logging.Logger | None = None) -> None:
        self.log = logger if log is None else log
        self.path = os.path.abspath(os.fspath(path))
        self.dir, self.name = os.path.split(self.path)
        self.tmp = os.path.join(self.dir, f".{self.name}.tmp-{os.getpid()}")

    def write(self, document: Mapping[str, Any]) -> None:
        """Write ``document`` atomically (raises ``OSError``/``ValueError``;
        the old file is then untouched and no temporary file is left)."""
        data = json.dumps(document, allow_nan=False, separators=(",", ":")).encode()
        try:
            with open(self.tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(self.tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            raise
        _fsync_dir(self.dir)

    def read_text(self) -> str | None:
        """The file's text; ``None`` if it does not exist (other errors raise)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def move_aside(self) -> str | None:
        """Rename the file to ``<path>.bad-<UTC time>``; the new name, or
        ``None`` if that failed (logged)."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = f"{self.path}.bad-{stamp}"
        n = 1
        while os.path.lexists(target):
            n += 1
            target = f"{self.path}.bad-{stamp}-{n}"
        try:
            os.replace(self.path, target)
        except OSError as e:
            self.log.warning("fairq: could not move the state file %s aside: %s", self.path, e)
            return None
        return target

    def remove_stale_temps(self) -> None:
        """Remove temporary files a crashed writer left (any pid)."""
        prefix = f".{self.name}.tmp-"
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for n in names:
            if n.startswith(prefix):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.dir, n))
                    self.log.info("fairq: removed a partial state file left by a crash: %s", n)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Persistence:
    """Saves ``source``'s state to ``path`` every ``interval_s`` seconds
    (checked by :meth:`tick`), and loads it (:meth:`load`).

    ``policy``: the policy name recorded in the file. ``clock``: the
    monotonic clock (tests replace it). ``format``: the envelope's
    ``format`` (the engine's; a file of another format is not loaded).
    ``log``: where its messages go (default: the engine's logger,
    ``fairq.vllm.persist`` for vLLM's format, as before).
    """

    def __init__(
        self,
        source: StateSource,
        path: str,
        policy: str,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        format: str = FORMAT,
        log: logging.Logger | None = None,
    ) -> None:
        self.log = logging.getLogger(_LOGGERS.get(format, __name__)) if log is None else log
        self.source = source
        self.format = format
        self.file = StateFile(path, self.log)
        self.policy = policy
        self.interval_s = float(interval_s)
        self.clock = clock
        self.options = source.persisted_options()
        self.fingerprint = fingerprint(self.options)
        self._next = clock() + self.interval_s
        #: saves that succeeded / failed (introspection, tests)
        self.saves = 0
        self.failures = 0
        self._failing = False
        #: a save made just before an abort of every request stands until
        #: the next step (see :meth:`before_abort_all`)
        self._hold = False
        #: a step ran since the last save (an idle server saves nothing: a
        #: restored state's backlogged tenants are known only to the Rust
        #: objects until they send again, so the loaded file must stand)
        self._dirty = False
        #: the source's ``version`` at the last save or load (a source
        #: with a ``version`` that counts its changes, as the ledger, is
        #: "dirty" when it changed; one without, when a step ran)
        self._saved_version = self._version()

    # -- load ---------------------------------------------------------------
    def start(self, *, save_fresh: bool = True) -> bool:
        """What every engine does when its scheduler is built: make the
        file's directory (best effort), :meth:`load` the saved state, and on
        a fresh start (nothing loaded) save once when ``save_fresh`` (so the
        file exists, and a path that cannot be written is reported, at
        start). Returns whether a state was restored. Never raises."""
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self.file.path), exist_ok=True)
        loaded = self.load()
        if not loaded and save_fresh:
            self.save()
        return loaded

    def load(self) -> bool:
        """Load the file into the source. True if a state was restored;
        False for a fresh start (no file, or an unusable one: logged and
        moved aside). Never raises."""
        self.file.remove_stale_temps()
        path = self.file.path
        try:
            text = self.file.read_text()
        except (OSError, UnicodeDecodeError) as e:
            return self._reject(f"cannot be read ({e})")
        if text is None:
            self.log.info("fairq: no state file at %s; starting fresh", path)
            return False
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            return self._reject(f"is not valid JSON ({e})")
        reason = self._check_envelope(doc)
        if reason is not None:
            return self._reject(reason)
        try:
            self.source.restore(doc["state"])
        except Exception as e:  # the Rust core names the field
            return self._reject(f"holds a state fairq cannot load ({type(e).__name__}: {e})")
        self._saved_version = self._version()
        self.log.info(
            "fairq: restored the %s fairness state from %s (saved at %s)",
            self.policy,
            path,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(doc.get("saved_at", 0)))),
        )
        return True

    def _check_envelope(self, doc: Any) -> str | None:
        if not isinstance(doc, dict):
            return f"is not a JSON object (got {type(doc).__name__})"
        if doc.get("format") != self.format:
            return (
                f"is not a fairq {_ENGINES.get(self.format, self.format)} state file "
                f"(format {doc.get('format')!r}, want {self.format!r})"
            )
        if doc.get("version") != VERSION:
            return f"has version {doc.get('version')!r}; this fairq reads version {VERSION}"
        if doc.get("policy") != self.policy:
            return f"was written by policy {doc.get('policy')!r}; this server runs {self.policy!r}"
        if doc.get("fingerprint") != self.fingerprint:
            return f"was written with other options ({doc.get('options')!r}; now {self.options!r})"
        if not isinstance(doc.get("saved_at", 0), (int, float)) or "state" not in doc:
            return "has a malformed envelope (saved_at, state)"
        return None

    def _reject(self, reason: str) -> bool:
        moved = self.file.move_aside()
        self.log.warning(
            "fairq: the state file %s %s; %s; starting with fresh fairness state",
            self.file.path,
            reason,
            f"moved it to {moved}" if moved else "could not move it aside",
        )
        return False

    def _version(self) -> Any:
        return getattr(self.source, "version", None)

    def dirty(self) -> bool:
        """Whether the state may have changed since the last save or load."""
        v = self._version()
        return self._dirty if v is None else v != self._saved_version

    # -- save ---------------------------------------------------------------
    def tick(self) -> None:
        """From the step hooks: save if ``interval_s`` has passed."""
        self._dirty = True
        if self.clock() >= self._next:
            self.save()

    def step(self) -> None:
        """From ``schedule()``: a new step ends any hold, then :meth:`tick`."""
        self._hold = False
        self.tick()

    def before_abort_all(self, has_requests: bool = True) -> None:
        """vLLM is about to abort every request (its shutdown in abort mode,
        or a fault-tolerance reset): save the state as it stands (if a step
        ran or requests are queued since the last save), with the waiting
        tenants still backlogged, and keep that save until the next step
        (the ``shutdown()`` save after the abort is then skipped)."""
        if self.dirty() or has_requests:
            self.save()
        self._hold = True

    def flush(self, due_only: bool = False) -> bool:
        """Save now if the state changed since the last save (a step ran)
        and no pre-abort save stands (what the engine going idle calls);
        ``due_only``: and ``interval_s`` has passed since the last save
        (what the background flusher calls). Returns whether it saved.
        Never raises."""
        if not self.dirty() or self._hold:
            return False
        if due_only and self.clock() < self._next:
            return False
        return self.save()

    def shutdown(self) -> None:
        """From ``shutdown()``: the final save, if a step ran since the last
        one and no pre-abort save stands (see above)."""
        if self.dirty() and not self._hold:
            self.save()

    def save(self) -> bool:
        """Write the state now. Never raises; errors are logged."""
        self._next = self.clock() + self.interval_s
        version = self._version()
        try:
            doc = {
                "format": self.format,
                "version": VERSION,
                "policy": self.policy,
                "fingerprint": self.fingerprint,
                "options": self.options,
                "saved_at": time.time(),
                "state": self.source.persisted(),
            }
            self.file.write(doc)
        except Exception as e:
            self.failures += 1
            if not self._failing:
                self.log.warning(
                    "fairq: could not save the fairness state to %s (%s: %s); retrying every %gs",
                    self.file.path,
                    type(e).__name__,
                    e,
                    self.interval_s,
                )
            else:
                self.log.debug("fairq: saving the fairness state failed again: %s", e)
            self._failing = True
            return False
        self.saves += 1
        self._dirty = False
        self._saved_version = version
        if self._failing:
            self.log.info("fairq: saving the fairness state to %s works again", self.file.path)
        self._failing = False
        return True
