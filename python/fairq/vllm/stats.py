"""fairq's metrics on a vLLM server's own ``/metrics`` endpoint.

In vLLM's OpenAI server the scheduler runs in the engine-core process and
``/metrics`` is served by the API server process; a collector registered in
the engine core would never be scraped. So fairq uses the path vLLM's own
scheduler statistics take:

1. Engine core: fairq's scheduler classes override ``make_stats()``
   (vLLM calls it once per step when statistics are on, the server's
   default). At most every ``interval_s`` (1 s), :meth:`StatsPacker.attach`
   renders fairq's metric families (:class:`fairq.metrics.FairqCollector` of
   each fairq object of the scheduler, plus the ones below) and attaches them
   to the ``SchedulerStats`` vLLM sends to the API server with each engine
   output. An engine that goes idle sends no more output, so two more
   paths make the last second reach ``/metrics``: the step that leaves no
   unfinished request attaches the families as they are after fairq's
   hooks ran (forced, whatever the interval), and while the engine is idle
   a background :class:`fairq.ledger.Flusher` sends a ``SchedulerStats`` of
   its own (``make_stats()``, the families attached) through the engine
   core's output queue (:class:`EngineCoreLink`) whenever they changed
   (after an abort while idle, say).
2. API server: the stat-logger plugin ``fairq`` (entry point
   ``vllm.stat_logger_plugins``, :mod:`fairq.vllm.statlogger`) receives
   every ``SchedulerStats`` before vLLM's own loggers, takes fairq's part
   out and serves the latest families from ``prometheus_client``'s
   registry, which ``/metrics`` serves, with an ``engine`` label.

The carrier is one key of ``SchedulerStats.num_kv_fetch_reqs_by_stage`` (a
``dict[str, int]``, the one free-form field its wire format keeps): the key
is :data:`CARRIER_PREFIX` followed by the JSON of the families, the value 0.
A zero is invisible to vLLM's loggers (they print KV-fetch counts only when
one is non-zero and export only the stages they know), so a server without
the plugin loses nothing, and the plugin removes the key before they run.

Metrics added here (labels ``name``, plus ``tenant`` where it says):

=============================================  =======  ======================================
``fairq_vllm_prompt_tokens_total``             counter  tenant: prompt tokens admitted
``fairq_vllm_prefix_hit_tokens_total``         counter  tenant: of those, vLLM's cache hits
``fairq_vllm_steps_total``                     counter  ``schedule()`` calls
``fairq_vllm_schedule_seconds_total``          counter  wall time in vLLM's ``schedule()``
``fairq_vllm_fairq_seconds_total``             counter  of all steps, fairq's own code
``fairq_vllm_step_seconds_total``              counter  engine step time (see below)
=============================================  =======  ======================================

fairq's own code is every call vLLM makes into fairq's waiting queue and
fairq's hooks after ``schedule()``, ``update_from_output()`` and
``finish_requests()``. The engine step time is the wall time between
consecutive ``schedule()`` calls when the first of them scheduled work (so
idle waits for requests do not count): the engine core's whole iteration,
model included. ``fairq_seconds / step_seconds`` is fairq's share of the
step.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fairq.ledger.hooks import StepHook
from fairq.ledger.tally import TenantTally as _LedgerTally

__all__ = [
    "CARRIER_PREFIX",
    "EngineCoreLink",
    "StepClock",
    "StatsPacker",
    "TenantTally",
    "decode_families",
    "take_payload",
]

#: Start of the ``num_kv_fetch_reqs_by_stage`` key that carries fairq's families.
CARRIER_PREFIX = "\x00fairq:"

#: Tenants with their own ``tenant`` label per fairq object (the rest: ``other``).
MAX_TENANTS = 100


class StepClock:
    """Wall time of fairq's code, of vLLM's ``schedule()`` and of engine steps."""

    __slots__ = ("fairq_s", "schedule_s", "step_s", "steps", "_last_start", "_busy")

    def __init__(self) -> None:
        self.fairq_s = 0.0
        self.schedule_s = 0.0
        self.step_s = 0.0
        self.steps = 0
        self._last_start: float | None = None
        self._busy = False

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its wall time added to ``fairq_s``."""
        clock = time.perf_counter

        def timed(*a: Any, **k: Any) -> Any:
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                self.fairq_s += clock() - t

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def schedule_started(self) -> float:
        """Called as ``schedule()`` starts; returns the start time."""
        now = time.perf_counter()
        if self._busy and self._last_start is not None:
            self.step_s += now - self._last_start
        self._last_start = now
        return now

    def schedule_done(self, started: float, busy: bool) -> None:
        """``schedule()`` returned; ``busy``: it scheduled some tokens."""
        self.schedule_s += time.perf_counter() - started
        self.steps += 1
        self._busy = busy


