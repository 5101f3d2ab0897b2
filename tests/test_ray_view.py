"""The D2LPM routers' shared view on Ray Serve (fairq.ray.view), no cluster.

Two routers of one deployment read the same replicas' routing stats (built
by fairq.ray.ReplicaFeedback, as a replica would publish them): each must
see the other's requests in flight, its tenants' charges and the prefixes
it placed, never count its own twice, fall back to its own dispatches when
the view ages out, and keep routing whatever the view holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray.serve", reason="needs fairq[ray] (pip install '.[ray]')")
pytest.importorskip("httpx", reason="Ray's router test utilities import httpx")

from test_ray_router import PREFIX, StatsReplica, body, make_router, names, request, run  # noqa: E402

from fairq.ray import ReplicaFeedback, RouterOptions  # noqa: E402
from fairq.ray.view import SharedView  # noqa: E402


class Deployment:
    """Two replicas with their feedback, and routers reading their stats."""

    def __init__(self, n: int = 2) -> None:
        self.reps = [StatsReplica(f"r{i}") for i in range(n)]
        self.fbs = [ReplicaFeedback() for _ in range(n)]

    def take(self, i: int, pr: Any, tenant: str, tokens: list[int]) -> None:
        """Replica ``i`` received the request (it publishes the start)."""
        self.fbs[i].record_start(pr.metadata.internal_request_id, tenant, tokens)

    def finish(self, i: int, pr: Any, out: int) -> None:
        self.fbs[i].record_finish(pr.metadata.internal_request_id, out)

    def publish(self, *routers: Any) -> None:
        for rep, fb in zip(self.reps, self.fbs, strict=True):
            rep.set_stats(fb.routing_stats())
        for r in routers:
            r.update_replicas(self.reps)


async def send(router: Any, dep: Deployment, tenant: str, tokens: list[int]) -> tuple[Any, int]:
    """Route one request through ``router``; the chosen replica takes it."""
    pr = request(body(tenant, tokens))
    ranks = await router.choose_replicas(dep.reps, pr)
    i = int(names(ranks)[0][0][1:])
    router.on_request_routed(pr, dep.reps[i].replica_id, None)
    dep.take(i, pr, tenant, tokens)
    return pr, i


def test_a_router_sees_the_others_load_charges_and_prefixes() -> None:
    async def go() -> None:
        dep = Deployment()
        a, b = make_router(worker_quantum=10_000), make_router(worker_quantum=10_000)
        dep.publish(a, b)
        # router a places tenant x's document on some replica, three times
        sent = [await send(a, dep, "x", PREFIX) for _ in range(3)]
        i = sent[0][1]
        assert all(s[1] == i for s in sent)
        dep.publish(a, b)
        sb = b.slot_of(dep.reps[i].replica_id)
        sa = a.slot_of(dep.reps[i].replica_id)
        # b: a's three requests in flight there, x charged for them, the prefix cached there
        assert b.dispatcher.external_load[sb] == 3
        assert b.dispatcher.held_len(sb, PREFIX) == len(PREFIX)
        assert b.dispatcher.deficit("x", sb) == -3 * len(PREFIX)
        assert b.view.counters["view_dispatches"] == 3
        # a: its own requests are not news (no double count)
        assert a.dispatcher.external_load == [0] * len(a.dispatcher.external_load)
        assert a.dispatcher.queue_sizes[sa] == 3
        assert a.view.counters["view_dispatches"] == 0
        # b sends tenant x's next request where x's document is cached
        _, j = await send(b, dep, "x", PREFIX)
        assert j == i
        # a tenant new to both goes where the load is lower: the other replica
        _, k = await send(b, dep, "y", [9000 + t for t in range(50)])
        assert k != i
        # a's requests finish on the replica: b charges the output, the load drops
        for pr, _ in sent:
            a.on_request_completed(dep.reps[i].replica_id, pr.metadata.internal_request_id)
            dep.finish(i, pr, 10)
        before = b.dispatcher.deficit("x", sb)
        dep.publish(a, b)
        assert b.dispatcher.external_load[sb] == 0
        assert b.dispatcher.deficit("x", sb) == before - 3 * 2 * 10
        assert b.view.counters["view_finishes"] == 3
        # and the same stats again change nothing
        dep.publish(a, b)
        assert b.dispatcher.deficit("x", sb) == before - 3 * 2 * 10

    run(go())


def test_an_old_view_is_dropped_and_routing_goes_on() -> None:
    async def go() -> None:
        dep = Deployment()
        a, b = make_router(), make_router(view_max_age_s=5.0)
        now = [0.0]
        b.view._clock = lambda: now[0]
        dep.publish(a, b)
        for _ in range(4):
            await send(a, dep, "x", PREFIX)
        dep.publish(a, b)
        assert sum(b.dispatcher.external_load) == 4
        now[0] = 6.0  # no new stats for longer than view_max_age_s
        await send(b, dep, "z", [7, 7, 7])
        assert sum(b.dispatcher.external_load) == 0
        assert b.view.counters["view_expired"] == 1
        # a new publication brings the view back
        dep.fbs[0].record_start("late", "w", [1])
        dep.publish(b)
        assert sum(b.dispatcher.external_load) >= 1

    run(go())


def test_view_off_is_the_router_on_its_own() -> None:
    async def go() -> None:
        dep = Deployment()
        a, b = make_router(), make_router(shared_view=False)
        dep.publish(a, b)
        for _ in range(3):
            await send(a, dep, "x", PREFIX)
        dep.publish(a, b)
        assert sum(b.dispatcher.external_load) == 0
        assert b.dispatcher.deficit("x", 0) == 0.0
        assert b.dispatcher.longest_match(PREFIX)[0] == 0
        assert b.view.counters["view_dispatches"] == 0

    run(go())


@pytest.mark.parametrize(
    "entry",
    [
        {"epoch": "e", "events": [[1, "start", "r", "", [1], 1]]},  # no tenant
        {"epoch": "e", "events": [[1, "start", "r", "t", [-1], 1]]},  # bad token
        {"epoch": "e", "events": [[1, "start", "r"]]},  # short
        {"epoch": "e", "events": [], "inflight": 7, "time": 1.0},  # not a list
        {"epoch": "e", "events": [], "inflight": "abc", "time": 1.0},
    ],
)
def test_malformed_view_entries_are_counted_and_routing_goes_on(entry: dict[str, Any]) -> None:
    async def go() -> None:
        router = make_router()
        rep = StatsReplica("r0")
        rep.set_stats({"fairq": entry})
        router.update_replicas([rep])
        errors = router.counters["feedback_errors"] + router.view.counters["view_errors"]
        assert errors == 1
        ranks = await router.choose_replicas([rep], request(body("a", PREFIX)))
        assert names(ranks) == [["r0"]]

    run(go())


def test_replica_feedback_publishes_the_view() -> None:
    fb = ReplicaFeedback(view_tokens=3)
    plain = fb.routing_stats()["fairq"]
    assert "inflight" not in plain  # no record_start yet: the payload as before
    fb.record_start("r1", "a", [5, 6, 7, 8])
    fb.record_start("r2", "b", [], input_len=12)
    entry = fb.routing_stats()["fairq"]
    assert entry["inflight"] == ["r1", "r2"]
    assert entry["events"][0] == [1, "start", "r1", "a", [5, 6, 7], 4]
    assert entry["events"][1] == [2, "start", "r2", "b", [], 12]
    fb.record_finish("r1", output_tokens=3)
    entry = fb.routing_stats()["fairq"]
    assert entry["inflight"] == ["r2"]
    assert entry["events"][-1] == [3, "finish", "r1", 3, "a"]
    with pytest.raises(ValueError, match="tenant"):
        fb.record_start("r3", "", [1])
    with pytest.raises(ValueError, match="tokens"):
        fb.record_start("r3", "a", [-1])
    with pytest.raises(ValueError, match="input_len"):
        fb.record_start("r3", "a", [1], input_len=-2)
    with pytest.raises(ValueError, match="view_tokens"):
        ReplicaFeedback(view_tokens=-1)
    with pytest.raises(ValueError, match="max_inflight"):
        ReplicaFeedback(max_inflight=0)
    assert fb.routing_stats()["fairq"]["inflight"] == ["r2"]  # errors changed nothing
    small = ReplicaFeedback(max_inflight=2)
    for i in range(3):
        small.record_start(f"q{i}", "a")
    assert small.routing_stats()["fairq"]["inflight"] == ["q1", "q2"]


def test_replica_feedback_takes_any_token_sequence_and_refuses_non_ints() -> None:
    fb = ReplicaFeedback(view_tokens=2)
    fb.record_start("g", "a", (t for t in [4, 5, 6]))  # a generator: read once
    fb.record_start("n", "a", np.array([7, 8, 9], dtype=np.int64))
    events = fb.routing_stats()["fairq"]["events"]
    assert events[0] == [1, "start", "g", "a", [4, 5], 3]
    assert events[1] == [2, "start", "n", "a", [7, 8], 3]
    with pytest.raises(ValueError, match="tokens"):
        fb.record_start("f", "a", [1.5, 2])
    assert fb.routing_stats()["fairq"]["inflight"] == ["g", "n"]  # the error changed nothing


def test_view_options_are_validated_naming_the_field() -> None:
    with pytest.raises(TypeError, match="shared_view"):
        RouterOptions(shared_view="yes")
    for bad in (0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="view_max_age_s"):
            RouterOptions(view_max_age_s=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="placement_slack must be an int >= 0, got -1"):
        RouterOptions(placement_slack=-1)
    with pytest.raises(TypeError, match="placement_slack"):
        RouterOptions(placement_slack=1.5)  # type: ignore[arg-type]
    assert RouterOptions(placement_slack=3).dispatcher().placement_slack == 3
    with pytest.raises(ValueError, match="match_threshold must be in"):
        RouterOptions(match_threshold=1.5)
    with pytest.raises(TypeError, match="spread_by_credit"):
        RouterOptions(spread_by_credit=1)  # type: ignore[arg-type]
    d = RouterOptions(match_threshold=0.5, spread_by_credit=True).dispatcher()
    assert (d.match_threshold, d.spread_by_credit) == (0.5, True)


def test_shared_view_never_counts_its_own_requests() -> None:
    import fairq

    d = fairq.D2LPM(2, 100.0)
    v = SharedView(d, remember=2)
    for rid in ("a", "b", "c"):
        v.mine(rid)
    assert not v.is_mine("a") and v.is_mine("b") and v.is_mine("c")  # bounded memory
    v.on_snapshot(1, {"inflight": ["b", "c", "x", "y"], "time": 1.0})
    assert d.external_load == [0, 2]
    v.on_start(1, [9, "start", "c", "t", [1, 2], 2])  # its own: ignored
    assert d.longest_match([1, 2])[0] == 0
    v.on_start(0, [10, "start", "x", "t", np.arange(4).tolist(), 40])
    assert d.held_len(0, [0, 1, 2, 3]) == 4 and d.deficit("t", 0) == -40.0


def test_a_start_the_hub_brings_after_its_finish_is_no_load() -> None:
    """The hub may bring another router's dispatch after the replica's
    routing stats brought its finish: it is charged (history) but not
    counted as in flight, which would hold the replica's load up until the
    view ages out."""
    import fairq

    d = fairq.D2LPM(2, 100.0)
    v = SharedView(d)
    v.on_finish(1, "x", 5, "t")
    v.on_hub_start(1, "x", "t", [1, 2, 3], 3)
    v.on_hub_start(1, "y", "t", [4, 5], 2)  # in flight: it counts
    v.on_snapshot(1, {"inflight": [], "time": 1.0})
    assert d.external_load == [0, 1]
    assert d.deficit("t", 1) == -(2 * 5 + 3 + 2)


def test_own_request_in_flight_or_just_finished_stays_mine() -> None:
    """A request this router dispatched long ago (more than ``remember``
    dispatches since) is still its own while in flight, and once finished
    here its late finish in the view is not charged again."""
    import fairq

    d = fairq.D2LPM(2, 100.0)
    v = SharedView(d, remember=2)
    v.mine("old")
    d.dispatch_among("old", "t", [1, 2, 3], [0])
    for rid in ("n1", "n2", "n3"):
        v.mine(rid)
    assert v.is_mine("old")  # in flight: remembered by the dispatcher
    d.on_finish("old", 0)
    v.mine("old")  # what the router does on completion
    before = d.deficit("t", 0)
    v.on_finish(0, "old", 7, "t")  # its finish, through the view, later
    assert d.deficit("t", 0) == before and v.counters["view_finishes"] == 0


def test_view_age_at_dispatch_is_the_oldest_candidate_publication() -> None:
    import fairq

    now = [100.5]
    v = SharedView(fairq.D2LPM(3, 100.0), wall=lambda: now[0])
    v.note_dispatch([0, 1])  # nothing published yet: no age to count
    assert v.ages() == {"n": 0, "p50_s": None, "p90_s": None, "max_s": None}
    v.on_snapshot(0, {"inflight": [], "time": 100.0})
    v.on_snapshot(1, {"inflight": [], "time": 99.0})
    v.note_dispatch([0, 1])  # slot 1's view is the older: 1.5 s
    v.note_dispatch([0, 2])  # slot 2 never published: slot 0's age, 0.5 s
    now[0] = 99.0  # a stamp from a clock ahead counts as age 0, never negative
    v.note_dispatch([0])
    ages = v.ages()
    assert ages["n"] == 3 and ages["max_s"] == 1.5 and ages["p50_s"] == 0.5
    off = SharedView(fairq.D2LPM(1, 100.0), enabled=False, wall=lambda: 5.0)
    off.on_snapshot(0, {"inflight": [], "time": 1.0})
    off.note_dispatch([0])
    assert off.ages()["n"] == 0  # the view off: it is not used, so it has no age


def test_router_writes_what_it_saw_where_the_environment_says(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from fairq.ray.router import ROUTER_STATS_DIR_ENV

    async def go() -> None:
        dep = Deployment()
        a = make_router()
        dep.publish(a)
        for tenant in ("x", "x", "y"):
            await send(a, dep, tenant, PREFIX)
            dep.publish(a)  # the replicas stamp their view once they hold requests
        a._stats_at = float("-inf")  # the write is throttled to once a second
        dep.publish(a)
        (path,) = tmp_path.iterdir()
        doc = json.loads(path.read_text())
        now = json.loads(json.dumps(a.stats()))
        assert {**doc, "time": 0} == {**now, "time": 0}  # the file holds stats()
        assert doc["counters"]["dispatched"] == 3
        routed = doc["routed"]
        assert sum(n for per in routed.values() for n in per.values()) == 3
        assert sum(per.get("x", 0) for per in routed.values()) == 2
        assert doc["view_age"]["n"] == 2 and doc["shared_view"] is True

    monkeypatch.setenv(ROUTER_STATS_DIR_ENV, str(tmp_path))
    run(go())
    monkeypatch.setenv(ROUTER_STATS_DIR_ENV, str(tmp_path / "missing"))

    async def unwritable() -> None:
        b = make_router()
        rep = StatsReplica("r0")
        b.update_replicas([rep])  # cannot write: logged, and routing goes on
        assert b._stats_dir is None
        assert names(await b.choose_replicas([rep], request(body("a", PREFIX)))) == [["r0"]]

    run(unwritable())


def test_a_disabled_view_reads_no_event() -> None:
    """``shared_view=False``: the replicas' start events are not even parsed
    (a malformed one cannot raise), and nothing reaches the dispatcher."""
    import fairq

    d = fairq.D2LPM(2, 100.0)
    v = SharedView(d, enabled=False)
    v.on_start(0, [1, "start", "r", "a", [1, 2], "not a length"])
    v.on_finish(0, "r", 5, "a")
    assert d.external_load == [0, 0] and d.clients() == []
    assert v.counters["view_dispatches"] == v.counters["view_finishes"] == 0
