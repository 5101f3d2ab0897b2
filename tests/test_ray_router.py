"""FairqD2LPMRouter against Ray Serve 2.60's real request-router classes.

No cluster: the router is built the way Ray's own router unit tests build
theirs (``ray.serve._private.test_utils.FakeRunningReplica``, real
``PendingRequest`` / ``RequestMetadata`` / ``RunningReplicaInfo``), and
requests go through Ray's real routing loop (``_choose_replica_for_request``).
Needs ``pip install '.[ray]'`` (and httpx, which Ray's test utilities
import); skipped otherwise. The end-to-end tests on a local cluster are in
tests/test_ray_serve.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ray.serve", reason="needs fairq[ray] (pip install '.[ray]')")
pytest.importorskip("httpx", reason="Ray's router test utilities import httpx")

from ray.serve._private.common import (  # noqa: E402
    RequestMetadata,
    RunningReplicaInfo,
    StreamingHTTPRequest,
)
from ray.serve._private.request_router import PendingRequest  # noqa: E402
from ray.serve._private.test_utils import (  # noqa: E402
    FakeRunningReplica,
)

import fairq  # noqa: E402
from fairq.ray import (  # noqa: E402
    ReplicaFeedback,
    RouterOptions,
    default_tenant,
    default_tokens,
    fairq_router_config,
    text_to_pseudo_tokens,
)
from fairq.ray.router import FairqD2LPMRouter  # noqa: E402

from reference.serve import new_router  # noqa: E402


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


class StatsReplica(FakeRunningReplica):
    """Ray's fake replica plus the routing stats a real ``RunningReplica``
    reads from its ``RunningReplicaInfo``."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.set_stats({})
        self.set_queue_len_response(0)

    def set_stats(self, stats: dict[str, Any]) -> None:
        self._replica_info = RunningReplicaInfo(
            replica_id=self.replica_id,
            node_id=None,
            node_ip=None,
            availability_zone=None,
            actor_name=f"fake-{self.replica_id.unique_id}",
            max_ongoing_requests=self.max_ongoing_requests,
            routing_stats=stats,
        )


def make_router(strict: bool = True, **options: Any) -> FairqD2LPMRouter:
    router = new_router(FairqD2LPMRouter, strict)
    router.initialize_state(**options)
    return router


_ids = iter(range(10**9))


def request(body: Any = None, rid: str | None = None, **kwargs: Any) -> PendingRequest:
    rid = rid or f"req-{next(_ids)}"
    return PendingRequest(
        args=[] if body is None else [body],
        kwargs=kwargs,
        metadata=RequestMetadata(request_id=rid, internal_request_id=rid),
    )


def names(ranks: list[list[Any]]) -> list[list[str]]:
    return [[r.replica_id.unique_id for r in rank] for rank in ranks]


PREFIX = list(range(1, 201))


def body(user: str | None, tokens: list[int]) -> dict[str, Any]:
    b: dict[str, Any] = {"prompt_token_ids": tokens, "max_tokens": 8}
    if user is not None:
        b["user"] = user
    return b


# --- options ---------------------------------------------------------------