#: FairState methods vLLM's step calls (directly or through the waiting queue).
_TIMED_STATE = (
    "add",
    "peek",
    "pop",
    "prepend",
    "remove",
    "after_schedule",
    "before_schedule",
    "output_snapshot",
    "after_update",
    "after_finish",
)


def time_fairq(state: Any, clock: StepClock) -> None:
    """Wrap the methods of ``state`` (a :class:`fairq.vllm.fair.FairState`
    or :class:`fairq.vllm.wfq.WfqSettlement`) that vLLM's step reaches, and
    its prefix-cache mirror's ``sync``, with ``clock``."""
    for name in _TIMED_STATE:
        fn = getattr(state, name, None)
        if fn is not None and not hasattr(fn, "__wrapped__"):
            setattr(state, name, clock.wrap(fn))
    mirror = getattr(state, "mirror", None)
    if mirror is not None and not hasattr(mirror.sync, "__wrapped__"):
        mirror.sync = clock.wrap(mirror.sync)


def _family_json(family: Any) -> list[Any]:
    return [
        family.name,
        family.type,
        family.documentation,
        [[s.name, s.labels, s.value] for s in family.samples],
    ]


class StatsPacker:
    """Engine-core side: renders fairq's families into ``SchedulerStats``."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._last = float("-inf")
        #: id(obj) -> (obj, its collector or None when it has no metrics)
        self._collectors: dict[int, tuple[Any, Any]] = {}

    def _collector(self, obj: Any, name: str) -> Any:
        from fairq.metrics import FairqCollector

        have = self._collectors.get(id(obj))
        if have is not None and have[0] is obj:
            return have[1]
        try:
            c: Any = FairqCollector(obj, name, MAX_TENANTS)
        except TypeError:  # no fairness state (a FIFO queue)
            c = None
        self._collectors[id(obj)] = (obj, c)
        return c

    def families(
        self, objects: Iterable[tuple[str, Any]], extra: Iterable[Any] = ()
    ) -> Iterator[Any]:
        """The metric families of ``objects`` (``(name, fairq object)``) and ``extra``."""
        for name, obj in objects:
            c = self._collector(obj, name)
            if c:
                yield from c.collect()
        yield from extra

    def attach(
        self,
        stats: Any,
        objects: Callable[[], Iterable[tuple[str, Any]]],
        extra: Callable[[], Iterable[Any]],
        *,
        force: bool = False,
    ) -> bool:
        """Attach the families to ``stats`` (a ``SchedulerStats``) if
        ``interval_s`` has passed since the last time, or ``force``
        (replacing families attached to it before). Returns whether it
        did. Never raises: a failure is skipped (metrics must not stop a
        step)."""
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return False
        self._last = now
        try:
            payload = self.render(objects, extra)
            stages = stats.num_kv_fetch_reqs_by_stage
            for key in [k for k in stages if isinstance(k, str) and k.startswith(CARRIER_PREFIX)]:
                del stages[key]
            stages[CARRIER_PREFIX + payload] = 0
        except Exception:  # noqa: BLE001
            return False
        #: the families last shipped (the idle flusher ships only a change)
        self.last_payload = payload
        return True

    #: the JSON of the families last attached (None: none yet)
    last_payload: str | None = None

    def render(
        self,
        objects: Callable[[], Iterable[tuple[str, Any]]],
        extra: Callable[[], Iterable[Any]],
    ) -> str:
        """The JSON of the families (what travels)."""
        return json.dumps(
            [_family_json(f) for f in self.families(objects(), extra())],
            separators=(",", ":"),
        )


def take_payload(stats: Any) -> str | None:
    """API-server side: remove fairq's key from ``stats`` and return its
    JSON (None if this ``SchedulerStats`` carries none)."""
    stages = getattr(stats, "num_kv_fetch_reqs_by_stage", None)
    if not isinstance(stages, dict):
        return None
    found = None
    for key in [k for k in stages if isinstance(k, str) and k.startswith(CARRIER_PREFIX)]:
        del stages[key]
        found = key[len(CARRIER_PREFIX) :]
    return found


def decode_families(payload: str, extra_labels: dict[str, str]) -> list[Any]:
    """``prometheus_client`` metric families from :func:`take_payload`'s
    JSON, each sample with ``extra_labels`` added."""
    from prometheus_client.core import Metric

    out = []
    for name, kind, doc, samples in json.loads(payload):
        m = Metric(name, doc, kind)
        for sname, labels, value in samples:
            m.add_sample(sname, {**labels, **extra_labels}, value)
        out.append(m)
    return out


class TenantTally(StepHook, _LedgerTally):
    """Per tenant, under every fairq policy: requests, prompt tokens and
    vLLM's prefix-cache hits when each request is first scheduled (its
    ``num_computed_tokens`` then is the hit), resolved with ``resolver``
    (:class:`fairq.ledger.TenantTally` fed from vLLM's ``SchedulerOutput``).
    """

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """Count the requests ``output`` schedules for the first time."""
        try:
            new = output.scheduled_new_reqs
            if not new:
                return
            requests = scheduler.requests
            self.forget_finished(requests)
            for data in new:
                rid = data.req_id
                if self.seen(rid):
                    continue
                request = requests.get(rid)
                if request is None:
                    continue
                self.record(
                    rid,
                    self.resolver(request),
                    int(request.num_prompt_tokens),
                    int(data.num_computed_tokens),
                )
        except Exception:  # noqa: BLE001 (a tally must never stop a step)
            return

    def families(self, policy: str, clock: Any) -> list[Any]:
        """Prometheus families of the tallies and of ``clock``."""
        from prometheus_client.core import CounterMetricFamily

        name = f"vllm-{policy}"
        out = _LedgerTally.families(self, "vllm", name)
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


class EngineCoreLink:
    """The engine-core process's way to send a ``SchedulerStats`` of fairq's
    own to the API server while the engine is idle: the ``output_queue`` of
    vLLM's ``EngineCoreProc`` that built the scheduler (found on the call
    stack while the scheduler is built: vLLM gives the scheduler no handle
    on it). Absent (an in-process engine, a test harness): :attr:`queue` is
    None and :meth:`send` does nothing."""

    def __init__(self, queue: Any = None) -> None:
        self.queue = queue

    @classmethod
    def find(cls, max_depth: int = 40) -> EngineCoreLink:
        """The link of the engine core whose ``__init__`` is on the stack."""
        import sys

        frame: Any = sys._getframe(1)
        for _ in range(max_depth):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            q = getattr(owner, "output_queue", None)
            if q is not None and hasattr(q, "put_nowait") and hasattr(owner, "engine_index"):
                return cls(q)
            frame = frame.f_back
        return cls(None)

    def send(self, stats: Any) -> bool:
        """Queue ``stats`` for the API server (client 0, as vLLM sends its
        own ``SchedulerStats``). Returns whether it did; never raises."""
        if self.queue is None:
            return False
        try:
            from vllm.v1.engine import EngineCoreOutputs

            self.queue.put_nowait((0, EngineCoreOutputs(scheduler_stats=stats)))
        except Exception:  # noqa: BLE001
            return False
        return True
