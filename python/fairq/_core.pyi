"""Type stubs for the Rust extension ``fairq._core``.

Each section belongs to one core module (rust/python/<name>.rs).
"""

from array import array
from collections.abc import Hashable, Sequence
from typing import Any, Literal, SupportsIndex, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self, disjoint_base

__version__: str
__all__ = [
    "Admission",
    "ClientRoundRobin",
    "D2LPM",
    "DLPM",
    "Dispatcher",
    "DualPhaseQueue",
    "FCFS",
    "FCFSQueueCore",
    "LAS",
    "LPM",
    "LeastLoaded",
    "LocalScheduler",
    "PrefixAffinity",
    "PriorityQueueCore",
    "QueueFull",
    "RadixTree",
    "RoundRobin",
    "VTC",
    "WFQQueue",
    "_DRRCore",
    "__version__",
    "_drr_check_class",
    "as_tokens",
    "policies",
]

TokenIds = (
    Sequence[int] | npt.NDArray[np.integer[Any]] | bytes | bytearray | memoryview | array[int]
)

# A request id as every API accepts it (one rule, rust/request_id.rs): a str
# (lone surrogates included) or an int within 64 bits (int subclasses and
# ``__index__`` integers such as numpy's; not bool). Ids come back as int or str.
RequestIdLike = str | int | SupportsIndex

class QueueFull(RuntimeError):
    """A push would exceed a per-class limit; nothing was enqueued.

    ``args`` is ``(message, class_name, limit, current, max)`` where ``limit`` is
    the field: ``"request_queue_limit_per_worker"``,
    ``"raw_isl_token_queue_limit_per_worker"``, ``"cached_token_queue_limit_per_worker"``
    (``max`` is the per-worker limit times ``num_workers``, ``current`` the usage
    before the push) or ``"max_queued_requests"`` / ``"max_queued_tokens"``
    (``current`` is the usage the push would have made).
    """

    @property
    def class_name(self) -> str: ...
    @property
    def limit(self) -> str: ...
    @property
    def current(self) -> int: ...
    @property
    def max(self) -> int: ...

# --- tokens ---------------------------------------------------------------
def as_tokens(tokens: TokenIds, field: str = "tokens") -> list[int]: ...

# --- request queues (rust/python/request_queues.rs) --------------------------------------------
from collections.abc import Iterable as _Iterable  # noqa: E402
from collections.abc import Iterator as _Iterator  # noqa: E402

@disjoint_base
class FCFSQueueCore:
    """Rust half of ``fairq.vllm.FCFSRequestQueue`` (use that class)."""

    def __new__(cls) -> Self: ...
    def add_request(self, request: Any, /) -> None: ...
    def pop_request(self) -> Any: ...
    def peek_request(self) -> Any: ...
    def prepend_request(self, request: Any) -> None: ...
    def prepend_requests(self, requests: _Iterable[Any]) -> None: ...
    def remove_request(self, request: Any) -> None: ...
    def remove_requests(self, requests: _Iterable[Any]) -> None: ...
    def __contains__(self, request: object, /) -> bool: ...
    def __getitem__(self, index: SupportsIndex, /) -> Any: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> _Iterator[Any]: ...

