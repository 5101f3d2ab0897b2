"""fairq.ray.ingress.BalancedSessionRouter against Ray Serve 2.60's real
request-router classes, without a cluster (as tests/test_ray_router.py
builds its router): each session to one replica, the sessions spread evenly,
placed again when their replica goes. End to end on vLLM replicas:
``fairq engine-bench --engine ray-vllm --ingress-affinity``
(docs/results/ray_vllm.md)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("ray.serve", reason="needs fairq[ray] (pip install '.[ray]')")
pytest.importorskip("httpx", reason="Ray's router test utilities import httpx")
pytest.importorskip("mmh3", reason="Ray's consistent-hash router needs mmh3")

from ray.serve._private.common import RequestMetadata  # noqa: E402
from ray.serve._private.request_router import PendingRequest  # noqa: E402
from ray.serve._private.test_utils import FakeRunningReplica  # noqa: E402

from fairq.ray import ingress  # noqa: E402
from fairq.ray.ingress import BalancedSessionRouter  # noqa: E402

from reference.serve import new_router  # noqa: E402


async def make(
    replicas: list[str],
) -> tuple[BalancedSessionRouter, dict[str, FakeRunningReplica]]:
    """The router, built in a running event loop as Serve builds it."""
    router = new_router(BalancedSessionRouter)
    router.initialize_state()
    live = {r: FakeRunningReplica(r) for r in replicas}
    router.update_replicas(list(live.values()))
    return router, live


async def route(router: BalancedSessionRouter, session: str | None) -> list[list[str]]:
    meta = RequestMetadata(request_id="r", internal_request_id="r", session_id=session or "")
    pending = PendingRequest([], {}, meta)
    ranks = await router.choose_replicas(list(router._replicas.values()), pending)
    return [[r.replica_id.unique_id for r in rank] for rank in ranks]


TENANTS = [f"c{i}" for i in range(6)] + ["flood"]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sessions_spread_evenly_and_stay(n: int) -> None:
    async def check() -> None:
        router, _ = await make([f"ingress{i}" for i in range(n)])
        owner = {t: (await route(router, t))[0][0] for t in TENANTS}
        counts = Counter(owner.values())
        assert len(counts) == n and max(counts.values()) - min(counts.values()) <= 1
        for _ in range(3):  # the same session: the same replica, first
            for t in TENANTS:
                ranks = await route(router, t)
                assert ranks[0] == [owner[t]]
                # then the ring's fallbacks, each replica once
                flat = [r for rank in ranks for r in rank]
                assert len(flat) == len(set(flat)) == min(n, 1 + 2)

    asyncio.run(check())


def test_a_gone_replica_s_sessions_are_placed_again_the_rest_stay() -> None:
    async def check() -> None:
        router, live = await make(["a", "b", "c"])
        owner = {t: (await route(router, t))[0][0] for t in TENANTS}
        gone = owner["c0"]
        router.update_replicas([r for k, r in live.items() if k != gone])
        moved = {t: (await route(router, t))[0][0] for t in TENANTS}
        for t in TENANTS:
            assert moved[t] == owner[t] if owner[t] != gone else moved[t] != gone
        counts = Counter(moved.values())
        assert max(counts.values()) - min(counts.values()) <= 1
        # the replica back: the next new session goes to it (it owns none)
        router.update_replicas(list(live.values()))
        assert (await route(router, "newcomer"))[0] == [gone]

    asyncio.run(check())


def test_requests_without_a_session_spread_and_are_not_remembered() -> None:
    async def check() -> None:
        router, live = await make(["a", "b"])
        for _ in range(5):
            (rank,) = await route(router, None)  # one rank: every replica, Serve picks
            assert sorted(rank) == sorted(live)
        assert len(router._owner) == 0

    asyncio.run(check())


def test_sessions_are_forgotten_least_recently_used_first(monkeypatch: Any) -> None:
    monkeypatch.setattr(ingress, "MAX_SESSIONS", 4)

    async def check() -> None:
        router, _ = await make(["a", "b"])
        for t in ["s1", "s2", "s3", "s4", "s1", "s5"]:  # s1 used again: kept
            await route(router, t)
        assert list(router._owner) == ["s3", "s4", "s1", "s5"]
        # the counts follow what is remembered (new sessions balance on them)
        assert +router._owned == Counter(router._owner.values())

    asyncio.run(check())
