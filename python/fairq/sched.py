"""Local (per-worker) schedulers: FCFS, LPM, VTC and DLPM (implemented in Rust).

All four share one interface, so engines and the simulator swap them freely::

    tree = fairq.RadixTree()
    s = fairq.DLPM(tree, quantum=2048)
    s.add("r1", "alice", tokens, item=req)
    for a in s.schedule(token_budget=8192):      # list[fairq.Admission]
        run_prefill(a.item, a.cached_len, a.extend_len)
    tree.insert(tokens)                           # the engine inserts after prefill
    s.charge_output("r1", 1)                      # after each decode step
    s.finish("r1")

Policies (contract: ALGORITHMS.md sections 5 and 6; every registered policy is
listed by ``fairq._core.policies()``, which :data:`POLICY_INFO`,
:data:`POLICIES` and :data:`POLICY_OPTIONS` are built from):

* ``FCFS(tree=None)``: arrival order; stops at the first request that does not
  fit the remaining budget (one larger than the whole budget: the oversize
  rule below).
* ``LPM(tree)``: longest cached prefix first, ties by arrival; requests that
  do not fit are skipped (the walk continues), as in the paper's ``CanAdd``.
* ``VTC(tree=None, w_in=1.0, w_out=2.0)``: the waiting client with the smallest
  virtual counter gets its oldest request admitted; stops at the first that
  does not fit. Admission charges ``w_in * input_len / weight``, each output
  token ``w_out / weight``; a client that becomes backlogged is lifted to the
  smallest counter among the other waiting clients.
* ``DLPM(tree, quantum, w_e=1.0, w_q=2.0)``: LPM order; clients with deficit
  ``q <= 0`` are skipped unless no waiting client has ``q > 0``, in which case
  every known client with ``q <= 0`` gets ``+quantum`` (applied in bulk: as
  many refills as it takes for some waiting client to reach ``q > 0``;
  ``refills`` counts them all); admission charges ``w_e * extend_len /
  weight``, each output token ``w_q / weight``. The walk is repeated until it
  admits and refills nothing, so DLPM is work-conserving for any ``quantum``
  (paper Algorithm 1), with one deliberate exception kept for the fairness
  bound: a waiting client with credit none of whose requests fits blocks the
  refill the others need (for one call: the oversize rule below then admits
  its request alone).

Requests larger than the budget, the same rule in all four (defined in the
Rust core, ``LocalScheduler::schedule_step`` in ``rust/sched/mod.rs``):

* **Oversize rule.** A ``schedule`` call that admits nothing, with
  ``max_requests >= 1`` and a request waiting, admits the policy's next
  request alone: what the same call with ``max_requests=1`` and
  ``oversize_budget`` tokens of room admits (default ``None``: unlimited).
  That request's extend tokens exceed the whole ``token_budget`` (else the
  call would have admitted something), so no step of that budget could ever
  hold it; the engine prefills it in chunks, as engines with chunked prefill
  do. It is charged as any admission (VTC: ``w_in * input_len / weight``;
  DLPM: ``w_e * extend_len / weight``, after a refill if no waiting client
  has credit). A request that only misses what is left after others were
  admitted in the same call keeps waiting. So (with the default room) every
  ``schedule`` call with a request waiting admits at least one, and no
  waiting request blocks another forever (FCFS and VTC no longer stop for
  good behind a 9,000-token prompt with ``token_budget=8192``; DLPM's credit
  client whose request never fits no longer holds back the refill the others
  need).
* ``oversize_budget`` caps the room (e.g. the free KV cache); ``0`` turns the
  rule off for a call whose ``token_budget`` is only what is left of a step
  another prefill is using (a request larger than that may fit a later step
  whole). :func:`admit` is that engine-step convention.
* **Reject mode** for an engine that cannot chunk: ``max_prompt_tokens=N``
  (a keyword of every constructor) makes ``add`` raise ``ValueError`` naming
  the request and ``N`` for a longer prompt, changing nothing. With ``N`` at
  most the ``token_budget`` of a step with nothing else prefilling, every
  request fits such a step, so the oversize rule never has to fire there. It
  is an engine setting, not fairness state (``state_dict`` does not hold it).

``extend_len = input_len - cached_len`` where ``cached_len`` is the match
against the tree at scheduling time (it may be 0 extend tokens for a fully
cached prompt). The scheduler never inserts into the tree; it notices the
engine's inserts and evictions through the tree's change log.

``recharge_extend(request_id, extend_len)`` corrects a running request's extend
charge once the engine knows its real prefix match (the tree the scheduler read
is only a prediction): it replaces the extend tokens charged at admission and
returns the previous value. ``service(client)`` moves by ``w_e * delta`` (VTC:
``w_in``; FCFS/LPM: 1) and DLPM's deficit by ``-w_e * delta / weight`` (the
weight the client had at admission), so the request ends up charged exactly as
if it had been admitted with ``extend_len``. VTC's counter does not move: it
charges ``w_in * input_len`` whatever was cached. ``charged_extend(request_id)``
reads the current value. Not running -> ``KeyError``; ``extend_len`` < 0 or >
the prompt length -> ``ValueError`` (nothing changes on error).

``service(client)`` is the raw ``w_in/w_e * extend + w_out/w_q * output``
tokens served (weights not divided by the client weight); unknown clients
have service, counter and deficit 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fairq import _core
from fairq._core import DLPM, FCFS, LPM, VTC, Admission, LocalScheduler, RadixTree

# ``LocalScheduler`` (``fairq._core.LocalScheduler``) is the base class every
# local scheduler extends: the interface FCFS, LPM, VTC, DLPM and every other
# registered policy share, bound once in the core, so ``isinstance(s,
# LocalScheduler)`` holds for each. Vocabulary (``docs/ARCHITECTURE.md``,
# glossary): a *client* is whom fairness is measured between; ``tokens`` are
# token ids (the prompt); *extend* tokens are the uncached part of a prompt;
# ``schedule`` with nothing admissible returns ``[]``.

Scheduler = LocalScheduler
"""Any local scheduler (each is a :class:`LocalScheduler`)."""


class StateField(NamedTuple):
    """A per-client number a policy keeps: its key in ``state_dict()``'s
    client entries (and :meth:`LocalScheduler.state_value`), its Prometheus
    family (``fairq_<metric>``) and help text."""

    name: str
    metric: str
    help: str


@dataclass(frozen=True)
class PolicyInfo:
    """What the integration layer needs to know of a local policy, in one place
    (read from the core's registry, ``fairq._core.policies()``: a policy's
    Rust module registers all of it).

    ``name``: the key of :data:`POLICIES`; ``options``: the constructor's own
    keyword arguments (:data:`POLICY_OPTIONS`); ``engine_defaults``: the
    values an engine integration uses when the user gives none (DLPM's
    quantum sized for one engine batch); ``needs_tree``: the policy orders by
    prefix match, so an engine must mirror its prefix cache; ``refills``: the
    policy refills credit (DLPM), so an engine admitting several requests per
    step lets only the first refill (``schedule`` once, then
    ``schedule_within_credit``); ``stop_at_unfit``: its pass stops at the
    first request that does not fit (FCFS, VTC) instead of skipping it;
    ``state_fields``: the per-client numbers it keeps (:class:`StateField`);
    ``class_name``: its class in ``fairq._core``; ``flags``: the options
    that are switches (0 or 1, a bool in the engines' options: DLPM's
    ``strict_credit``).
    """

    name: str
    options: tuple[str, ...]
    engine_defaults: dict[str, float]
    needs_tree: bool
    refills: bool
    stop_at_unfit: bool = False
    state_fields: tuple[StateField, ...] = field(default=())
    class_name: str = ""
    flags: tuple[str, ...] = ()


def _registry() -> dict[str, PolicyInfo]:
    out: dict[str, PolicyInfo] = {}
    for d in _core.policies():
        out[d["name"]] = PolicyInfo(
            d["name"],
            tuple(d["options"]),
            dict(d["engine_defaults"]),
            needs_tree=bool(d["needs_tree"]),
            refills=bool(d["refills"]),
            stop_at_unfit=bool(d["stop_at_unfit"]),
            state_fields=tuple(
                StateField(f["name"], f["metric"], f["help"]) for f in d["state_fields"]
            ),
            class_name=d["class_name"],
            flags=tuple(d["flags"]),
        )
    return out


#: Local policy name -> :class:`PolicyInfo`, in registration order.
POLICY_INFO: dict[str, PolicyInfo] = _registry()

#: Local policy name -> its scheduler class (what :func:`make_scheduler` builds).
POLICIES: dict[str, type[LocalScheduler]] = {
    name: getattr(_core, info.class_name) for name, info in POLICY_INFO.items()
}

#: The options (keyword arguments besides the tree) each local policy takes.
POLICY_OPTIONS: dict[str, tuple[str, ...]] = {
    name: info.options for name, info in POLICY_INFO.items()
}

#: Named engine variants of a policy: name -> (policy, its engine settings), which
#: :func:`make_scheduler` also builds. ``lpm-sglang``: LPM as SGLang 0.5 runs
#: it (its ``PrefillAdder`` stops at the first request that does not fit;
#: above 128 waiting, its ``SchedulePolicy`` falls back to FCFS), beside the
#: paper's idealised ``lpm``. ``preble-local``: Preble's local wait queue (its
#: ``fcfs-mpq`` heuristic: ten levels by cache-hit ratio, one level per step,
#: round-robin from the top, ``(level + 1) * 10`` requests at most; see
#: ``rust/sched/preble.rs``), over the same prefix matches as LPM.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "lpm-sglang": ("lpm", {"stop_at_unfit": True, "fcfs_above": 128}),
    "preble-local": ("lpm", {"multi_priority": True}),
}


def policy_info(name: str) -> PolicyInfo:
    """:class:`PolicyInfo` of ``name`` (normalised as :func:`policy_name` does;
    its errors)."""
    return POLICY_INFO[policy_name(name)]


def policy_name(name: str) -> str:
    """``name`` as a key of :data:`POLICIES` (case and surrounding space ignored).

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: not a local policy; the message lists the known ones.
    """
    if not isinstance(name, str):
        raise TypeError(f"policy must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    if key not in POLICIES:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown fairq policy {name!r}; known policies: {known}")
    return key


def make_scheduler(name: str, tree: RadixTree | None = None, **options: Any) -> Scheduler:
    """The local scheduler ``name`` (``fcfs``, ``lpm``, ``vtc``, ``dlpm``, or a
    :data:`VARIANTS` name such as ``lpm-sglang`` or ``preble-local``) over ``tree``.

    The one factory the simulator and the engine integrations build their
    schedulers with. ``options`` are the policy's own keyword arguments
    (:data:`POLICY_OPTIONS`: DLPM needs ``quantum``); their values are
    checked by the scheduler itself. A variant adds its engine settings
    (constructor keywords outside :data:`POLICY_OPTIONS`, as
    ``max_prompt_tokens`` is).

    Raises:
        TypeError, ValueError: unknown policy (see :func:`policy_name`), an
            option the policy does not take (named with the ones it takes), or
            a bad option value.
    """
    variant = VARIANTS.get(name.strip().lower()) if isinstance(name, str) else None
    engine: dict[str, Any] = {}
    if variant is not None:
        name, engine = variant
    key = policy_name(name)
    allowed = POLICY_OPTIONS[key]
    for opt in options:
        if opt not in allowed:
            raise ValueError(
                f"policy {key!r} has no option {opt!r} (options: {', '.join(allowed) or 'none'})"
            )
    cls: Any = POLICIES[key]
    return cls(tree, **engine, **options)


def admit(
    scheduler: LocalScheduler,
    token_budget: int,
    max_requests: int,
    *,
    head_budget: int | None = None,
) -> list[Admission]:
    """One engine step's admissions from a local scheduler, ``token_budget``
    being what is left of the step's prefill budget.

    The engine-step convention over the core's oversize rule (see the module
    docs): ``scheduler.schedule(token_budget, max_requests,
    oversize_budget=head_budget or 0)``. ``head_budget`` given (a positive
    number of tokens: the engine has no other prefill under way, so
    ``token_budget`` is its whole step): if nothing fits, the policy's next
    request is admitted alone within ``head_budget`` tokens of room (e.g. the
    free KV cache) and prefilled in chunks over several steps. ``None``
    (another prefill is under way): the rule is off, so a request larger than
    what is left waits for a step of its own. Nothing when ``max_requests <=
    0``, nor when ``token_budget <= 0`` without a ``head_budget``.
    """
    room = 0 if head_budget is None else max(head_budget, 0)
    if max_requests <= 0 or (token_budget <= 0 and room == 0):
        return []
    return scheduler.schedule(max(token_budget, 0), max_requests, oversize_budget=room)


__all__ = [
    "DLPM",
    "FCFS",
    "LPM",
    "POLICIES",
    "POLICY_INFO",
    "POLICY_OPTIONS",
    "PolicyInfo",
    "StateField",
    "VARIANTS",
    "VTC",
    "Admission",
    "LocalScheduler",
    "Scheduler",
    "admit",
    "make_scheduler",
    "policy_info",
    "policy_name",
]
