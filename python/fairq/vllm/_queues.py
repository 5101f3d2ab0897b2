"""fairq's FCFS and priority queues: Rust cores with the vLLM ABC mixed in.

Each class subclasses its Rust core first (so every method is the core's,
one FFI call) and :class:`~fairq.vllm.RequestQueue` second (so ``isinstance``
checks against the ABC hold without a Python-level wrapper).
"""

from __future__ import annotations

from fairq._core import FCFSQueueCore, PriorityQueueCore
from fairq.vllm._base import RequestQueue

__all__ = ["FCFSRequestQueue", "PriorityRequestQueue"]


class FCFSRequestQueue(FCFSQueueCore, RequestQueue):
    """First-come-first-served queue with vLLM's ``FCFSRequestQueue`` semantics.

    ``add_request`` appends, ``pop_request`` pops the oldest (``IndexError``
    when empty), ``prepend_request`` puts one at the front and
    ``prepend_requests(rs)`` puts ``rs`` at the front in *reverse* order of
    appearance (``deque.extendleft``). Requests are compared by identity; the
    same object may be queued more than once, as in a deque, and
    ``remove_request`` removes its first occurrence in queue order in O(1)
    (``ValueError`` if absent). ``remove_requests`` removes every occurrence
    of each given request and ignores absent ones. ``in`` is O(1).
    Iteration yields a snapshot in queue order; ``queue[i]`` indexes like a
    deque (negative indices, ``IndexError``), O(1) at both ends.
    """

    __slots__ = ()


class PriorityRequestQueue(PriorityQueueCore, RequestQueue):
    """Priority queue with vLLM's ``PriorityRequestQueue`` semantics.

    Ordered by ``(priority, arrival_time, request_id)`` ascending, read once
    at ``add_request``, then by insertion. ``priority`` and ``arrival_time``
    are ``int`` or ``float`` (compared exactly, as Python does; NaN is a
    ``ValueError``; integers must fit in 64 bits); ``request_id`` follows the
    one request-id rule of every fairq API: a ``str`` (code-point order, lone
    surrogates included) or an integer within 64 bits (numpy integers too,
    not ``bool``), and every integer id sorts before every ``str`` id. A
    missing attribute is a ``TypeError`` naming it. Adding an object that is
    already queued is a ``ValueError``. ``prepend_request(s)`` is the same as
    ``add_request`` (all-or-nothing for a batch);
    ``remove_request`` is O(log n) (``ValueError`` if absent); iteration
    yields a snapshot in priority order without changing the queue.
    """

    __slots__ = ()
