"""The dual-phase (think / output) policy inside vLLM's scheduler.

Turned on with the option ``dual_phase`` (``FAIRQ_VLLM_OPTIONS`` or the
``FAIRQ_VLLM_CONFIG`` file) under any fairq policy of fairq's scheduler
classes; with ``vtc``, ``lpm`` or ``dlpm`` the order *within* each phase is
the fair policy's. ``ALGORITHMS.md`` section 4 is the contract,
``docs/design/engines.md`` ("The dual-phase policy inside vLLM") the design.

vLLM's ``schedule()`` stays vLLM's. Before it runs, :meth:`DualPhasePolicy.before_schedule`
rewrites two things vLLM reads and nothing else:

* the order of ``scheduler.running`` (vLLM serves running requests in list
  order and, under its ``fcfs`` policy, preempts ``running[-1]`` when KV
  memory runs out): reserved think slots (starvation guard), then output
  slots, output requests over the budget, think slots, think requests over
  the budget. So vLLM serves output first and preempts think first.
* ``request.next_decode_eligible_step`` of the requests over their phase's
  budget, raised (never lowered) to the step after this one: vLLM's
  running loop skips them for this step (``if self.current_step <
  request.next_decode_eligible_step: continue``) while they keep their KV,
  their place in ``running`` and their eligibility as preemption victims.

How many requests of each phase get a slot is the core
:class:`fairq.dualphase.DualPhaseQueue`'s ``schedule`` (one place for the
budget rules: ``output_budget``, ``floor(output_budget *
think_batch_multiplier)``, ``min_think_reservation``), over the running
requests. A request's phase: ``think`` from admission unless its prompt
already ends the reasoning (the parser's ``is_reasoning_end``, or the
end-of-think id after the last start-of-think id); ``output`` from the step
after the one whose sampled tokens hold the end-of-think id (the core's
``on_phase_event``, between steps). The phase is kept by request id while
the request lives (preemption and resumption included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fairq.dualphase import DualPhaseQueue
from fairq.ledger.hooks import StepHook

__all__ = ["DualPhaseOptions", "DualPhasePolicy", "build_dual_phase", "OPTION"]

#: The option key holding the dual-phase settings.
OPTION = "dual_phase"
_FIELDS = (
    "output_budget",
    "think_batch_multiplier",
    "min_think_reservation",
    "end_think_token_id",
    "start_think_token_id",
    "reasoning_parser",
)


def _int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{OPTION}.{name} must be an integer, got {v!r}")
    if v < lo:
        raise ValueError(f"{OPTION}.{name} must be >= {lo}, got {v!r}")
    return v


@dataclass(frozen=True)
class DualPhaseOptions:
    """Validated ``dual_phase`` options (each error names its field).

    ``output_budget``: output-phase requests served per step (default: vLLM's
    ``max_num_seqs``, i.e. no cap). ``think_batch_multiplier`` (finite,
    ``>= 1``, default 2.5) and ``min_think_reservation`` (default 1): the
    ADR's. ``end_think_token_id`` / ``start_think_token_id``: the token ids
    that end / start reasoning; without ``end_think_token_id`` the
    ``reasoning_parser`` named here, or vLLM's ``--reasoning-parser``, gives
    it (built over the model's tokenizer).
    """

    output_budget: int | None = None
    think_batch_multiplier: float = 2.5
    min_think_reservation: int = 1
    end_think_token_id: int | None = None
    start_think_token_id: int | None = None
    reasoning_parser: str | None = None

    @classmethod
    def from_mapping(cls, raw: Any) -> DualPhaseOptions:
        if raw is True:
            raw = {}
        if not isinstance(raw, Mapping):
            raise TypeError(f"{OPTION} must be a mapping of options (or true), got {raw!r}")
        for key in raw:
            if key not in _FIELDS:
                raise ValueError(f"unknown option {OPTION}.{key} (options: {', '.join(_FIELDS)})")
        ob = raw.get("output_budget")
        m = raw.get("think_batch_multiplier", 2.5)
        if isinstance(m, bool) or not isinstance(m, (int, float)):
            raise TypeError(f"{OPTION}.think_batch_multiplier must be a number, got {m!r}")
        if not (math.isfinite(m) and m >= 1.0):
            raise ValueError(
                f"{OPTION}.think_batch_multiplier must be a finite number >= 1.0, got {m!r}"
            )
        end = raw.get("end_think_token_id")
        start = raw.get("start_think_token_id")
        parser = raw.get("reasoning_parser")
        if parser is not None and (not isinstance(parser, str) or not parser.strip()):
            raise ValueError(f"{OPTION}.reasoning_parser must be a parser name, got {parser!r}")
        return cls(
            output_budget=None if ob is None else _int("output_budget", ob, 1),
            think_batch_multiplier=float(m),
            min_think_reservation=_int(
                "min_think_reservation", raw.get("min_think_reservation", 1), 0
            ),
            end_think_token_id=None if end is None else _int("end_think_token_id", end, 0),
            start_think_token_id=None if start is None else _int("start_think_token_id", start, 0),
            reasoning_parser=parser.strip() if parser else None,
        )


def _token_rule(end_ids: frozenset[int], start_id: int | None) -> Callable[[Sequence[int]], bool]:
    """A prompt ends the reasoning when, read from its end, the end-of-think
    id comes before any start-of-think id (vLLM's basic parsers' rule)."""

    def ends(ids: Sequence[int]) -> bool:
        for t in reversed(ids):
            if t == start_id:
                return False
            if t in end_ids:
                return True
        return False

    return ends


def _resolve_end(
    scheduler: Any, opts: DualPhaseOptions
) -> tuple[frozenset[int], Callable[..., bool], str]:
    """``(end id, prompt rule, where it came from)``; a ``ValueError`` naming
    the option to set when there is no way to know the end of think."""
    if opts.end_think_token_id is not None:
        ids = frozenset([opts.end_think_token_id])
        return (
            ids,
            _token_rule(ids, opts.start_think_token_id),
            "dual_phase.end_think_token_id",
        )
    vcfg = getattr(scheduler, "vllm_config", None)
    so = getattr(vcfg, "structured_outputs_config", None)
    name = opts.reasoning_parser or (getattr(so, "reasoning_parser", "") or None)
    if not name:
        raise ValueError(
            f"{OPTION} needs the end-of-think token: serve with vLLM's --reasoning-parser, "
            f"or set {OPTION}.reasoning_parser or {OPTION}.end_think_token_id"
        )
    from vllm.reasoning import ReasoningParserManager

    try:
        parser_cls = ReasoningParserManager.get_reasoning_parser(name)
    except Exception as e:  # noqa: BLE001 (vLLM's KeyError/ValueError, reworded)
        raise ValueError(
            f"{OPTION}.reasoning_parser: unknown reasoning parser {name!r}: {e}"
        ) from None
    manager = getattr(scheduler, "structured_output_manager", None)
    tokenizer = getattr(manager, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(
            f"{OPTION}: reasoning parser {name!r} needs the model's tokenizer, which this "
            f"engine did not load (skip_tokenizer_init); set {OPTION}.end_think_token_id"
        )
    return _from_parser(parser_cls, tokenizer, name)


def _from_parser(
    parser_cls: type, tokenizer: Any, name: str
) -> tuple[frozenset[int], Callable[..., bool], str]:
    """The end-of-think ids of a vLLM reasoning parser built over
    ``tokenizer``: ``reasoning_end_token_ids`` (vLLM's parser engines: the
    explicit end and the implicit ones, e.g. a tool-call start) or
    ``end_token_id`` (the basic ``<think>...</think>`` parsers); the prompt
    rule is the parser's ``is_reasoning_end``."""
    try:
        parser = parser_cls(tokenizer)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{OPTION}: reasoning parser {name!r} cannot be built: {e}") from None
    ids: set[int] = set()
    try:
        ids.update(int(t) for t in (getattr(parser, "reasoning_end_token_ids", None) or ()))
    except Exception:  # noqa: BLE001 (a parser without the property)
        ids = set()
    end = getattr(parser, "end_token_id", None)
    if not ids and isinstance(end, int) and not isinstance(end, bool):
        ids.add(end)
    if not ids:
        raise ValueError(
            f"{OPTION}: reasoning parser {name!r} names no end-of-think token id "
            f"(reasoning_end_token_ids / end_token_id); set {OPTION}.end_think_token_id"
        )
    end_ids = frozenset(ids)
    fallback = _token_rule(end_ids, getattr(parser, "start_token_id", None))

    def ends(prompt: Sequence[int]) -> bool:
        try:
            return bool(parser.is_reasoning_end(list(prompt)))
        except Exception:  # noqa: BLE001 (never raise in a step)
            return fallback(prompt)

    return end_ids, ends, f"reasoning parser {name!r}"


class DualPhasePolicy(StepHook):
    """fairq's dual-phase state in one vLLM scheduler (see the module doc).

    ``queue``: the core :class:`DualPhaseQueue` holding the *running*
    requests by phase (its metrics are the ``fairq_dualphase_*`` families).
    ``fair``: the :class:`fairq.vllm.fair.FairState` ordering each phase, or
    None (each phase in the core's round-robin order).
    """

    def __init__(
        self,
        options: DualPhaseOptions,
        end_think_token_ids: frozenset[int],
        prompt_ends_reasoning: Callable[[Sequence[int]], bool],
        output_budget: int,
        fair: Any = None,
        source: str = "",
    ) -> None:
        self.options = options
        self.end_ids = end_think_token_ids
        self.prompt_ends = prompt_ends_reasoning
        self.output_budget = output_budget
        self.fair = fair
        self.source = source
        self.queue = DualPhaseQueue(options.think_batch_multiplier, options.min_think_reservation)
        #: every live request's phase (running or not), by request id, and
        #: the request object it belongs to
        self.phase: dict[str, str] = {}
        self._req: dict[str, Any] = {}
        #: ended thinking while outside ``queue`` (async scheduling):
        #: moved with the core's ``on_phase_event`` when it runs again
        self._ended_outside: set[str] = set()
        #: per phase: tokens vLLM scheduled, preemptions; think slots placed
        #: ahead of output by the starvation guard
        self.scheduled_tokens = {"output": 0, "think": 0}
        self.preemptions = {"output": 0, "think": 0}
        self.reserved_ahead_total = 0
        self._running_before: dict[str, Any] = {}
        if fair is not None:
            po = fair.options.policy_options
            self._w_out = float(po.get("w_out", po.get("w_q", 2.0)))

    # -- phases -----------------------------------------------------------
    def _initial_phase(self, request: Any) -> str:
        try:
            prompt = request.prompt_token_ids
            if prompt is not None and self.prompt_ends(prompt):
                return "output"
        except Exception:  # noqa: BLE001 (never raise in a step)
            pass
        return "think"

    def phase_of(self, request: Any) -> str:
        """The phase of ``request`` (found from its prompt the first time;
        a new request reusing a finished one's id starts afresh)."""
        rid = request.request_id
        if self._req.get(rid) is not request:
            self._req[rid] = request
            self.phase[rid] = self._initial_phase(request)
            self._ended_outside.discard(rid)
        return self.phase[rid]

    def _sync(self, scheduler: Any) -> None:
        """``queue`` holds exactly ``scheduler.running``; phases of the
        requests vLLM no longer holds are forgotten."""
        q = self.queue
        running = scheduler.running
        live = {r.request_id for r in running}
        for phase in ("output", "think"):
            for rid in q.ids(phase):
                if rid not in live:
                    q.remove(rid)
        for r in running:
            rid = r.request_id
            if rid in q:
                continue
            phase = self.phase_of(r)  # first: resets a reused id's flags
            if rid in self._ended_outside:
                self._ended_outside.discard(rid)
                q.add(rid, r, "think")
                q.on_phase_event(rid)
                self.phase[rid] = "output"
            else:
                q.add(rid, r, phase)
        requests = scheduler.requests
        if len(self.phase) > len(requests):
            for rid in [k for k in self.phase if k not in requests]:
                del self.phase[rid]
                self._req.pop(rid, None)
                self._ended_outside.discard(rid)

    # -- the step ---------------------------------------------------------
    def _fair_order(self, reqs: list[Any]) -> list[Any]:
        """VTC's greedy for one step: repeatedly the tenant with the least
        ``service / weight`` (each pick adds one output token's charge,
        ``w_out / weight``), its oldest request of the phase."""
        fair = self.fair
        if fair is None or len(reqs) < 2:
            return reqs
        by_tenant: dict[str, list[Any]] = {}
        for r in sorted(reqs, key=lambda r: (r.arrival_time, r.request_id)):
            t = fair.tenant_of.get(r.request_id)
            if t is None:
                t = fair.options.tenant(r)
            by_tenant.setdefault(t, []).append(r)
        import heapq

        heap = []
        for i, (t, rs) in enumerate(by_tenant.items()):
            w = fair.options.tenant_weights.get(t, 1.0)
            heap.append((fair.service(t) / w, rs[0].arrival_time, i, t, w))
        heapq.heapify(heap)
        pos = dict.fromkeys(by_tenant, 0)
        out = []
        while heap:
            key, _, i, t, w = heapq.heappop(heap)
            rs = by_tenant[t]
            out.append(rs[pos[t]])
            pos[t] += 1
            if pos[t] < len(rs):
                heapq.heappush(heap, (key + self._w_out / w, rs[pos[t]].arrival_time, i, t, w))
        return out

    def before_schedule(self, scheduler: Any) -> None:
        """Order ``scheduler.running`` and defer the requests over budget."""
        self._sync(scheduler)
        running = scheduler.running
        self._running_before = {r.request_id: r for r in running}
        if not running:
            return
        q = self.queue
        n_out_all = q.len("output")
        out_slots, think_slots = q.schedule_phases(self.output_budget, len(running))
        k_out, k_think = len(out_slots), len(think_slots)
        if self.fair is None:
            out_sel = [r for _, r in out_slots]
            think_sel = [r for _, r in think_slots]
            chosen = {r.request_id for r in out_sel} | {r.request_id for r in think_sel}
            out_rest = [
                r
                for r in running
                if r.request_id not in chosen and self.phase[r.request_id] == "output"
            ]
            think_rest = [
                r
                for r in running
                if r.request_id not in chosen and self.phase[r.request_id] == "think"
            ]
        else:
            outs = self._fair_order([r for r in running if self.phase[r.request_id] == "output"])
            thinks = self._fair_order([r for r in running if self.phase[r.request_id] == "think"])
            out_sel, out_rest = outs[:k_out], outs[k_out:]
            think_sel, think_rest = thinks[:k_think], thinks[k_think:]
        # the guard: while output is under its budget, the reserved think
        # slots come before output (they get tokens and KV first)
        reserve = 0
        if self.options.min_think_reservation > 0 and n_out_all < self.output_budget and out_sel:
            reserve = min(self.options.min_think_reservation, len(think_sel))
        if reserve:
            self.reserved_ahead_total += reserve
        order = think_sel[:reserve] + out_sel + out_rest + think_sel[reserve:] + think_rest
        if len(order) == len(running):  # always; a mismatch leaves vLLM's order
            running[:] = order
        # schedule() first increments current_step to `now`, then skips a
        # request while `now < next_decode_eligible_step`
        skip_until = scheduler.current_step + 2
        for r in out_rest + think_rest:
            if r.next_decode_eligible_step < skip_until:
                r.next_decode_eligible_step = skip_until

    def after_schedule(self, scheduler: Any, output: Any) -> None:
        """Count what vLLM scheduled and preempted, per phase; take the
        newly admitted requests into the queue."""
        phase = self.phase
        for rid, n in output.num_scheduled_tokens.items():
            p = phase.get(rid)
            if p is None:
                r = scheduler.requests.get(rid)
                if r is None:
                    continue
                p = self.phase_of(r)
            self.scheduled_tokens[p] += int(n)
        if self._running_before:
            now = {r.request_id for r in scheduler.running}
            for rid, r in self._running_before.items():
                if rid not in now and not r.is_finished() and rid in phase:
                    self.preemptions[phase[rid]] += 1
            self._running_before = {}
        self._sync(scheduler)

    def output_snapshot(self, scheduler_output: Any, requests: Mapping[str, Any]) -> list[Any]:
        out = []
        for rid in scheduler_output.num_scheduled_tokens:
            r = requests.get(rid)
            if r is not None and self.phase_of(r) == "think":
                out.append((rid, r, r.num_output_tokens))
        return out

    def after_update(self, snapshot: list[Any]) -> None:
        """Think requests whose new tokens hold the end-of-think id move to
        output (effective for the next ``schedule()``)."""
        end_ids = self.end_ids
        q = self.queue
        for rid, r, before in snapshot:
            try:
                new = r.output_token_ids[before:]
            except Exception:  # noqa: BLE001
                continue
            if r.is_finished() or end_ids.isdisjoint(new):
                continue
            if rid in q:
                q.on_phase_event(rid)
            else:
                self._ended_outside.add(rid)
            self.phase[rid] = "output"

    # -- observability ------------------------------------------------------
    def waiting_by_phase(self, scheduler: Any) -> dict[str, int]:
        """Requests vLLM holds that are not running (preempted ones keep
        their phase; a new one's is found once, from its prompt)."""
        out = {"output": 0, "think": 0}
        running = {r.request_id for r in scheduler.running}
        for rid, r in scheduler.requests.items():
            if rid not in running and not r.is_finished():
                out[self.phase_of(r)] += 1
        return out

    def families(self, name: str, scheduler: Any) -> list[Any]:
        """Prometheus families beside the core queue's ``fairq_dualphase_*``."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        tok = CounterMetricFamily(
            "fairq_vllm_dualphase_scheduled_tokens",
            "Tokens vLLM scheduled per phase",
            labels=["name", "phase"],
        )
        pre = CounterMetricFamily(
            "fairq_vllm_dualphase_preemptions", "Preemptions per phase", labels=["name", "phase"]
        )
        wait = GaugeMetricFamily(
            "fairq_vllm_dualphase_waiting",
            "Requests vLLM holds that are not running, per phase",
            labels=["name", "phase"],
        )
        waiting = self.waiting_by_phase(scheduler)
        for p in ("output", "think"):
            tok.add_metric([name, p], self.scheduled_tokens[p])
            pre.add_metric([name, p], self.preemptions[p])
            wait.add_metric([name, p], waiting[p])
        ahead = CounterMetricFamily(
            "fairq_vllm_dualphase_reserved_ahead",
            "Think slots the starvation guard placed ahead of output",
            labels=["name"],
        )
        ahead.add_metric([name], self.reserved_ahead_total)
        return [tok, pre, wait, ahead]


def build_dual_phase(scheduler: Any, raw: Any, fair: Any = None) -> DualPhasePolicy:
    """The :class:`DualPhasePolicy` of a built vLLM scheduler from the raw
    ``dual_phase`` option; every error (``ValueError``/``TypeError``) names
    the field. Refused under vLLM's ``priority`` policy, whose preemption
    victim is the request with the largest ``(priority, arrival_time)``
    whatever the order of ``running`` (``Scheduler.schedule``), so think
    could not be preempted first."""
    opts = DualPhaseOptions.from_mapping(raw)
    policy = getattr(getattr(scheduler, "policy", None), "value", "fcfs")
    if policy != "fcfs":
        raise ValueError(
            f"{OPTION} needs vLLM's fcfs scheduling policy, not {policy!r}: under 'priority' "
            "vLLM preempts the largest (priority, arrival_time), not the phase order"
        )
    end, rule, source = _resolve_end(scheduler, opts)
    max_seqs = int(getattr(scheduler, "max_num_running_reqs", 0) or 1)
    ob = opts.output_budget if opts.output_budget is not None else max_seqs
    return DualPhasePolicy(opts, end, rule, ob, fair=fair, source=source)
