"""Each tenant through one ingress router, the tenants spread evenly.

Several ingress replicas each run their own D2LPM router. A tenant whose
requests go through one of them is charged by one router only, so its
credit is never spent twice (docs/results/routers.md, "Where the locality
goes"). Ray Serve's ``ConsistentHashRouter`` keys each request to a replica
by its session id (the ``x-session-id`` header), but a hash ring spreads a
handful of sessions unevenly: in fairq's runs it put all six tenants on one
of two routers, and on three of four (docs/results/ray_vllm.md).

:class:`BalancedSessionRouter` keeps the session affinity and the hash
ring's fallback order, and chooses the owner differently: a session seen
for the first time goes to the replica owning the fewest sessions (ties in
the ring's order for that session), and stays there while that replica
lives. Sessions are remembered up to :data:`MAX_SESSIONS`, least recently
used first out; a forgotten session is placed again the same way. Requests
without a session id spread over the replicas as Serve does.

The owners are this router's: Serve runs one per HTTP proxy (one per node),
so with several proxies each balances the sessions it sees, and a session
reaching two proxies may have two owners. ``fairq_vllm_app(ingress_affinity=
True)`` puts it on the ingress deployment.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

from ray.serve.experimental.consistent_hash_router import ConsistentHashRouter

__all__ = ["MAX_SESSIONS", "BalancedSessionRouter"]

#: Sessions a router remembers (least recently used forgotten first).
MAX_SESSIONS = 65536


class BalancedSessionRouter(ConsistentHashRouter):
    """Ray Serve request router: each session to one replica, the sessions
    spread evenly over the replicas (see the module doc). Its options are
    ``ConsistentHashRouter``'s (``num_fallback_replicas``, ...)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: session id -> its replica's id, least recently used first
        self._owner: OrderedDict[str, Any] = OrderedDict()
        #: replica id -> sessions it owns
        self._owned: Counter[Any] = Counter()

    def _routing_key(self, pending_request: Any) -> str | None:
        """The session id alone (None without one: the request spreads)."""
        if pending_request is None:
            return None
        return pending_request.metadata.session_id or None

    def _rebuild_ring(self, new_snapshot: Any) -> None:
        super()._rebuild_ring(new_snapshot)
        for session, replica in list(self._owner.items()):
            if replica not in new_snapshot:  # its replica is gone: placed again
                del self._owner[session]
                self._owned[replica] -= 1
        for replica in [r for r in self._owned if r not in new_snapshot]:
            del self._owned[replica]

    def _lookup_ranked_replicas(self, routing_key: str) -> list[Any]:
        """The session's owner first, then the ring's fallbacks for it."""
        live = self._replica_set_snapshot
        if not live:
            return []
        owner = self._owner.get(routing_key)
        if owner is None:
            fallbacks = self._num_fallback_replicas
            self._num_fallback_replicas = len(live)  # the ring's whole order
            try:
                order = super()._lookup_ranked_replicas(routing_key)
            finally:
                self._num_fallback_replicas = fallbacks
            fewest = min(self._owned[r] for r in live)
            owner = next(r for r in order if self._owned[r] == fewest)
            self._owner[routing_key] = owner
            self._owned[owner] += 1
            if len(self._owner) > MAX_SESSIONS:
                _, old = self._owner.popitem(last=False)
                self._owned[old] -= 1
        else:
            self._owner.move_to_end(routing_key)
        ranked = super()._lookup_ranked_replicas(routing_key)
        return [owner] + [r for r in ranked if r != owner][: self._num_fallback_replicas]