@pytest.mark.parametrize(
    "opts, field",
    [
        ({"worker_quantum": 0}, "worker_quantum"),
        ({"worker_quantum": float("nan")}, "worker_quantum"),
        ({"w_e": -1}, "w_e"),
        ({"w_q": float("inf")}, "w_q"),
        ({"max_replicas": 0}, "max_replicas"),
        ({"max_replicas": 5000}, "max_replicas"),
        ({"max_replicas": True}, "max_replicas"),
        ({"default_tenant": ""}, "default_tenant"),
        ({"tenant_header": 3}, "tenant_header"),
        ({"feedback_key": ""}, "feedback_key"),
        ({"recent_requests": 0}, "recent_requests"),
        ({"spill": "yes"}, "spill"),
        ({"tenant_extractor": 3}, "tenant_extractor"),
        ({"tokens_extractor": "no.such.module:f"}, "tokens_extractor"),
        ({"tokens_extractor": "json:nothing_here"}, "tokens_extractor"),
        ({"worker_quantm": 5}, "worker_quantm"),
    ],
)
def test_options_are_validated_naming_the_field(opts: dict[str, Any], field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        RouterOptions(**opts)
    with pytest.raises((ValueError, TypeError), match=field):
        fairq_router_config(**opts)
    with pytest.raises((ValueError, TypeError), match=field):
        make_router(**opts)


def test_config_names_the_router_and_keeps_the_options() -> None:
    cfg = fairq_router_config(worker_quantum=512, tokens_extractor="json:loads")
    assert cfg.get_request_router_class() is FairqD2LPMRouter
    assert cfg.request_router_kwargs == {"worker_quantum": 512, "tokens_extractor": "json:loads"}
    assert cfg.request_routing_stats_period_s == 1.0
    assert RouterOptions(worker_quantum=float("inf")).worker_quantum == float("inf")


# --- extractors ------------------------------------------------------------


def test_default_extractors_read_openai_bodies() -> None:
    assert default_tenant([{"user": "alice", "prompt": "x"}], {}) == "alice"
    assert default_tenant([], {"body": {"user": "bob"}}) == "bob"
    assert default_tenant([{"prompt": "x"}], {}) == "default"
    assert default_tenant([{"user": ""}], {}, default="anon") == "anon"
    # vLLM's tenant field wins (router and engine read the same one)
    both = {"user": "alice", "vllm_xargs": {"tenant": "team-a"}}
    assert default_tenant([both], {}) == "team-a"
    assert default_tenant([{"user": "alice", "vllm_xargs": {"tenant": ""}}], {}) == "alice"
    assert default_tenant([{"vllm_xargs": ["not", "a", "map"]}], {}) == "default"
    assert default_tokens([{"prompt_token_ids": [5, 6]}], {}).tolist() == [5, 6]
    assert default_tokens([{"prompt": [7, 8, 9]}], {}).tolist() == [7, 8, 9]
    assert default_tokens([{"input_ids": np.array([1, 2])}], {}).tolist() == [1, 2]
    assert default_tokens([{"prompt": "abcd"}], {}).tolist() == [0x64636261]
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert default_tokens([chat], {}).tolist() == text_to_pseudo_tokens("user\nhi\n").tolist()

    class Obj:  # a pydantic-like request object
        user = "carol"
        prompt = "hello"

    assert default_tenant([Obj()], {}) == "carol"
    assert default_tokens([Obj()], {}).tolist() == text_to_pseudo_tokens("hello").tolist()


def test_proxy_requests_get_the_tenant_from_a_header() -> None:
    async def receive(_: Any) -> bytes:
        return b""

    scope = {"type": "http", "headers": [(b"x-fairq-tenant", b"dave"), (b"host", b"x")]}
    req = StreamingHTTPRequest(scope, receive_asgi_messages=receive)
    assert default_tenant([req], {}) == "dave"
    assert default_tenant([req], {}, tenant_header="X-Other") == "default"
    assert default_tokens([req], {}).tolist() == []
    assert default_tenant([{"headers": {"X-Fairq-Tenant": "erin"}}], {}) == "erin"


@pytest.mark.parametrize(
    "bad",
    [None, 42, b"\xff", {"messages": 5}, {"prompt": {"a": 1}}, {"prompt": [1, -2]}, [object()]],
)
def test_malformed_bodies_give_default_tenant_and_no_tokens(bad: Any) -> None:
    assert default_tenant([bad], {}) == "default"
    assert default_tokens([bad], {}).dtype == np.uint32
    assert len(default_tokens([bad], {})) == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_pseudo_tokens_share_the_shared_text_prefix(common: str, a: str, b: str) -> None:
    ta, tb = text_to_pseudo_tokens(common + a), text_to_pseudo_tokens(common + b)
    shared_bytes = 0
    ra, rb = (
        (common + a).encode("utf-8", "surrogatepass"),
        (common + b).encode("utf-8", "surrogatepass"),
    )
    while shared_bytes < min(len(ra), len(rb)) and ra[shared_bytes] == rb[shared_bytes]:
        shared_bytes += 1
    shared_tokens = 0
    while shared_tokens < min(len(ta), len(tb)) and ta[shared_tokens] == tb[shared_tokens]:
        shared_tokens += 1
    assert shared_tokens >= shared_bytes // 4
    # stable and injective on full pages: equal tokens mean equal bytes
    assert shared_tokens * 4 <= shared_bytes or len(ra) == len(rb) == shared_bytes
    assert len(ta) == -(-len(ra) // 4)


# --- routing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "knobs",
    [{}, {"placement_slack": 2}, {"match_threshold": 0.5, "spread_by_credit": True}],
)
def test_picks_are_the_cores_d2lpm_picks(knobs: dict[str, Any]) -> None:
    """The router adds nothing to the policy: its picks over a trace are those
    of fairq.D2LPM.dispatch_among on the same inputs and knobs, its slots
    named by their replicas' ids (the agreed placement's ranking)."""

    async def go() -> None:
        router = make_router(worker_quantum=300, **knobs)
        reps = [StatsReplica(f"r{i}") for i in range(3)]
        router.update_replicas(reps)
        ref = fairq.D2LPM(256, 300, **knobs)
        slots = [router.slot_of(r.replica_id) for r in reps]
        for r, slot in zip(reps, slots, strict=True):
            assert slot is not None
            ref.set_worker_name(slot, r.replica_id.unique_id)
        rng = np.random.default_rng(0)
        for i in range(60):
            tenant = ["greedy", "a", "b"][int(rng.integers(3))]
            toks = PREFIX[:100] + [1000 + i] if tenant == "greedy" else [5000 + i] * 20
            pr = request(body(tenant, toks), rid=f"t{i}")
            ranks = await router.choose_replicas(reps, pr)
            w = ref.dispatch_among(f"t{i}", tenant, toks, slots)
            assert ranks[0][0] is reps[slots.index(w)]
            router.on_request_routed(pr, ranks[0][0].replica_id, None)
            if i % 3 == 0:
                router.on_request_completed(ranks[0][0].replica_id, f"t{i}")
                ref.on_finish(f"t{i}", 0)
        assert router.dispatcher.state_dict() == ref.state_dict()

    run(go())


def test_ranks_pick_then_the_rest_and_spill_off() -> None:
    async def go() -> None:
        reps = [StatsReplica(f"r{i}") for i in range(3)]
        for spill, expect_len in ((True, 2), (False, 1)):
            router = make_router(spill=spill)
            router.update_replicas(reps)
            ranks = await router.choose_replicas(reps, request(body("a", PREFIX)))
            assert len(ranks) == expect_len and len(ranks[0]) == 1
            if spill:
                assert {r.replica_id for r in ranks[0] + ranks[1]} == {r.replica_id for r in reps}
            assert await router.choose_replicas([], request(body("a", PREFIX))) == []

    run(go())


def test_greedy_tenant_spreads_once_its_deficit_is_spent() -> None:
    """Through Ray's real routing loop: the greedy tenant's shared prefix keeps
    it on one replica until its deficit there is spent; the small tenants are
    not piled onto that replica."""

    async def go() -> None:
        router = make_router(worker_quantum=450)
        reps = [StatsReplica(f"r{i}") for i in range(2)]
        router.update_replicas(reps)
        await asyncio.sleep(0)
        chosen: dict[str, list[str]] = {"greedy": [], "small": []}
        for i in range(12):
            for tenant, toks in (("greedy", PREFIX + [900 + i]), ("small", [7000 + i] * 10)):
                pr = request(body(tenant, toks))
                replica = await router._choose_replica_for_request(pr)
                router.on_request_routed(pr, replica.replica_id, None)
                chosen[tenant].append(replica.replica_id.unique_id)
        first = chosen["greedy"][0]
        assert chosen["greedy"][:2] == [first, first]  # affinity while credit lasts
        assert set(chosen["greedy"]) == {"r0", "r1"}  # then it spreads
        assert router.dispatcher.queue_sizes[:2] == [
            sum(c.count(f"r{i}") for c in chosen.values()) for i in range(2)
        ]
        assert router.counters["dispatched"] == 24 and router.counters["moved"] == 0

    run(go())


def test_placements_count_where_dispatches_went_against_the_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With the stats directory set, the router counts each dispatch as
    ``new`` (held nowhere or everywhere), ``held`` (to a holder of its longest match) or
    ``off_credit`` (the holders had none of the tenant's credit): the greedy
    tenant's one move off its replica is the one ``off_credit``."""
    from fairq.ray.router import ROUTER_STATS_DIR_ENV

    monkeypatch.setenv(ROUTER_STATS_DIR_ENV, str(tmp_path))

    async def go() -> None:
        router = make_router(worker_quantum=450)
        reps = [StatsReplica(f"r{i}") for i in range(2)]
        router.update_replicas(reps)
        greedy: list[str] = []
        for i in range(12):
            for tenant, toks in (("greedy", PREFIX + [900 + i]), ("small", [7000 + i] * 10)):
                pr = request(body(tenant, toks))
                replica = await router._choose_replica_for_request(pr)
                router.on_request_routed(pr, replica.replica_id, None)
                if tenant == "greedy":
                    greedy.append(replica.replica_id.unique_id)
        moved = next(i for i, r in enumerate(greedy) if r != greedy[0])
        # every small request, greedy's first, and greedy's after its move
        # (both replicas then hold its prefix): placed by load and credit;
        # the move itself: off_credit; greedy's before it: to the holder
        assert moved >= 2
        assert router.stats()["placements"] == {
            "new": 12 + 1 + (11 - moved),
            "held": moved - 1,
            "off_credit": 1,
        }

    run(go())


def test_full_pick_spills_and_the_dispatch_moves() -> None:
    async def go() -> None:
        router = make_router(worker_quantum=10_000)
        reps = [StatsReplica("r0", max_ongoing_requests=1), StatsReplica("r1")]
        router.update_replicas(reps)
        await asyncio.sleep(0)
        pr = request(body("a", PREFIX))
        first = await router._choose_replica_for_request(pr)
        router.on_request_routed(pr, first.replica_id, None)
        assert first.replica_id.unique_id == "r0"
        reps[0].set_queue_len_response(1)  # r0 is full now
        router.replica_queue_len_cache.update(reps[0].replica_id, 1)
        pr2 = request(body("a", PREFIX))
        ranks = await router.choose_replicas(reps, pr2)
        assert names(ranks) == [["r0"], ["r1"]]  # D2LPM still prefers r0 (affinity)
        second = await router._choose_replica_for_request(pr2)
        assert second.replica_id.unique_id == "r1"  # Ray spilled to rank 1
        router.on_request_routed(pr2, second.replica_id, None)
        assert router.counters["moved"] == 1
        d = router.dispatcher
        assert d.worker_of(pr2.metadata.internal_request_id) == router.slot_of(reps[1].replica_id)
        assert d.queue_sizes[:2] == [1, 1]

    run(go())


def test_rejection_then_retry_keeps_one_dispatch() -> None:
    async def go() -> None:
        router = make_router()
        reps = [StatsReplica("r0"), StatsReplica("r1")]
        router.update_replicas(reps)
        pr = request(body("a", PREFIX))
        rid = pr.metadata.internal_request_id
        ranks = await router.choose_replicas(reps, pr)
        pick = ranks[0][0]
        # the replica rejected the send: Ray reports completion, then retries
        router.on_request_completed(pick.replica_id, rid)
        assert rid in router.dispatcher
        again = await router.choose_replicas(reps, pr)
        assert again[0][0] is pick
        assert len(router.dispatcher) == 1 and router.counters["dispatched"] == 1
        router.on_request_routed(pr, pick.replica_id, None)
        router.on_request_completed(pick.replica_id, rid)
        assert len(router.dispatcher) == 0 and router.counters["finished"] == 1
        router.on_request_completed(pick.replica_id, rid)  # a repeat changes nothing
        assert router.counters["finished"] == 1

    run(go())


def test_completion_before_the_acceptance_report_still_finishes() -> None:
    """Both resolve on the router's loop, so Serve's completion callback can run
    before on_request_routed; no re-choose in between means it was this send."""

    async def go() -> None:
        router = make_router()
        reps = [StatsReplica("r0")]
        router.update_replicas(reps)
        pr = request(body("a", PREFIX))
        rid = pr.metadata.internal_request_id
        await router.choose_replicas(reps, pr)
        router.on_request_completed(reps[0].replica_id, rid)
        assert len(router.dispatcher) == 1
        router.on_request_routed(pr, reps[0].replica_id, None)
        assert len(router.dispatcher) == 0 and router.counters["finished"] == 1

    run(go())


def test_without_the_queue_length_cache_completion_finishes() -> None:
    """Under Ray Client Serve never calls on_request_routed (no rejection
    protocol); completion alone must free the slot."""

    async def go() -> None:
        router = make_router(strict=False)
        reps = [StatsReplica("r0")]
        router.update_replicas(reps)
        pr = request(body("a", PREFIX))
        await router.choose_replicas(reps, pr)
        router.on_request_completed(reps[0].replica_id, pr.metadata.internal_request_id)
        assert len(router.dispatcher) == 0

    run(go())


def test_cancelled_before_routing_is_withdrawn_with_refund() -> None:
    async def go() -> None:
        router = make_router(worker_quantum=1000)
        reps = [StatsReplica("r0")]
        router.update_replicas(reps)
        pr = request(body("a", PREFIX))
        await router.choose_replicas(reps, pr)
        slot = router.slot_of(reps[0].replica_id)
        assert router.dispatcher.deficit("a", slot) == 800.0
        pr.future.cancel()
        await asyncio.sleep(0)
        assert len(router.dispatcher) == 0 and router.counters["withdrawn"] == 1
        assert router.dispatcher.deficit("a", slot) == 1000.0

    run(go())


def test_replicas_leaving_are_dropped_and_routing_goes_on() -> None:
    async def go() -> None:
        router = make_router(worker_quantum=10_000, max_replicas=2)
        r0, r1, r2 = (StatsReplica(f"r{i}") for i in range(3))
        router.update_replicas([r0, r1])
        d = router.dispatcher
        prs = []
        for _ in range(3):
            pr = request(body("a", PREFIX))
            ranks = await router.choose_replicas([r0, r1], pr)
            router.on_request_routed(pr, ranks[0][0].replica_id, None)
            prs.append((pr, ranks[0][0]))
        held = prs[0][1]
        other = r1 if held is r0 else r0
        slot = router.slot_of(held.replica_id)
        assert d.held_len(slot, PREFIX) == len(PREFIX)
        # the replica holding the prefix dies (seen by a probe or a request)
        router.on_replica_actor_died(held.replica_id)
        assert router.slot_of(held.replica_id) is None
        assert d.held_len(slot, PREFIX) == 0 and d.queue_sizes[slot] == 0
        assert d.deficit("a", slot) == 0.0
        # its requests complete with an error for their callers: nothing breaks
        for pr, rep in prs:
            router.on_request_completed(rep.replica_id, pr.metadata.internal_request_id)
        assert len(d) == 0
        # routing goes on over the rest, then a replacement takes the free slot
        ranks = await router.choose_replicas([other], request(body("a", PREFIX)))
        assert names(ranks) == [[other.replica_id.unique_id]]
        router.update_replicas([other, r2])
        assert router.slot_of(r2.replica_id) == slot
        # scaled down: the controller's update no longer lists `other`
        router.update_replicas([r2])
        assert router.slot_of(other.replica_id) is None
        assert router.counters["replicas_removed"] == 2
        pr = request(body("a", PREFIX))
        assert names(await router.choose_replicas([r2], pr)) == [["r2"]]

    run(go())


def test_more_replicas_than_slots_still_route() -> None:
    async def go() -> None:
        router = make_router(max_replicas=1)
        reps = [StatsReplica("r0"), StatsReplica("r1")]
        router.update_replicas(reps)
        assert router.counters["unslotted"] >= 1
        ranks = await router.choose_replicas(reps, request(body("a", PREFIX)))
        assert names(ranks) == [["r0"], ["r1"]]

    run(go())


# --- feedback --------------------------------------------------------------


def test_feedback_charges_output_and_applies_evictions_once() -> None:
    async def go() -> None:
        router = make_router(worker_quantum=10_000, w_q=2.0)
        rep = StatsReplica("r0")
        router.update_replicas([rep])
        d = router.dispatcher
        slot = router.slot_of(rep.replica_id)
        fb = ReplicaFeedback(capacity=4)
        prs = [request(body("a", PREFIX)) for _ in range(2)]
        for pr in prs:
            await router.choose_replicas([rep], pr)
            router.on_request_routed(pr, rep.replica_id, None)
        rid0, rid1 = (pr.metadata.internal_request_id for pr in prs)
        router.on_request_completed(rep.replica_id, rid0)
        before = d.deficit("a", slot)
        fb.record_finish(rid0, output_tokens=7)
        fb.record_finish(rid1, output_tokens=5)  # before its completion
        fb.record_finish("another-routers-request", output_tokens=100)
        rep.set_stats(fb.routing_stats())
        router.update_replicas([rep])
        router.update_replicas([rep])  # the same events again: applied once
        assert d.deficit("a", slot) == before - 14.0
        assert router.counters["output_charged"] == 1
        router.on_request_completed(rep.replica_id, rid1)  # finishes with its 5 tokens
        assert d.deficit("a", slot) == before - 24.0
        # an eviction report: the tree stops believing r0 holds the suffix
        fb.record_evict(PREFIX, kept=50)
        rep.set_stats(fb.routing_stats())
        router.update_replicas([rep])
        assert d.held_len(slot, PREFIX) == 50
        # more events than the replica keeps between two reads: counted as lost
        for i in range(6):
            fb.record_finish(f"x{i}", output_tokens=1)
        rep.set_stats(fb.routing_stats())
        router.update_replicas([rep])
        assert router.counters["feedback_lost"] == 2
        # a restarted feedback log (new epoch) is read from its start
        fb2 = ReplicaFeedback()
        fb2.record_evict(PREFIX, kept=0)
        rep.set_stats(fb2.routing_stats())
        router.update_replicas([rep])
        assert d.held_len(slot, PREFIX) == 0

    run(go())


@pytest.mark.parametrize(
    "stats",
    [
        {"fairq": 5},
        {"fairq": {"events": 3}},
        {"fairq": {"epoch": "e", "events": [[1, "finish"], ["x"], [2, "evict", [1], -1]]}},
        {"fairq": {"epoch": "e", "events": [[1, "bogus", 1]]}},
        {"fairq": {"epoch": "e", "events": [[1, "evict", [-5], 0]]}},
    ],
)
def test_malformed_feedback_never_breaks_the_router(stats: dict[str, Any]) -> None:
    async def go() -> None:
        router = make_router()
        rep = StatsReplica("r0")
        rep.set_stats(stats)
        router.update_replicas([rep])
        ranks = await router.choose_replicas([rep], request(body("a", PREFIX)))
        assert names(ranks) == [["r0"]]

    run(go())


def test_replica_feedback_validates_its_input() -> None:
    fb = ReplicaFeedback()
    with pytest.raises(ValueError, match="request_id"):
        fb.record_finish(output_tokens=3)  # outside a Serve request
    with pytest.raises(ValueError, match="output_tokens"):
        fb.record_finish("r", output_tokens=-1)
    with pytest.raises(TypeError, match="output_tokens"):
        fb.record_finish("r", output_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kept"):
        fb.record_evict([1, 2], kept=-1)
    with pytest.raises(ValueError, match="tokens"):
        fb.record_evict([1, -2])
    with pytest.raises(ValueError, match="capacity"):
        ReplicaFeedback(capacity=0)
    assert fb.routing_stats() == {"fairq": {"epoch": fb.epoch, "seq": 0, "events": []}}


# --- bad input -------------------------------------------------------------


def test_missing_tenant_and_malformed_bodies_route_to_the_default_tenant() -> None:
    async def go() -> None:
        def broken(args: Any, kwargs: Any) -> str:
            raise RuntimeError("boom")

        for opts in ({}, {"tenant_extractor": broken, "tokens_extractor": broken}):
            router = make_router(default_tenant="anon", **opts)
            rep = StatsReplica("r0")
            router.update_replicas([rep])
            for b in (body(None, PREFIX), 42, {"messages": 5}, None):
                pr = request(b)
                replica = await router._choose_replica_for_request(pr)
                assert replica is rep
            assert router.dispatcher.clients() == ["anon"]
            assert router.counters["extractor_errors"] == (8 if opts else 0)

    run(go())


# --- admission control -------------------------------------------------------


def test_limits_are_validated_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"limits\.max_requests must be an integer >= 1"):
        RouterOptions(limits={"max_requests": 0})
    with pytest.raises(ValueError, match=r"tenant_weights\['a'\]"):
        RouterOptions(tenant_weights={"a": 0})
    with pytest.raises(ValueError, match="tenant names must be non-empty strings"):
        RouterOptions(tenant_weights={"": 1.0})


def test_gateway_headers_name_the_tenant() -> None:
    assert default_tenant([{"headers": {"x-gateway-inference-fairness-id": "gw"}}], {}) == "gw"
    assert default_tenant([{"headers": {"x-llm-d-inference-fairness-id": "ld"}}], {}) == "ld"


def test_flood_is_refused_with_429_and_retry_after_light_tenant_passes() -> None:
    from ray.serve.exceptions import BackPressureError

    async def go() -> None:
        router = make_router(limits={"max_requests": 4})
        reps = [StatsReplica(f"r{i}") for i in range(2)]
        router.update_replicas(reps)
        await asyncio.sleep(0)
        held = []
        for i in range(4):
            pr = request(body("flood", [1, 2, 3, i]))
            replica = await router._choose_replica_for_request(pr)
            router.on_request_routed(pr, replica.replica_id, None)
            held.append((pr, replica))
        pr = request(body("flood", [1, 2, 3, 9]))
        with pytest.raises(BackPressureError) as e:
            await router._choose_replica_for_request(pr)
        assert e.value.status_code == 429 and e.value.retry_after_s is not None
        assert pr.metadata.internal_request_id not in router.dispatcher  # nothing spent
        light = request(body("light", [5, 6]))
        replica = await router._choose_replica_for_request(light)  # under its share
        router.on_request_routed(light, replica.replica_id, None)
        assert router.admission is not None and router.admission.requests == 5
        for p, r in [*held, (light, replica)]:
            router.on_request_completed(r.replica_id, p.metadata.internal_request_id)
        assert router.admission.requests == 0 and router.admission.tokens == 0
        assert router.counters["refused"] == 1
        # the flood may send again once its requests are done
        pr = request(body("flood", [1, 2, 3, 10]))
        replica = await router._choose_replica_for_request(pr)
        assert replica is not None

    run(go())


def test_pseudo_tokens_of_texts_differing_in_trailing_nuls_differ() -> None:
    # the last page was zero-padded: "00000" and "00000\0" were the same prompt
    assert text_to_pseudo_tokens("00000").tolist() != text_to_pseudo_tokens("00000\0").tolist()
    assert text_to_pseudo_tokens("abcdefg").tolist() == [0x64636261, 0xFF676665]
