"""D2LPM on a real local Ray Serve cluster with real engine replicas (CPU).

One local Ray cluster (loopback, 2 CPUs) for the module, shut down at the end.
The engine replicas run transformers' continuous batching with ``fairq-dlpm``
on a tiny random-weight model (fairq.ray.engine). Every wait is
bounded. Run with:  python -m pytest -m ray tests/test_ray_serve.py
Needs fairq[ray] and fairq[engine]; skipped otherwise.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray.serve", reason="needs fairq[ray] (pip install '.[ray]')")
pytest.importorskip("torch", reason="the engine replicas need fairq[engine]")
pytest.importorskip("transformers", reason="the engine replicas need fairq[engine]")
requests = pytest.importorskip("requests", reason="the HTTP test needs requests (Ray's dep)")

from ray import serve  # noqa: E402

from fairq.enginebench import ray as bench  # noqa: E402
from fairq.enginebench.ray import BenchRequest  # noqa: E402
from fairq.ray.router import FairqD2LPMRouter  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.engine]

TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[int]:
    with bench.local_cluster(num_cpus=2) as port:
        yield port


@pytest.fixture
def app_name(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name}".replace("[", "-").replace("]", "")[:40]
    yield name
    serve.delete(name)


def small_workload(greedy: int = 12, per_tenant: int = 4) -> list[tuple[str, BenchRequest]]:
    return bench.workload(
        greedy_requests=greedy,
        tenants=3,
        requests_per_tenant=per_tenant,
        greedy_prefix_chars=256,
        tenant_prefix_chars=48,
        max_tokens=8,
    )


def d2lpm_router_of(handle: Any) -> FairqD2LPMRouter:
    """The router object a DeploymentHandle routes with in this process (found
    by walking Serve's router wrappers; it is not public API)."""
    seen: set[int] = set()
    stack = [(handle._router, 0)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, FairqD2LPMRouter):
            return obj
        if depth > 4 or id(obj) in seen or not isinstance(getattr(obj, "__dict__", None), dict):
            continue
        seen.add(id(obj))
        stack.extend((v, depth + 1) for v in list(vars(obj).values()))
    raise AssertionError("the handle does not route with FairqD2LPMRouter")


def check_exactly_once(sent: list[bench.Sent]) -> None:
    assert all(s.response is not None for s in sent), [s.error for s in sent if s.error]
    ids = [s.response["request_id"] for s in sent if s.response]
    assert len(set(ids)) == len(sent)  # each request served once, none lost
    for s in sent:
        assert s.response is not None
        assert s.response["tenant"] == s.tenant
        assert s.response["output_tokens"] == s.request.max_tokens


def test_handle_requests_complete_exactly_once_with_d2lpm(cluster: int, app_name: str) -> None:
    handle = bench.deploy(
        "d2lpm",
        replicas=2,
        d2lpm_options={"worker_quantum": 200.0},
        app=app_name,
        route_prefix=f"/{app_name}",
    )
    engine = serve.get_deployment_handle("Engine", app_name=app_name)
    assert engine.scheduler_name.remote().result(timeout_s=TIMEOUT_S) == "FairqDLPMScheduler"
    sent = bench.send_all(handle, small_workload(), timeout_s=TIMEOUT_S)
    check_exactly_once(sent)
    summary = bench.summarize("d2lpm", sent)
    # the greedy tenant's shared prefix keeps it on one replica while its
    # deficit lasts, then it spreads; the engines reuse the cached prefix
    assert summary["tenants"]["greedy"]["replicas"] == 2
    assert summary["prefix_hit_rate"] > 0.5
    # the router saw each request dispatched and finished once, and every
    # finish's output count came back from the replicas' routing stats
    router = d2lpm_router_of(handle)
    deadline = time.monotonic() + 30
    while (router.counters["output_charged"] < len(sent) or len(router.dispatcher)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert router.counters["dispatched"] == router.counters["finished"] == len(sent)
    assert router.counters["output_charged"] == len(sent)
    assert len(router.dispatcher) == 0
    assert router.counters["feedback_lost"] == router.counters["feedback_errors"] == 0


def test_infinite_quantum_is_pure_affinity_through_ray(cluster: int, app_name: str) -> None:
    """Black-box proof the deployment routes with fairq's router: with
    Q_w = inf D2LPM never leaves the replica holding the prefix, which Ray's
    default router (random pairs) would not do for 16 requests."""
    handle = bench.deploy(
        "d2lpm",
        replicas=2,
        d2lpm_options={"worker_quantum": float("inf")},
        app=app_name,
        route_prefix=f"/{app_name}",
    )
    reqs = [(t, r) for t, r in small_workload(greedy=16, per_tenant=0)]
    sent = bench.send_all(handle, reqs, timeout_s=TIMEOUT_S)
    check_exactly_once(sent)
    assert len({s.response["replica"] for s in sent if s.response}) == 1


def test_http_proxy_ingress_and_bad_input(cluster: int, app_name: str) -> None:
    bench.deploy(
        "d2lpm",
        replicas=2,
        ingress=1,
        app=app_name,
        route_prefix=f"/{app_name}",
        d2lpm_options={"worker_quantum": 200.0},
    )
    url = f"http://127.0.0.1:{cluster}/{app_name}"

    def post(tenant: str | None, body: Any) -> requests.Response:
        headers = {"x-fairq-tenant": tenant} if tenant else {}
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return requests.post(url, data=data, headers=headers, timeout=TIMEOUT_S)

    reqs = small_workload(greedy=8, per_tenant=3)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futs = [
            pool.submit(post, t, {"prompt": r.prompt, "max_tokens": r.max_tokens}) for t, r in reqs
        ]
        results = [f.result(timeout=TIMEOUT_S) for f in futs]
    assert [r.status_code for r in results] == [200] * len(reqs)
    bodies = [r.json() for r in results]
    assert len({b["request_id"] for b in bodies}) == len(reqs)
    assert Counter(b["tenant"] for b in bodies) == Counter(t for t, _ in reqs)
    # a request without a tenant goes to the default tenant
    assert post(None, {"prompt": "no tenant here", "max_tokens": 2}).json()["tenant"] == "default"
    # malformed bodies: Serve's normal error path (an HTTP 500), not a router crash
    for bad in ("{not json", {"max_tokens": 3}, {"prompt": "x", "max_tokens": "many"}, [1, 2]):
        assert post("mallory", bad).status_code == 500
    # and routing goes on
    assert post("alice", {"prompt": "still fine", "max_tokens": 2}).status_code == 200


def test_replica_killed_mid_run_no_request_hangs(cluster: int, app_name: str) -> None:
    handle = bench.deploy(
        "d2lpm",
        replicas=2,
        app=app_name,
        route_prefix=f"/{app_name}",
        d2lpm_options={"worker_quantum": 200.0},
    )
    engine = serve.get_deployment_handle("Engine", app_name=app_name)
    reqs = small_workload(greedy=24, per_tenant=8)
    sent = bench.send_all(
        handle, reqs, timeout_s=TIMEOUT_S, kill_after=6, kill=bench.kill_one_replica(engine)
    )
    # every request finished or failed (none hung past the bound)...
    assert all(s.end > 0 for s in sent)
    failed = [s for s in sent if s.response is None]
    # ...and a failure is Ray's clear error for a request its replica died on
    for s in failed:
        assert s.error is not None
        assert "TimeoutError" not in s.error, s.error
        assert any(k in s.error for k in ("ActorDied", "RayActorError", "died", "Unavailable")), (
            s.error
        )
    done = [s for s in sent if s.response is not None]
    assert len(done) + len(failed) == len(reqs)
    assert len({s.response["request_id"] for s in done if s.response}) == len(done)
    # the router dropped the dead replica (tree, deficits, in-flight) and
    # holds nothing in flight: every request left it once
    # (Serve runs the router's completion callbacks on its own loop, shortly
    # after the caller has its response or error)
    router = d2lpm_router_of(handle)
    deadline = time.monotonic() + 30
    while (router.counters["replicas_removed"] < 1 or len(router.dispatcher)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert router.counters["replicas_removed"] >= 1
    assert len(router.dispatcher) == 0
    # routing goes on over the survivor and the replacement Serve starts
    after = bench.send_all(handle, small_workload(greedy=6, per_tenant=2), timeout_s=TIMEOUT_S)
    check_exactly_once(after)
    deadline = time.monotonic() + 30
    while len(router.dispatcher) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(router.dispatcher) == 0


def test_three_routers_in_one_run(cluster: int) -> None:
    """The bench's comparison (D2LPM, Ray's default, PrefixCacheAffinityRouter)
    runs on one cluster and every router serves every request."""
    reqs = small_workload(greedy=8, per_tenant=3)
    for router in bench.ROUTERS:
        summary = bench.run_router(
            router,
            reqs,
            replicas=2,
            ingress=0,
            engine_options={},
            d2lpm_options={"worker_quantum": 200.0},
            timeout_s=TIMEOUT_S,
        )
        assert summary["completed"] == len(reqs) and summary["failed"] == 0, summary["errors"]
        assert set(summary["tenants"]) == {"greedy", "tenant0", "tenant1", "tenant2"}
        assert 0 < summary["jain_index_window"] <= 1
    assert "| d2lpm |" in bench.markdown([summary | {"router": "d2lpm"}])


def test_view_hub_is_a_named_actor_and_comes_back(cluster: int) -> None:
    """The routers' hub (fairq.ray.hub) on the real cluster: one actor by
    name for every router of a deployment; killed, the routers count the
    failure and, after the retry wait, create it again and go on."""
    import asyncio

    import ray

    from fairq.ray.hub import HubLink, connect_ray

    name = "fairq-view-test-hub"

    def ev(rid: str) -> tuple[str, str, list[int], int, str, float]:
        return (rid, "t", [1, 2, 3], 3, "r0", 0.0)

    async def go() -> None:
        a = HubLink("a", connect_ray(name), 0.01)
        b = HubLink("b", connect_ray(name), 0.01)
        assert await b.sync() == []
        a.note(ev("1"))
        assert await a.sync() == []
        assert [e[0] for e in await b.sync()] == ["1"]
        # the agreed placement through the actor: one table for both links
        assert await a.place("doc", ["r0", "r1"], "r1", 0) == "r1"
        assert await b.place("doc", ["r0", "r1"], "r0", 0) == "r1"
        assert a.counters["hub_placed"] == b.counters["hub_placed"] == 1
        ray.kill(ray.get_actor(name, namespace="fairq"))
        a.note(ev("2"))
        assert await a.sync() == []
        assert a.counters["hub_errors"] == 1
        deadline = time.monotonic() + 60
        while True:  # the name is free once Ray has seen the actor die
            a._next_at = b._next_at = 0.0  # no retry wait here
            await a.sync()
            await b.sync()
            if a.counters["hub_posted"] == 2 and b._cursor is not None:
                break
            assert time.monotonic() < deadline, (a.counters, b.counters)
            await asyncio.sleep(0.2)
        a.note(ev("3"))
        await a.sync()
        assert [e[0] for e in await b.sync()] == ["3"]
        ray.kill(ray.get_actor(name, namespace="fairq"))

    asyncio.run(asyncio.wait_for(go(), timeout=TIMEOUT_S))
