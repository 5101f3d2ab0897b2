"""A faster channel for the D2LPM routers' shared view: one named Ray actor.

The shared view (:mod:`fairq.ray.view`) rides on the replicas' routing stats,
which reached the routers 0.4-1.7 s after the fact on a busy 2-core machine
(docs/results/ray_vllm.md): a document asked for every 0.5 s was placed by
two routers before either saw where the other had put it. With
``view_hub=True`` (:class:`fairq.ray.RouterOptions`) every router also posts
each dispatch to one actor per deployment (:class:`ViewHub`, named
``fairq-view-<app>-<deployment>`` in namespace ``fairq``) the moment it
makes it (a call it does not wait for), and keeps one pull waiting at the
hub, which answers as soon as another router posts (or after
``view_hub_wait_s`` with nothing). A router's first pull brings every post
the hub still holds that was made since the router was built: reaching the
hub takes seconds on a busy machine (the actor starts, and a router
connects when it first needs the hub), and the other routers' dispatches
of those seconds must not be lost. A pulled dispatch is applied as
the replica's start event is (:meth:`fairq.ray.view.SharedView.on_start`:
its prefix into the router's tree on that replica, its tenant charged there);
when the start event itself comes through the routing stats it is not
applied again. Loads and finishes still come from the routing stats.

Failure: nothing waits on the hub. The pull runs in the background of the
router's event loop; a post made while the hub is unreachable waits in the
router and goes with the next successful pull. The actor is owned
by the router that created it and dies with it; a router whose call fails
counts it (``hub_errors``), drops its handle and, after
``RETRY_S``, gets or creates the actor again. Meanwhile, and for whatever the
hub lost, the routing stats carry the view as without the hub. A router
sees the posts made after it was built, never older ones.

Agreed first placement (``hub_placement=True``): a request whose prompt
has at least 256 tokens past its longest held prefix (a new document, by
the router's view, :func:`fairq.dispatch.document_key`) is dispatched by D2LPM,
then moved to where the hub says. The hub answers from one table for all
the routers (:class:`fairq.dispatch.FirstPlacement`): a document it placed
before goes where it went (while that replica is among the candidates),
else where the router proposed unless that replica holds more than
``hub_placement_slack`` documents above the fewest, else to the one with the
fewest. So routers place a document alike however stale their views, and
the documents spread evenly over the caches. This is the one call a router
waits for, up to :data:`PLACE_TIMEOUT_S`; past that, or with the hub
unreachable, the router keeps D2LPM's choice (``hub_place_fallbacks``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from itertools import islice
from typing import Any

from fairq.dispatch import FirstPlacement

__all__ = ["HubLink", "ViewHub", "connect_ray", "hub_name"]

#: A posted dispatch: (request id, tenant, prompt head, prompt length,
#: the replica's Serve unique id, wall-clock time of the dispatch).
HubEvent = tuple[str, str, list[int], int, str, float]

#: Seconds before a router that lost the hub tries to reach it again.
RETRY_S = 2.0

#: Posts a router keeps while the hub cannot be reached (the oldest go first).
OUTBOX = 4096

#: Seconds a router waits for the hub's placement of a new document before
#: it places the document by its own view.
PLACE_TIMEOUT_S = 5.0


def hub_name(app: str, deployment: str) -> str:
    """The actor name of a deployment's hub."""
    return f"fairq-view-{app}-{deployment}"


