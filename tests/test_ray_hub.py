"""The shared view's faster channel (fairq.ray.hub), no cluster: the hub's
posts and cursor, a router's link that never raises, and two routers of one
deployment that learn each other's placements from the hub before any
routing stats arrive (test_ray_serve.py runs the hub as a Ray actor)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray.serve", reason="needs fairq[ray] (pip install '.[ray]')")
pytest.importorskip("httpx", reason="Ray's router test utilities import httpx")

from test_ray_router import PREFIX, make_router, run  # noqa: E402
from test_ray_view import Deployment, send  # noqa: E402

from fairq.ray import RouterOptions  # noqa: E402
from fairq.ray.hub import RETRY_S, HubLink, ViewHub  # noqa: E402


class LocalHub:
    """A :class:`ViewHub` behind the awaitable calls a router makes."""

    def __init__(self, hub: ViewHub) -> None:
        self.hub = hub
        self.down = False
        self.gate: Any = None  # an asyncio.Event a placement waits on

    def send(self, router: str, events: list[Any]) -> None:
        if self.down:
            raise ConnectionError("hub gone")
        self.hub.post(router, events)

    async def post(self, router: str, events: list[Any]) -> int:
        if self.down:
            raise ConnectionError("hub gone")
        return self.hub.post(router, events)

    async def wait(
        self, cursor: int | None, router: str, wait_s: float, after: float | None = None
    ) -> tuple[int, list[Any], int]:
        if self.down:
            raise ConnectionError("hub gone")
        return await self.hub.wait(cursor, router, wait_s, after)

    async def place(self, key: str, replicas: list[str], proposed: str, slack: int) -> str:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise ConnectionError("hub gone")
        return self.hub.place(key, replicas, proposed, slack)


def ev(rid: str) -> tuple[str, str, list[int], int, str, float]:
    return (rid, "t", [1, 2], 2, "r0", 0.0)


def test_the_hub_numbers_posts_and_gives_each_router_the_others() -> None:
    hub = ViewHub(keep=4)
    assert hub.since(None, "a") == (0, [], 0)  # a first pull: from now on
    hub.post("a", [ev("1"), ev("2")])
    hub.post("b", [ev("3")])
    assert hub.since(0, "a") == (3, [ev("3")], 0)
    assert hub.since(0, "b") == (3, [ev("1"), ev("2")], 0)
    assert hub.since(3, "b") == (3, [], 0)
    hub.post("a", [ev(str(i)) for i in range(4, 8)])  # more than it keeps
    cursor, new, lost = hub.since(3, "b")
    assert (cursor, [e[0] for e in new], lost) == (7, ["4", "5", "6", "7"], 0)
    cursor, new, lost = hub.since(1, "b")
    assert (cursor, lost) == (7, 2)  # posts 1 and 2 were dropped


def test_a_link_posts_pulls_and_survives_a_lost_hub() -> None:
    async def go() -> None:
        hub = ViewHub()
        local = LocalHub(hub)
        now = [0.0]
        connects = []

        async def connect() -> LocalHub:
            connects.append(now[0])
            return local

        a = HubLink("a", connect, 0.01, clock=lambda: now[0])
        b = HubLink("b", connect, 0.01, clock=lambda: now[0])
        assert await b.sync() == []
        a.note(ev("1"))  # before a reached the hub: kept for its first sync
        assert await a.sync() == []  # its own post is not pulled back
        assert [e[0] for e in await b.sync()] == ["1"]
        assert a.pause_s() == 0.0
        a.note(ev("1b"))  # connected: posted at once
        assert a.counters["hub_posted"] == 2
        assert [e[0] for e in await b.sync()] == ["1b"]
        # the hub goes away: nothing raises, the post waits, a retry later
        local.down = True
        a.note(ev("2"))
        assert a.counters["hub_errors"] == 1
        assert await a.sync() == []
        assert a.counters["hub_errors"] == 2
        assert a.pause_s() == pytest.approx(RETRY_S)
        local.down = False
        now[0] += RETRY_S
        assert await a.sync() == []
        assert len(connects) == 3  # a reconnected
        assert a.counters["hub_posted"] == 3
        assert [e[0] for e in await b.sync()] == ["2"]

    run(go())


def test_a_late_first_pull_brings_what_was_posted_since_the_link_was_built() -> None:
    """Reaching the hub took seconds in Serve, and a first pull from the
    hub's present lost every dispatch made meanwhile (4 routers: none of
    the others' dispatches arrived); it now brings those made since the
    link was built, never older ones."""

    async def go() -> None:
        hub = ViewHub()
        local = LocalHub(hub)

        async def connect() -> LocalHub:
            return local

        def at(rid: str, sent: float) -> tuple[str, str, list[int], int, str, float]:
            return (rid, "t", [1, 2], 2, "r0", sent)

        hub.post("a", [at("before", 5.0)])
        b = HubLink("b", connect, 0.01, wall=lambda: 10.0)
        hub.post("a", [at("meanwhile", 12.0)])
        hub.post("b", [at("its own", 13.0)])
        assert [e[0] for e in await b.sync()] == ["meanwhile"]
        hub.post("a", [at("next", 14.0)])
        assert [e[0] for e in await b.sync()] == ["next"]
        assert hub.since(None, "b") == (4, [], 0)  # no time: from now on

    run(go())


def routers(hub: ViewHub, **options: Any) -> tuple[Any, Any]:
    """Two routers of one deployment sharing ``hub``."""
    out = []
    for _ in range(2):
        r = make_router(view_hub=True, **options)

        async def connect() -> LocalHub:
            return LocalHub(hub)

        r.hub._connect = connect
        out.append(r)
    return out[0], out[1]


def test_a_pull_waits_at_the_hub_for_news() -> None:
    async def go() -> None:
        import asyncio
        import time

        hub = ViewHub()
        cursor, _, _ = await hub.wait(None, "b", 5.0)  # a first pull: at once
        t0 = time.monotonic()
        waiting = asyncio.ensure_future(hub.wait(cursor, "b", 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        hub.post("b", [ev("own")])  # its own post does not answer it...
        await asyncio.sleep(0.05)
        hub.post("a", [ev("1")])  # ...another router's does, at once
        _, new, _ = await waiting
        assert [e[0] for e in new] == ["1"]
        assert time.monotonic() - t0 < 2.0
        # nothing new: it returns empty after wait_s
        assert (await hub.wait(cursor + 2, "b", 0.05))[1] == []

    run(go())


def test_a_router_learns_the_others_placement_from_the_hub() -> None:
    async def go() -> None:
        dep = Deployment()
        a, b = routers(ViewHub(), worker_quantum=10_000)
        dep.publish(a, b)  # the replicas, no requests yet
        await b._sync_hub()  # b's first pull: its cursor
        pr, i = await send(a, dep, "x", PREFIX)
        await a._sync_hub()  # a posts
        await b._sync_hub()  # b pulls: no routing stats have come yet
        sb = b.slot_of(dep.reps[i].replica_id)
        assert b.dispatcher.held_len(sb, PREFIX) == len(PREFIX)
        assert b.dispatcher.deficit("x", sb) == -len(PREFIX)
        assert b.view.counters["hub_dispatches"] == 1
        assert b.dispatcher.external_load[sb] == 1  # in the replica's load at once
        # the document's next request, through b, goes where a put it,
        # although b's own loads would have chosen either
        _, j = await send(b, dep, "x", PREFIX)
        assert j == i
        # a publication made before a's request reached the replica does not
        # drop it from the load
        b.view.on_snapshot(sb, {"inflight": [], "time": 1.0})
        assert b.dispatcher.external_load[sb] == 1
        # the replica's start event comes later through the stats: not again
        before = b.dispatcher.deficit("x", sb)
        dep.publish(a, b)
        assert b.view.counters["view_dispatches"] == 0
        assert b.dispatcher.deficit("x", sb) == before
        assert b.dispatcher.external_load[sb] == 1  # listed now, counted once
        # it finishes: out of the load
        a.on_request_completed(dep.reps[i].replica_id, pr.metadata.internal_request_id)
        dep.finish(i, pr, 4)
        dep.publish(a, b)
        assert b.dispatcher.external_load[sb] == 0
        assert b.stats()["hub"]["hub_pulled"] == 1
        age = b.stats()["hub_age"]
        assert age["n"] == 1 and 0 <= age["p50_s"] < 5
        # a post naming a replica b does not know is skipped
        a.hub.note(("other", "x", [1], 1, "not-a-replica", 0.0))
        await a._sync_hub()
        await b._sync_hub()
        assert b.view.counters["hub_dispatches"] == 1

    run(go())


def test_the_router_syncs_in_the_background() -> None:
    async def go() -> None:
        import asyncio

        dep = Deployment()
        a, b = routers(ViewHub(), view_hub_wait_s=0.05)
        dep.publish(a, b)
        await send(b, dep, "w", [5, 6, 7])  # starts b's loop
        await asyncio.sleep(0.05)
        _, i = await send(a, dep, "x", PREFIX)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if b.view.counters["hub_dispatches"]:
                break
        assert b.view.counters["hub_dispatches"] == 1
        assert b.dispatcher.held_len(b.slot_of(dep.reps[i].replica_id), PREFIX) == len(PREFIX)

    run(go())


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"view_hub": 1}, TypeError, "view_hub must be a bool"),
        ({"view_hub": True, "shared_view": False}, ValueError, "view_hub needs shared_view"),
        ({"view_hub_wait_s": 0}, ValueError, "view_hub_wait_s must be a finite number > 0"),
        ({"view_hub_wait_s": float("nan")}, ValueError, "view_hub_wait_s"),
    ],
)
def test_bad_hub_options_name_the_field(options: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        RouterOptions(**options)


# --- the agreed first placement (hub_placement) ------------------------------


def test_the_hub_answers_every_router_from_one_table() -> None:
    hub = ViewHub()
    assert hub.place("d1", ["r0", "r1"], "r1", 0) == "r1"
    assert hub.place("d2", ["r0", "r1"], "r1", 0) == "r0"  # r1 holds one more
    assert hub.place("d1", ["r0", "r1"], "r0", 0) == "r1"  # placed before
    assert hub.documents.placements() == {"r0": 1, "r1": 1}


DOC = [7000 + t for t in range(300)]  # past the shared prefix: a document


def placing_routers(hub: ViewHub) -> tuple[Any, Any]:
    return routers(hub, worker_quantum=10_000, hub_placement=True)


def test_routers_place_a_new_document_where_the_hub_agrees() -> None:
    async def go() -> None:
        dep = Deployment()
        a, b = placing_routers(ViewHub())
        dep.publish(a, b)
        await a._sync_hub()
        await b._sync_hub()  # both connected; neither syncs again below
        _, i = await send(a, dep, "x", DOC)
        assert a.hub.counters["hub_placed"] == 1
        # b has not seen a's dispatch, and its own loads point away from replica i
        sb = b.slot_of(dep.reps[i].replica_id)
        loads = b.dispatcher.external_load
        loads[sb] = 5
        b.dispatcher.external_load = loads
        pr, j = await send(b, dep, "y", DOC + [1, 2])  # the same document, another question
        assert j == i and b.hub.counters["hub_placed"] == 1
        # moved there once, charged there once
        assert b.dispatcher.worker_of(pr.metadata.internal_request_id) == sb
        assert b.dispatcher.queue_sizes[sb] == 1 and sum(b.dispatcher.queue_sizes) == 1
        assert b.counters["dispatched"] == 1
        # and the replica D2LPM first chose is not believed to hold it
        other_slot = b.slot_of(dep.reps[1 - i].replica_id)
        assert b.dispatcher.held_len(other_slot, DOC) == 0
        # another document: to the replica with fewer documents, whatever the loads
        other = [8000 + t for t in range(300)]
        _, k = await send(b, dep, "y", other)
        assert k != i
        # b holds it now: its next request is D2LPM's to place, the hub is not asked
        await send(b, dep, "y", other)
        # nor for a prompt with fewer than DOCUMENT_KEY_TOKENS new tokens
        await send(b, dep, "y", [9000 + t for t in range(50)])
        assert b.hub.counters["hub_placed"] == 2
        assert b.hub.counters["hub_place_fallbacks"] == 0
        # the hub gone: the router places the document itself, nothing lost
        b.hub._hub.down = True
        pr, _ = await send(b, dep, "y", [6000 + t for t in range(300)])
        assert b.hub.counters["hub_place_fallbacks"] == 1
        assert pr.metadata.internal_request_id in b.dispatcher

    run(go())


def test_a_slow_or_absent_hub_leaves_the_placement_to_the_router(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def go() -> None:
        import asyncio

        import fairq.ray.hub as hubmod

        monkeypatch.setattr(hubmod, "PLACE_TIMEOUT_S", 0.05)
        dep = Deployment()
        hub = ViewHub()
        a, _ = placing_routers(hub)
        started = asyncio.Event()
        calls = []

        async def slow_connect() -> LocalHub:  # the actor's process still starting
            calls.append("slow")
            await started.wait()
            return LocalHub(hub)

        a.hub._connect = slow_connect
        dep.publish(a)  # the router's hub loop starts connecting
        pr, _ = await send(a, dep, "x", DOC)  # waits for the connection: too long
        assert a.hub.counters["hub_place_fallbacks"] == 1
        assert pr.metadata.internal_request_id in a.dispatcher  # D2LPM's choice stands
        started.set()  # the same attempt, not cancelled, connects
        await send(a, dep, "x", [5000 + t for t in range(300)])
        assert a.hub.counters["hub_placed"] == 1 and calls == ["slow"]
        # a hub that does not answer in time
        a.hub._hub.gate = asyncio.Event()
        pr, _ = await send(a, dep, "x", [6000 + t for t in range(300)])
        assert a.hub.counters["hub_place_fallbacks"] == 2
        assert pr.metadata.internal_request_id in a.dispatcher
        # a hub that cannot be reached: one try, then none for RETRY_S
        a.hub._hub.gate.set()

        async def refused() -> LocalHub:
            calls.append("refused")
            raise ConnectionError("no hub")

        a.hub._connect = refused
        a.hub._hub = a.hub._connecting = None  # as after a failed sync
        await send(a, dep, "y", [9000 + t for t in range(300)])
        await a._sync_hub()  # the failure counted: a pause before the next try
        await send(a, dep, "y", [11000 + t for t in range(300)])
        assert a.hub.counters["hub_place_fallbacks"] == 4
        assert calls.count("refused") == 2 and a.hub.pause_s() > 0
        assert a.hub.counters["hub_errors"] >= 1

    run(go())


def test_a_request_cancelled_while_the_hub_places_it_is_not_dispatched() -> None:
    async def go() -> None:
        import asyncio

        from test_ray_router import body, names, request

        dep = Deployment()
        a, _ = placing_routers(ViewHub())
        dep.publish(a)
        await a._sync_hub()
        a.hub._hub.gate = gate = asyncio.Event()
        pr = request(body("x", DOC))
        choosing = asyncio.ensure_future(a.choose_replicas(dep.reps, pr))
        await asyncio.sleep(0.01)
        pr.future.cancel()
        gate.set()
        ranks = await choosing
        assert sorted(names(ranks)[0]) == ["r0", "r1"]  # Ray's to drop
        assert pr.metadata.internal_request_id not in a.dispatcher
        assert a.counters["dispatched"] == 0

    run(go())


def test_hub_placement_needs_the_hub() -> None:
    with pytest.raises(ValueError, match="hub_placement needs view_hub"):
        RouterOptions(hub_placement=True)
    with pytest.raises(TypeError, match="hub_placement must be a bool"):
        RouterOptions(view_hub=True, hub_placement=1)
