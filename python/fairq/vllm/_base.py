"""The vLLM-compatible queue interface: ``RequestQueue``, ``SchedulingPolicy``.

Kept free of any Rust or vLLM import so other fairq modules (for example the
WFQ queue in :mod:`fairq.vllm.wfq`) can subclass :class:`RequestQueue` cheaply.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import Any

__all__ = ["RequestQueue", "SchedulingPolicy"]


class SchedulingPolicy(Enum):
    """Queue policies :func:`fairq.vllm.create_request_queue` can build.

    ``FCFS`` and ``PRIORITY`` have the values and meaning of vLLM's own
    ``SchedulingPolicy``; ``WFQ`` is fairq's weighted fair queuing across
    clients (:class:`fairq.vllm.wfq.WFQRequestQueue`); ``VTC``, ``LPM`` and
    ``DLPM`` are fairq's per-tenant policies, which need vLLM's scheduler
    (:mod:`fairq.vllm.fair`, selected with ``FAIRQ_VLLM_POLICY``).
    """

    FCFS = "fcfs"
    PRIORITY = "priority"
    WFQ = "wfq"
    #: The fair policies below run inside vLLM's scheduler
    #: (``fairq.vllm.scheduler``), not as standalone queues.
    VTC = "vtc"
    LPM = "lpm"
    DLPM = "dlpm"


class RequestQueue(ABC):
    """Abstract base class of every request queue (vLLM's interface).

    Requests are arbitrary objects compared by identity. fairq's concrete
    queues are real subclasses of this ABC; :func:`fairq.vllm.install` also
    registers it as a virtual subclass of vLLM's own ``RequestQueue``.
    """

    __slots__ = ()

    @abstractmethod
    def add_request(self, request: Any) -> None:
        """Add a request to the queue according to the policy."""

    @abstractmethod
    def pop_request(self) -> Any:
        """Pop a request from the queue according to the policy."""

    @abstractmethod
    def peek_request(self) -> Any:
        """Peek at the request at the front of the queue without removing it."""

    @abstractmethod
    def prepend_request(self, request: Any) -> None:
        """Prepend a request to the front of the queue."""

    @abstractmethod
    def prepend_requests(self, requests: Iterable[Any]) -> None:
        """Prepend all requests from another queue (any iterable) to the front."""

    @abstractmethod
    def remove_request(self, request: Any) -> None:
        """Remove a specific request from the queue (``ValueError`` if absent)."""

    @abstractmethod
    def remove_requests(self, requests: Iterable[Any]) -> None:
        """Remove multiple specific requests; absent ones are ignored."""

    @abstractmethod
    def __bool__(self) -> bool:
        """Check if queue has any requests."""

    @abstractmethod
    def __len__(self) -> int:
        """Get number of requests in queue."""

    @abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """Iterate over the queue according to the policy."""