class ViewHub:
    """The posts of a deployment's routers, the most recent ``keep``, each
    numbered. Plain Python: :func:`connect_ray` runs it as a Ray actor, the
    tests call it directly."""

    def __init__(self, keep: int = 65536) -> None:
        self._posts: deque[tuple[str, HubEvent]] = deque(maxlen=keep)
        self._next = 0
        self._news: asyncio.Event | None = None  # set by the next post
        #: the documents placed (hub_placement)
        self.documents = FirstPlacement(keep)

    def place(self, key: str, replicas: list[str], proposed: str, slack: int) -> str:
        """The replica a new document named ``key`` goes to, the same for
        every router (:meth:`fairq.dispatch.FirstPlacement.place`)."""
        return str(self.documents.place(key, replicas, proposed, slack))

    def post(self, router: str, events: list[HubEvent]) -> int:
        """Add ``router``'s dispatches; returns the number the next post gets."""
        for ev in events:
            self._posts.append((router, ev))
        self._next += len(events)
        if self._news is not None:  # wake the pulls waiting for news
            self._news.set()
            self._news = None
        return self._next

    async def wait(
        self, cursor: int | None, router: str, wait_s: float, after: float | None = None
    ) -> tuple[int, list[HubEvent], int]:
        """:meth:`since`, but with nothing new for ``router`` it waits up to
        ``wait_s`` seconds for the next post first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_s
        while True:
            got = self.since(cursor, router, after)
            left = end - loop.time()
            if got[1] or cursor is None or left <= 0:
                return got
            if self._news is None:
                self._news = asyncio.Event()
            try:  # a post wakes it (its own router's too: then it waits on)
                await asyncio.wait_for(self._news.wait(), left)
            except asyncio.TimeoutError:
                pass

    def since(
        self, cursor: int | None, router: str, after: float | None = None
    ) -> tuple[int, list[HubEvent], int]:
        """The posts of other routers numbered ``cursor`` or later, the cursor
        to pass next, and how many wanted posts were already dropped (more
        than ``keep`` since the last pull). A first pull (``cursor`` None)
        brings the posts held that were dispatched at wall-clock ``after`` or
        later (None: none, only the cursor)."""
        first = self._next - len(self._posts)
        if cursor is None:
            if after is None:
                return self._next, [], 0
            new = [ev for r, ev in self._posts if r != router and ev[5] >= after]
            return self._next, new, 0
        start = max(cursor, first)
        new = [ev for r, ev in islice(self._posts, start - first, None) if r != router]
        return self._next, new, start - cursor


class HubLink:
    """One router's connection to its deployment's hub.

    Args:
        me: this router's id (its own posts are not pulled back).
        connect: ``async () -> hub``: ``send(router, events)`` (a post not
            waited for), awaitable ``post``, ``wait`` and ``place`` (:func:`connect_ray`
            for the Ray actor).
        wait_s: the longest a pull waits at the hub for news.
        clock: monotonic seconds (tests pass their own).
        wall: wall-clock seconds, the posts' clock: the first pull brings
            the posts made since the link was built.
    """

    def __init__(
        self,
        me: str,
        connect: Callable[[], Awaitable[Any]],
        wait_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.me = me
        self._born = wall()
        self._connect = connect
        self.wait_s = wait_s
        self._clock = clock
        self._hub: Any = None
        self._connecting: asyncio.Future[Any] | None = None
        self._cursor: int | None = None
        self._outbox: deque[HubEvent] = deque(maxlen=OUTBOX)
        self._next_at = float("-inf")
        self._lock = asyncio.Lock()  # one sync at a time (a post must not go twice)
        #: seconds each of the last 8,192 placements took to answer (or fail)
        self.place_s: deque[float] = deque(maxlen=8192)
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "hub_posted",
                "hub_pulled",
                "hub_lost",
                "hub_errors",
                "hub_connects",
                "hub_placed",
                "hub_place_fallbacks",
            ),
            0,
        )

    def note(self, event: HubEvent) -> None:
        """A dispatch of this router: posted now (not waited for) when the
        hub is reached, else with the next successful sync."""
        if self._hub is not None and not self._outbox:
            try:
                self._hub.send(self.me, [event])
                self.counters["hub_posted"] += 1
                return
            except Exception:
                self.counters["hub_errors"] += 1
        self._outbox.append(event)

    async def place(self, key: str, replicas: list[str], proposed: str, slack: int) -> str | None:
        """The hub's replica for a new document (:meth:`ViewHub.place`),
        connecting first if needed; None when the hub cannot be reached
        (or is within :data:`RETRY_S` of a failure), fails, takes longer
        than :data:`PLACE_TIMEOUT_S` in all or names no candidate: the
        router then keeps its own choice. Never raises."""
        got = None
        t0 = self._clock()
        if self.pause_s() == 0:
            try:
                got = await asyncio.wait_for(
                    self._place(key, replicas, proposed, slack), PLACE_TIMEOUT_S
                )
            except Exception:  # the sync that follows finds out whether the hub is gone
                got = None
            self.place_s.append(self._clock() - t0)
        if got not in replicas:
            self.counters["hub_place_fallbacks"] += 1
            return None
        self.counters["hub_placed"] += 1
        return str(got)

    async def _place(self, key: str, replicas: list[str], proposed: str, slack: int) -> Any:
        hub = await self._connected()
        return await hub.place(key, replicas, proposed, slack)

    async def _connected(self) -> Any:
        """The hub, connected first if needed: one attempt at a time, which
        a caller that stops waiting does not cancel, and whose hub serves
        until a sync fails. Raises what the attempt raised."""
        if self._hub is None:
            fut = self._connecting
            if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
                fut = self._connecting = asyncio.ensure_future(self._connect())
            hub = await asyncio.shield(fut)
            if self._hub is None:
                self._hub = hub
                self.counters["hub_connects"] += 1
        return self._hub

    def pause_s(self) -> float:
        """Seconds before the next sync (0 after a success, what is left of
        :data:`RETRY_S` after a failure)."""
        return max(0.0, self._next_at - self._clock())

    async def sync(self) -> list[HubEvent]:
        """Post what waits to be posted, then pull the others' new posts
        (waiting up to ``wait_s`` at the hub for some). Never raises: a
        failure is counted, the posts are kept for the next try, and the hub
        is reached again after :data:`RETRY_S`."""
        async with self._lock:
            return await self._sync()

    async def _sync(self) -> list[HubEvent]:
        try:
            hub = await self._connected()
            out = list(self._outbox)
            if out:
                await hub.post(self.me, out)
                for _ in out:
                    self._outbox.popleft()
                self.counters["hub_posted"] += len(out)
            first = self._born if self._cursor is None else None
            self._cursor, new, lost = await hub.wait(self._cursor, self.me, self.wait_s, first)
            self.counters["hub_pulled"] += len(new)
            self.counters["hub_lost"] += lost
            self._next_at = self._clock()
            return list(new)
        except Exception:
            self.counters["hub_errors"] += 1
            self._hub = self._connecting = None
            self._cursor = None
            self._next_at = self._clock() + RETRY_S
            return []


class _RayHub:
    """The Ray actor behind :class:`HubLink`'s awaitable calls."""

    def __init__(self, handle: Any) -> None:
        self._h = handle

    def send(self, router: str, events: list[HubEvent]) -> None:
        self._h.post.remote(router, events)  # not waited for

    async def post(self, router: str, events: list[HubEvent]) -> int:
        return int(await self._h.post.remote(router, events))

    async def wait(
        self, cursor: int | None, router: str, wait_s: float, after: float | None = None
    ) -> tuple[int, list[HubEvent], int]:
        cur, new, lost = await self._h.wait.remote(cursor, router, wait_s, after)
        return int(cur), new, int(lost)

    async def place(self, key: str, replicas: list[str], proposed: str, slack: int) -> str:
        return str(await self._h.place.remote(key, replicas, proposed, slack))


def connect_ray(name: str) -> Callable[[], Awaitable[Any]]:
    """``async () -> hub`` for :class:`HubLink`: gets the actor ``name`` in
    namespace ``fairq``, or creates it (owned by this process: it dies with
    it, and the next router to reach for it creates it again)."""

    async def connect() -> Any:
        def get_or_create() -> Any:
            import ray

            actor = ray.remote(num_cpus=0)(ViewHub)
            return actor.options(name=name, namespace="fairq", get_if_exists=True).remote()

        hub = _RayHub(await asyncio.to_thread(get_or_create))
        # connected once it answers: a new actor's process takes seconds to
        # start on a busy machine, and a placement must not wait for that
        await hub.wait(None, "", 0.0)
        return hub

    return connect