@disjoint_base
class PriorityQueueCore:
    """Rust half of ``fairq.vllm.PriorityRequestQueue`` (use that class)."""

    def __new__(cls) -> Self: ...
    def add_request(self, request: Any, /) -> None: ...
    def pop_request(self) -> Any: ...
    def peek_request(self) -> Any: ...
    def prepend_request(self, request: Any) -> None: ...
    def prepend_requests(self, requests: _Iterable[Any]) -> None: ...
    def remove_request(self, request: Any) -> None: ...
    def remove_requests(self, requests: _Iterable[Any]) -> None: ...
    def __contains__(self, request: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __iter__(self) -> _Iterator[Any]: ...

# --- drr (rust/python/drr.rs) ----------------------------------------------
from collections.abc import Callable, Iterable, Mapping  # noqa: E402  (kept in this section)

_WorkerInts = Sequence[int] | npt.NDArray[np.integer[Any]]

def _drr_check_class(fields: Mapping[str, Any]) -> None:
    """Validate one policy class's fields with the core's resolver (raises
    ``ValueError``/``TypeError`` naming the field)."""

@disjoint_base
class _DRRCore:
    """Rust core of ``fairq.DRRQueue`` (Deficit Round Robin across policy classes).

    ``config``: a parsed policy document (Dynamo's or fairq's schema), or None
    for the synthetic ``default`` class (``document=True``: None is an empty
    document and rejected). ``model``: which ``models:`` profile to use.
    ``num_workers``: eligible workers the ``*_per_worker`` limits scale with.
    """

    def __new__(
        cls,
        config: Mapping[str, Any] | None = None,
        model: str | None = None,
        num_workers: int | None = None,
        *args: Any,
        document: bool = False,
        **kwargs: Any,
    ) -> _DRRCore: ...
    def push(
        self,
        item: Any,
        class_name: str,
        cost: int,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int: ...
    def _push_snapshot(
        self,
        item: Any,
        class_name: str,
        raw_isl_tokens: int,
        cached_tokens: int,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int: ...
    def push_request(
        self,
        item: Any,
        policy_family: str | None = None,
        raw_isl_tokens: int = 0,
        cached_tokens: int = 0,
        *,
        strict_priority: int = 0,
        priority_jump: float = 0.0,
        arrival: float | None = None,
    ) -> int:
        """Classify by family and exact uncached tokens, snapshot the cost
        ``max(1, raw - cached)`` and enqueue; returns the ticket. Errors
        (including ``QueueFull``) enqueue nothing."""
    def classify(self, policy_family: str | None, uncached_tokens: int) -> str:
        """The class a request of ``policy_family`` with exactly
        ``uncached_tokens`` uncached tokens goes to."""
    def pop(
        self,
        blocked: Iterable[str] | None = None,
        dispatchable: Callable[[str, Any], bool] | None = None,
        *,
        active_prefill_tokens: _WorkerInts | None = None,
        max_num_batched_tokens: int | _WorkerInts | None = None,
    ) -> tuple[str, Any] | None:
        """One DRR arbitration; with a load snapshot (one int per eligible
        worker) classes whose worker pool is busy are blocked. O(C + R*W)."""
    def remove(self, ticket: int) -> Any: ...
    def deficit(self, class_name: str) -> int: ...
    def depth(self, class_name: str) -> int: ...
    def head(self, class_name: str) -> Any | None: ...
    def head_cost(self, class_name: str) -> int | None: ...
    @property
    def cursor(self) -> str: ...
    @property
    def class_names(self) -> list[str]: ...
    @property
    def num_workers(self) -> int:
        """Eligible workers the per-worker limits scale with (settable)."""
    @num_workers.setter
    def num_workers(self, value: int) -> None: ...
    def _profile(self) -> dict[str, Any]: ...
    def state_dict(self) -> dict[str, Any]:
        """Each class's credit and counters, the cursor, ``num_workers``."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()`` into this empty queue (same policy)."""
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def stats(self) -> dict[str, dict[str, Any]]: ...

# --- wfq (rust/python/wfq.rs) ----------------------------------------------
from collections.abc import Iterator as _WfqIterator  # noqa: E402
from typing import Literal as _WfqLiteral  # noqa: E402

_WfqClock = _WfqLiteral["start", "finish"]

@disjoint_base
class WFQQueue:
    """Weighted Fair Queuing on per-flow virtual finish times (see ``fairq.wfq``).

    ``virtual_clock``: ``"start"`` (default; ``V = max(V, S)`` on pop) or
    ``"finish"`` (``V = max(V, F)`` on pop: bounded waiting); other values
    raise ``ValueError``.
    """

    def __new__(cls, *, virtual_clock: _WfqClock = "start") -> Self: ...
    @property
    def virtual_clock(self) -> _WfqClock: ...
    def state_dict(self) -> dict[str, Any]:
        """Virtual clock and time, flows' ``F_last``, waiting items' tags."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore into this empty queue; then add the waiting items again, in order."""
    @property
    def pending_readds(self) -> int: ...
    def add(
        self,
        item: Any,
        *,
        tokens: float,
        flow: Any = None,
        weight: float = 1.0,
        arrival: float = 0.0,
    ) -> None: ...
    def pop(self) -> Any: ...
    def peek(self) -> Any: ...
    def remove(self, item: Any) -> None: ...
    def discard(self, item: Any) -> bool: ...
    def prepend(
        self,
        item: Any,
        *,
        tokens: float | None = None,
        flow: Any = None,
        weight: float = 1.0,
        arrival: float = 0.0,
    ) -> None: ...
    def remembers(self, item: Any) -> bool: ...
    def forget(self, item: Any) -> bool: ...
    def check_adds(self, batch: Iterable[tuple[Hashable | None, float, float, float]]) -> None:
        """Raise what adding ``(flow, tokens, weight, arrival)`` rows in order would raise."""
    def update_remaining(self, item: Any, remaining: float) -> float: ...
    def tags(self, item: Any) -> dict[str, Any]: ...
    def times(self, item: Any) -> tuple[float, float]: ...
    @property
    def virtual_time(self) -> float: ...
    @property
    def flow_count(self) -> int: ...
    def refund_flow(self, flow: Hashable, tokens: float, weight: float = 1.0) -> float:
        """Give ``flow`` back ``tokens`` it was charged for and did not use:
        ``F_last -= tokens / weight``, never below ``V``. Returns the virtual
        time given back (0.0 for a flow without state)."""
    def flow_last_finish(self, flow: Any) -> float | None: ...
    def share_lead(self, flow: Any) -> float:
        """``F_last - V`` of ``flow`` (0 if no state): how far it is over its share."""
    def items(self) -> list[Any]: ...
    def __iter__(self) -> _WfqIterator[Any]: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __contains__(self, item: object, /) -> bool: ...

# --- dualphase (rust/python/dualphase.rs) ----------------------------------
@disjoint_base
class DualPhaseQueue:
    """Think / output dual-phase queue (see ``fairq.dualphase``)."""

    def __new__(
        cls, think_batch_multiplier: float = 2.5, min_think_reservation: int = 1
    ) -> Self: ...
    @property
    def think_batch_multiplier(self) -> float: ...
    @property
    def min_think_reservation(self) -> int: ...
    def add(self, request_id: Any, item: Any = None, phase: str = "think") -> None: ...
    def remove(self, request_id: Any) -> Any: ...
    def on_phase_event(self, request_id: Any) -> bool: ...
    def phase_of(self, request_id: Any) -> str: ...
    def schedule_phases(
        self, output_budget: int, available_blocks: int
    ) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]: ...
    def schedule(self, output_budget: int, available_blocks: int) -> list[tuple[Any, Any]]: ...
    def ids(self, phase: str) -> list[Any]: ...
    def len(self, phase: str | None = None) -> int: ...
    def metrics(self) -> dict[str, int]: ...
    def state_dict(self) -> dict[str, Any]:
        """Options, metrics and the queued requests' last-served rounds."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore into this empty queue; then re-add each phase in queue order."""
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __contains__(self, request_id: object, /) -> bool: ...

# --- radix (rust/python/radix.rs) ------------------------------------------

Namespace = str | int | None

@final
class RadixTree:
    """Token radix tree modelling an engine's prefix (KV) cache."""

    def __new__(cls, capacity: int | None = None, page_size: int = 1) -> Self: ...
    def match(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def insert(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def lock(self, tokens: TokenIds, namespace: Namespace = None) -> int: ...
    def unlock(self, tokens: TokenIds, namespace: Namespace = None) -> None: ...
    def evict(self, n_tokens: int) -> int: ...
    def truncate(self, tokens: TokenIds, keep: int, namespace: Namespace = None) -> int:
        """Remove what the tree holds on the path of ``tokens`` past its first
        ``keep`` tokens (whole pages): an engine evicted that block, so nothing
        after it can match. Returns the tokens removed; a locked part is a
        ``ValueError`` (nothing changes)."""
    @property
    def size(self) -> int: ...
    @property
    def evictable_size(self) -> int: ...
    @property
    def capacity(self) -> int | None: ...
    @property
    def page_size(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    def __len__(self) -> int: ...
    def _check(self) -> None: ...

# --- sched (rust/python/sched.rs) ------------------------------------------
# LocalScheduler binds every shared method once; each policy's class extends
# it with its constructor and its own getters. policies() is the registry
# (rust/sched/mod.rs) as data: fairq.sched builds its tables from it.

def policies() -> list[dict[str, Any]]:
    """The registered local policies: ``name``, ``class_name``, ``options``,
    ``engine_defaults``, ``needs_tree``, ``refills``, ``stop_at_unfit``,
    ``state_fields`` (dicts ``name``, ``metric``, ``help``)."""

@final
class Admission:
    """One admitted request, as returned by ``schedule``."""

    @property
    def request_id(self) -> str | int: ...
    @property
    def client(self) -> str: ...
    @property
    def item(self) -> Any: ...
    @property
    def input_len(self) -> int: ...
    @property
    def cached_len(self) -> int: ...
    @property
    def extend_len(self) -> int: ...

@disjoint_base
class LocalScheduler:
    """Base of every local scheduler (not constructible): the shared contract."""

    def add(
        self,
        request_id: RequestIdLike,
        client: str,
        tokens: TokenIds,
        item: Any = None,
        namespace: Namespace = None,
    ) -> None:
        """Queue a request; a duplicate ``request_id``, or a prompt longer than
        ``max_prompt_tokens``, is a ``ValueError`` naming it (nothing changes)."""
    def remove(self, request_id: RequestIdLike) -> Any:
        """Remove a waiting request and return its item (unknown: ``KeyError``)."""
    def schedule(
        self,
        token_budget: int,
        max_requests: int | None = None,
        *,
        oversize_budget: int | None = None,
    ) -> list[Admission]:
        """Admit waiting requests in policy order while their extend tokens fit
        ``token_budget`` (and ``max_requests``), charging the policy counters.
        Oversize rule: if that admits nothing and ``max_requests >= 1``, the
        policy's next request is admitted alone (it exceeds the whole budget;
        the engine prefills it in chunks) if its extend tokens fit
        ``oversize_budget`` (None: any; 0: the rule is off, for a budget that
        is only what is left of a step)."""
    def schedule_within_credit(
        self,
        token_budget: int,
        max_requests: int | None = None,
        *,
        oversize_budget: int | None = None,
    ) -> list[Admission]:
        """``schedule`` without refilling: exactly what ``schedule`` would
        admit (same order, same charges, the same oversize rule) up to where
        it would refill (DLPM: no waiting client has credit left), stopping
        there; ``refills`` never moves. FCFS, LPM, VTC (never refill): the
        same as ``schedule``. With no refill needed, one call with
        ``max_requests=k`` equals ``k`` calls with ``max_requests=1`` (the
        later ones with the budget left and ``oversize_budget=0``, none after
        a request admitted alone); ``requeue(..., refund=True)`` undoes each
        admission exactly, and no refill was made on its behalf."""
    def charge_output(self, request_id: RequestIdLike, n_tokens: int = 1) -> None:
        """Charge ``n_tokens`` decoded output tokens of a running request."""
    def recharge_extend(self, request_id: RequestIdLike, extend_len: int) -> int:
        """Replace a running request's charged extend tokens by the engine's
        real value; returns the old value."""
    def requeue(
        self, request_id: RequestIdLike, tokens: TokenIds, item: Any = None, *, refund: bool = False
    ) -> None:
        """A running request goes back to waiting, keeping its place (arrival
        order) and client, matched on ``tokens`` now. ``refund=True``: the
        engine never ran it; its admission's charges are undone.
        ``refund=False``: it was preempted; its charges stand and its next
        admission charges nothing (recomputation is free)."""
    def charged_extend(self, request_id: RequestIdLike) -> int:
        """Extend tokens currently charged for a running request."""
    def finish(self, request_id: RequestIdLike) -> None:
        """A running request is done (unknown: ``KeyError``)."""
    def service(self, client: str) -> float:
        """Tokens served to ``client``: ``w_e * extend + w_q * output``."""
    def set_weight(self, client: str, w: float) -> None:
        """Client weight (> 0, finite) dividing its VTC/DLPM charges."""
    def weight(self, client: str) -> float: ...
    def clients(self) -> list[str]: ...
    def num_waiting(self, client: str) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def tree(self) -> RadixTree | None: ...
    @property
    def max_prompt_tokens(self) -> int | None:
        """The constructor's limit on prompt tokens at ``add`` (None: any)."""
    @property
    def _rematches(self) -> int: ...
    def set_time(self, now: float) -> None:
        """Run on injected time: the clock reads ``now`` seconds from here on
        (finite, not before the last time set: ``ValueError``). Without a
        call, the wall clock. Read by the policies whose charges depend on
        time (LAS's decay)."""
    def state_value(self, client: str) -> float:
        """The policy's per-client number now (its registered state field:
        VTC's counter, DLPM's deficit, LAS's attained service; 0 if none)."""
    def share_lead(self, client: str) -> float:
        """How far ``client`` is over its fair share by the policy's own
        account (larger = further over: VTC's counter, minus DLPM's deficit,
        LAS's attained service, else service / weight; 0 if unknown)."""
    def forget_idle_clients(self) -> int:
        """Forget idle clients that carry no debt (automatic as the table grows)."""
    @property
    def num_clients(self) -> int: ...
    def state_dict(self) -> dict[str, Any]:
        """The fairness state as plain JSON data (not the waiting requests)."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()`` into this (empty) scheduler; then re-add
        the waiting requests in their original order."""
    def __len__(self) -> int:
        """Number of waiting requests."""
    def _check(self) -> None: ...

@final
class FCFS(LocalScheduler):
    """First come, first served."""

    def __new__(
        cls, tree: RadixTree | None = None, *, max_prompt_tokens: int | None = None
    ) -> Self: ...

@final
class LPM(LocalScheduler):
    """Longest prefix match first."""

    def __new__(
        cls,
        tree: RadixTree,
        *,
        max_prompt_tokens: int | None = None,
        stop_at_unfit: bool = False,
        fcfs_above: int | None = None,
        multi_priority: bool = False,
    ) -> Self: ...
    @property
    def stop_at_unfit(self) -> bool:
        """Whether the walk stops at the first request that does not fit
        (SGLang) instead of skipping it (the paper)."""
    @property
    def fcfs_above(self) -> int | None:
        """Waiting requests above which the walk is in arrival order (None: never)."""
    @property
    def multi_priority(self) -> bool:
        """Whether the order is Preble's multi-level priority queue."""

@final
class VTC(LocalScheduler):
    """Virtual Token Counter (artifact rules)."""

    def __new__(
        cls,
        tree: RadixTree | None = None,
        w_in: float = 1.0,
        w_out: float = 2.0,
        *,
        max_prompt_tokens: int | None = None,
    ) -> Self: ...
    def counter(self, client: str) -> float:
        """The client's virtual token counter."""

@final
class DLPM(LocalScheduler):
    """Deficit Longest Prefix Match (paper Algorithm 1)."""

    def __new__(
        cls,
        tree: RadixTree,
        quantum: float | Literal["auto"],
        w_e: float = 1.0,
        w_q: float = 2.0,
        *,
        quantum_scale: float | None = None,
        strict_credit: bool | float | None = None,
        max_prompt_tokens: int | None = None,
    ) -> Self: ...
    @property
    def strict_credit(self) -> bool:
        """Whether a request is admitted only when its charge is below its client's
        deficit (by default: with ``quantum="auto"``, the engines' DLPM; not with
        a number, the paper's Algorithm 1)."""
    def deficit(self, client: str) -> float:
        """The client's deficit counter ``q[c]``."""
    @property
    def refills(self) -> int:
        """Virtual refills so far (a bulk refill of k quanta counts k)."""
    @property
    def quantum(self) -> float:
        """The quantum a refill would use now (fixed, or the automatic one's value)."""
    @property
    def largest_quantum(self) -> float:
        """The largest quantum a refill has used (Theorem 4.1's ``Q*``; 0 before any)."""

@final
class LAS(LocalScheduler):
    """Least attained service per tenant with half-life decay."""

    def __new__(
        cls,
        tree: RadixTree | None = None,
        half_life_s: float = 60.0,
        w_in: float = 1.0,
        w_out: float = 2.0,
        *,
        max_prompt_tokens: int | None = None,
    ) -> Self: ...
    def attained(self, client: str) -> float:
        """The client's attained service now, decayed."""

# --- dispatch (rust/python/dispatch.rs) ------------------------------------

@disjoint_base
class Dispatcher:
    """Base of every dispatcher (not constructible)."""

    def dispatch(self, request_id: RequestIdLike, client: str, tokens: TokenIds) -> int: ...
    def on_finish(self, request_id: RequestIdLike, output_tokens: int) -> int: ...
    def on_evict(self, worker: int, tokens: TokenIds, kept: int = 0) -> int:
        """``worker`` no longer holds ``tokens[:kept + 1]`` (it keeps
        ``tokens[:kept]``); returns the number of token positions it no longer
        holds (0 without a tree)."""
    def worker_of(self, request_id: RequestIdLike) -> int: ...
    def observe_dispatch(
        self, client: str, worker: int, tokens: TokenIds, input_len: int | None = None
    ) -> None:
        """Shared view: another router sent ``client``'s ``tokens`` to ``worker``
        (charged ``w_e * input_len``, default ``len(tokens)``)."""
    def observe_finish(self, client: str, worker: int, output_tokens: int) -> None:
        """Shared view: another router's request on ``worker`` finished."""
    @property
    def external_load(self) -> list[int]:
        """Other routers' requests in flight per worker (the shared view)."""
    @external_load.setter
    def external_load(self, loads: Sequence[int]) -> None: ...
    def withdraw(self, request_id: RequestIdLike) -> int:
        """Undo an in-flight dispatch its worker never served (D2LPM refunds
        the dispatch-time charge); returns the worker."""
    def remove_worker(self, worker: int) -> list[RequestIdLike]:
        """The worker is gone: drop it from the tree, reset its deficits, drop
        its in-flight requests (returned, sorted)."""
    def longest_match(self, tokens: TokenIds) -> tuple[int, list[int]]: ...
    def locality(self, tokens: TokenIds) -> tuple[int, list[int], bool]:
        """``longest_match(tokens)`` and whether that match counts as locality by
        this dispatcher's own rule (D2LPM: something matched and at least
        ``match_threshold`` of the prompt; the others: something matched)."""
    def held_len(self, worker: int, tokens: TokenIds) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def queue_sizes(self) -> list[int]: ...
    @property
    def dispatched_counts(self) -> list[int]: ...
    @property
    def tree_nodes(self) -> int: ...
    @property
    def policy(self) -> str: ...
    def clients(self) -> list[str]: ...
    def forget_idle_clients(self) -> int:
        """Forget clients with nothing in flight (automatic as the table grows)."""
    @property
    def num_clients(self) -> int: ...
    def state_dict(self, include_tree: bool = True) -> dict[str, Any]:
        """The dispatcher's state as plain JSON data (in-flight requests and,
        unless ``include_tree=False``, the global prefix tree)."""
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a ``state_dict()`` (nothing in flight; same policy and
        number of workers)."""
    def __contains__(self, request_id: RequestIdLike, /) -> bool: ...
    def __len__(self) -> int: ...

@final
class D2LPM(Dispatcher):
    def __new__(
        cls,
        num_workers: int,
        worker_quantum: float,
        w_e: float = 1.0,
        w_q: float = 2.0,
        placement_slack: int = 0,
        match_threshold: float = 0.0,
        spread_by_credit: bool = False,
    ) -> Self: ...
    def deficit(self, client: str, worker: int) -> float: ...
    def set_worker_name(self, worker: int, name: str) -> None:
        """Name slot ``worker`` (e.g. its replica id) for the agreed placement."""
    def dispatch_among(
        self, request_id: RequestIdLike, client: str, tokens: TokenIds, workers: Iterable[int]
    ) -> int:
        """``dispatch`` over ``workers`` only (the slots holding a live worker)."""
    def charge_output(self, client: str, worker: int, output_tokens: int) -> bool:
        """Charge ``w_q * output_tokens`` after the request left the table."""
    @property
    def worker_quantum(self) -> float: ...
    @property
    def w_e(self) -> float: ...
    @property
    def w_q(self) -> float: ...
    @property
    def placement_slack(self) -> int: ...
    @property
    def match_threshold(self) -> float: ...
    @property
    def spread_by_credit(self) -> bool: ...

@final
class RoundRobin(Dispatcher):
    def __new__(cls, num_workers: int) -> Self: ...

@final
class LeastLoaded(Dispatcher):
    def __new__(cls, num_workers: int) -> Self: ...

@final
class ClientRoundRobin(Dispatcher):
    def __new__(cls, num_workers: int) -> Self: ...

@final
class PrefixAffinity(Dispatcher):
    def __new__(
        cls,
        num_workers: int,
        abs_threshold: float = 32.0,
        rel_threshold: float = 1.5,
        match_threshold: float = 0.5,
    ) -> Self: ...
    @property
    def thresholds(self) -> tuple[float, float, float]: ...
