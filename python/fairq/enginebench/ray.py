"""``fairq ray-bench``: D2LPM vs Ray Serve's own routers on a local Ray cluster.

Starts a local Ray cluster bound to loopback, deploys ``N`` replicas of
:class:`~fairq.ray.engine.EngineReplica` (transformers continuous
batching with ``fairq-dlpm`` on a random-weight model, CPU by default) once per
router, replays the same multi-tenant workload through a real
``DeploymentHandle`` and reports, per router: per-tenant service and Jain's
index over the window in which every tenant is backlogged (service: prompt
tokens the engine computed, i.e. not served from its prefix cache, plus 2 per
output token; DLPM's cost), the engines' prefix-cache hit rate, p50/p99
latency, and how the greedy tenant was spread.

Routers:

- ``d2lpm``: fairq's :class:`FairqD2LPMRouter`;
- ``pow2``: Ray's default (power of two choices);
- ``prefix``: Ray's ``PrefixCacheAffinityRouter``. ``ray.serve.llm`` exports it
  but importing ``ray.serve.llm`` needs vLLM or SGLang, so the bench names the
  class where it is defined (``ray.llm._internal...prefix_aware_router``); the
  public one is a subclass that adds nothing.

The workload: one greedy tenant sending ``--greedy-requests`` requests that
share a long prefix, against ``--tenants`` well-behaved tenants sending
``--requests-per-tenant`` each (each with its own short shared prefix), all
submitted at once (everyone backlogged). Prompts are text (the engine reads
UTF-8 bytes as token ids; the routers see text), so D2LPM runs on its
pseudo-token pages.

``--ingress K`` puts K ingress replicas (each with its own handle, hence its
own router and D2LPM state) in front of the engines and splits every tenant's
requests over them: what several routers do to fairness.
``--kill-after N`` kills one engine replica after N responses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fairq.sim.metrics import jain_index, percentile

ROUTERS: tuple[str, ...] = ("d2lpm", "pow2", "prefix")

PREFIX_ROUTER_PATH = (
    "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router"
    ":PrefixCacheAffinityRouter"
)


@dataclass
class BenchRequest:
    """An OpenAI-completion-like request object (``prompt``, ``user``,
    ``max_tokens``): what ``ray.serve.llm`` passes to its engine deployments,
    readable by all three routers."""

    prompt: str
    user: str
    max_tokens: int = 16


@dataclass
class Sent:
    tenant: str
    request: BenchRequest
    start: float = 0.0
    end: float = 0.0
    response: dict[str, Any] | None = None
    error: str | None = None


def workload(
    *,
    greedy_requests: int = 48,
    tenants: int = 3,
    requests_per_tenant: int = 16,
    greedy_prefix_chars: int = 384,
    tenant_prefix_chars: int = 64,
    suffix_chars: int = 16,
    max_tokens: int = 16,
) -> list[tuple[str, BenchRequest]]:
    """The requests in submission order (round-robin over tenants, so every
    tenant has work queued from the start). Deterministic."""

    def text(tag: str, n: int) -> str:
        base = f"[{tag}] The quick brown fox jumps over the lazy dog. "
        return (base * (n // len(base) + 1))[:n]

    streams: list[list[tuple[str, BenchRequest]]] = []
    gp = text("greedy system prompt", greedy_prefix_chars)
    streams.append(
        [
            ("greedy", BenchRequest(gp + text(f"g{i}", suffix_chars), "greedy", max_tokens))
            for i in range(greedy_requests)
        ]
    )
    for t in range(tenants):
        name = f"tenant{t}"
        tp = text(f"{name} prompt", tenant_prefix_chars)
        streams.append(
            [
                (name, BenchRequest(tp + text(f"{name}-{i}", suffix_chars), name, max_tokens))
                for i in range(requests_per_tenant)
            ]
        )
    out: list[tuple[str, BenchRequest]] = []
    for i in range(max(len(s) for s in streams)):
        out.extend(s[i] for s in streams if i < len(s))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2, http_port: int | None = None) -> Iterator[int]:
    """A local Ray cluster and Serve; shut down on exit. Yields the HTTP
    proxy's port. The proxy listens on 127.0.0.1; Ray's own processes (GCS,
    raylet, workers) listen on every interface, as Ray does."""
    import ray
    from ray import serve

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    port = http_port or free_port()
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield port
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def router_config(name: str, stats_period_s: float = 0.5, **d2lpm_options: Any) -> Any:
    """The ``RequestRouterConfig`` of a router by short name (see :data:`ROUTERS`)."""
    from ray.serve.config import RequestRouterConfig

    from fairq.ray import fairq_router_config

    if name == "d2lpm":
        return fairq_router_config(request_routing_stats_period_s=stats_period_s, **d2lpm_options)
    if name == "pow2":
        return RequestRouterConfig()
    if name == "prefix":
        config: dict[str, Any] = {"request_router_class": PREFIX_ROUTER_PATH}
        return RequestRouterConfig(**config)
    raise ValueError(f"router must be one of {', '.join(ROUTERS)}; got {name!r}")


class Ingress:
    """An ingress deployment: HTTP or handle requests in, forwarded to the
    engine deployment through this replica's own handle (and router)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def __call__(self, request: Any) -> dict[str, Any]:
        if hasattr(request, "json"):  # an HTTP request from Serve's proxy
            body = await request.json()
            tenant = request.headers.get("x-fairq-tenant")
            if tenant and isinstance(body, dict) and "user" not in body:
                body["user"] = tenant
            request = body
        result: dict[str, Any] = await self.engine.remote(request)
        return result


def deploy(
    router: str,
    *,
    replicas: int = 2,
    ingress: int = 0,
    engine_options: dict[str, Any] | None = None,
    d2lpm_options: dict[str, Any] | None = None,
    app: str = "fairq-bench",
    route_prefix: str = "/",
    stats_period_s: float = 0.5,
    max_ongoing_requests: int = 256,
) -> Any:
    """Deploy the engines (and ``ingress`` ingress replicas in front) routed
    by ``router``; returns the app's handle once every replica is up."""
    from ray import serve

    from fairq.ray.engine import EngineReplica

    deployment: Any = serve.deployment  # typed as a decorator; called with a class here

    def shared() -> dict[str, Any]:
        """What both deployments take (fresh each time: Serve keeps the dicts)."""
        return {"max_ongoing_requests": max_ongoing_requests, "ray_actor_options": {"num_cpus": 0}}

    engine = deployment(
        EngineReplica,
        name="Engine",
        num_replicas=replicas,
        request_router_config=router_config(router, stats_period_s, **(d2lpm_options or {})),
        health_check_period_s=1.0,
        graceful_shutdown_timeout_s=2.0,
        **shared(),
    ).bind(**(engine_options or {}))
    if ingress:
        root = deployment(Ingress, name="Ingress", num_replicas=ingress, **shared()).bind(engine)
    else:
        root = engine
    return serve.run(root, name=app, route_prefix=route_prefix)


async def _send_all(
    handle: Any,
    reqs: list[tuple[str, BenchRequest]],
    *,
    timeout_s: float,
    kill_after: int | None = None,
    kill: Any = None,
) -> list[Sent]:
    sent = [Sent(t, r) for t, r in reqs]
    done = 0
    killed = False

    async def one(s: Sent) -> None:
        nonlocal done, killed
        s.start = time.perf_counter()
        try:
            s.response = await asyncio.wait_for(handle.remote(s.request), timeout_s)
        except Exception as e:  # recorded, reported, never hangs
            s.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        s.end = time.perf_counter()
        done += 1
        if kill is not None and not killed and kill_after is not None and done >= kill_after:
            killed = True
            await asyncio.to_thread(kill)

    await asyncio.gather(*(one(s) for s in sent))
    return sent


def send_all(handle: Any, reqs: list[tuple[str, BenchRequest]], **kw: Any) -> list[Sent]:
    """Submit every request at once through ``handle``; wait for all (each
    bounded by ``timeout_s``)."""
    return asyncio.run(_send_all(handle, reqs, **kw))


def summarize(router: str, sent: list[Sent]) -> dict[str, Any]:
    """Per-tenant and overall metrics of one run (JSON-ready)."""
    ok = [s for s in sent if s.response is not None]
    t0 = min(s.start for s in sent)
    by_tenant: dict[str, list[Sent]] = {}
    for s in sent:
        by_tenant.setdefault(s.tenant, []).append(s)
    # The backlogged window ends when the first tenant has nothing left.
    t_end = min(max(s.end for s in ss) for ss in by_tenant.values())
    tenants: dict[str, Any] = {}
    window: list[float] = []
    for tenant, ss in sorted(by_tenant.items()):
        good = [s for s in ss if s.response is not None]
        lat = [s.end - s.start for s in good]

        def cost(s: Sent) -> float:
            # DLPM's cost: prompt tokens the engine computed (not served from
            # its prefix cache) plus w_q = 2 per output token.
            assert s.response is not None
            r = s.response
            return r["prompt_tokens"] - r["cached_tokens"] + 2.0 * r["output_tokens"]

        in_window = sum(cost(s) for s in good if s.end <= t_end)
        window.append(in_window)
        tenants[tenant] = {
            "requests": len(ss),
            "completed": len(good),
            "failed": len(ss) - len(good),
            "service": sum(cost(s) for s in good),
            "service_in_window": in_window,
            "latency_p50_s": percentile(lat, 50),
            "latency_p99_s": percentile(lat, 99),
            "replicas": len({s.response["replica"] for s in good if s.response}),
        }
    prompt = sum(s.response["prompt_tokens"] for s in ok if s.response)
    cached = sum(s.response["cached_tokens"] for s in ok if s.response)
    lat_all = [s.end - s.start for s in ok]
    per_replica: dict[str, int] = {}
    for s in ok:
        assert s.response is not None
        per_replica[s.response["replica"]] = per_replica.get(s.response["replica"], 0) + 1
    return {
        "router": router,
        "requests": len(sent),
        "completed": len(ok),
        "failed": len(sent) - len(ok),
        "errors": sorted({s.error for s in sent if s.error}),
        "wall_s": max(s.end for s in sent) - t0,
        "backlogged_window_s": t_end - t0,
        "jain_index_window": jain_index(window),
        "prefix_hit_rate": cached / prompt if prompt else 0.0,
        "latency_p50_s": percentile(lat_all, 50),
        "latency_p99_s": percentile(lat_all, 99),
        "requests_per_replica": dict(sorted(per_replica.items())),
        "tenants": tenants,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    """The comparison table."""
    tenants = sorted({t for r in results for t in r["tenants"]})
    head = ["router", "Jain (window)", "prefix hit", "p50 s", "p99 s", "done/failed"]
    head += [f"{t} service" for t in tenants]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        row = [
            r["router"],
            f"{r['jain_index_window']:.3f}",
            f"{r['prefix_hit_rate']:.3f}",
            f"{r['latency_p50_s']:.2f}",
            f"{r['latency_p99_s']:.2f}",
            f"{r['completed']}/{r['failed']}",
        ]
        row += [f"{r['tenants'][t]['service_in_window']:.0f}" for t in tenants]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def kill_one_replica(handle: Any) -> Any:
    """A function killing the engine replica that answers a probe request."""
    import ray

    def kill() -> None:
        name = ray.get(handle.actor_name.remote()._to_object_ref_sync())
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    return kill


def run_router(
    router: str,
    reqs: list[tuple[str, BenchRequest]],
    *,
    replicas: int,
    ingress: int,
    engine_options: dict[str, Any],
    d2lpm_options: dict[str, Any],
    timeout_s: float,
    kill_after: int | None = None,
) -> dict[str, Any]:
    """Deploy, warm up, replay ``reqs``, delete the app; the summary.

    Each router gets its own app name: a process keeps one router per
    deployment id, so redeploying the same app with another router class
    would keep routing with the first one."""
    from ray import serve

    app = f"bench-{router}-{time.monotonic_ns()}"
    handle = deploy(
        router,
        replicas=replicas,
        ingress=ingress,
        engine_options=engine_options,
        d2lpm_options=d2lpm_options,
        app=app,
        route_prefix=f"/{app}",
    )
    try:
        warm = [("warmup", BenchRequest("warm up " * 4, "warmup", 2))] * replicas
        send_all(handle, warm, timeout_s=timeout_s)
        kill = None
        if kill_after is not None:
            engine = serve.get_deployment_handle("Engine", app_name=app)
            kill = kill_one_replica(engine)
        sent = send_all(handle, reqs, timeout_s=timeout_s, kill_after=kill_after, kill=kill)
        return summarize(router, sent)
    finally:
        serve.delete(app)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fairq.cliargs import count, number, output_file, positive
    from fairq.transformers.model import MODEL_SIZES

    parser.add_argument(
        "--routers", default=",".join(ROUTERS), help=f"comma-separated of {', '.join(ROUTERS)}"
    )
    parser.add_argument("--replicas", type=count(1), default=2)
    parser.add_argument("--ingress", type=count(0), default=0, help="ingress replicas (routers)")
    parser.add_argument("--greedy-requests", type=count(1), default=96)
    parser.add_argument("--tenants", type=count(1), default=3)
    parser.add_argument("--requests-per-tenant", type=count(1), default=32)
    parser.add_argument("--max-tokens", type=count(1), default=32)
    parser.add_argument(
        "--worker-quantum",
        type=number(0, strict=True, inf=True),
        default=2048.0,
        help="D2LPM's Q_w, > 0 or inf (default 2048)",
    )
    parser.add_argument("--policy", default="dlpm", help="the replicas' local scheduler")
    parser.add_argument("--model-size", default="tiny", choices=sorted(MODEL_SIZES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-blocks", type=count(1), default=256, help="KV pages per replica")
    parser.add_argument("--num-cpus", type=count(1), default=2)
    parser.add_argument("--kill-after", type=count(1), default=None)
    parser.add_argument("--timeout-s", type=positive, default=300.0)
    parser.add_argument("--repeat", type=count(1), default=1, help="runs per router (rows)")
    parser.add_argument(
        "--json", default=None, type=output_file, help="write the results as JSON here"
    )


def run(args: argparse.Namespace) -> int:
    from fairq.cli import write_json
    from fairq.cliargs import UsageError, need
    from fairq.engineopts import check_policy

    routers = [r.strip().lower() for r in args.routers.split(",") if r.strip()]
    for r in routers:
        if r not in ROUTERS:
            raise UsageError(f"unknown router {r!r} (known: {', '.join(ROUTERS)})", arg="--routers")
    if not routers:
        raise UsageError("names no router", arg="--routers")
    try:
        args.policy = check_policy(args.policy)
    except ValueError as e:
        raise UsageError(str(e), arg="--policy") from None
    # Ray Serve, and torch + transformers for the engine replicas (without
    # them Ray only says "Failed to update the deployments")
    need(
        "ray",
        "engine",
        what="Ray Serve with engine replicas",
        modules=("ray", "torch", "transformers"),
    )
    reqs = workload(
        greedy_requests=args.greedy_requests,
        tenants=args.tenants,
        requests_per_tenant=args.requests_per_tenant,
        max_tokens=args.max_tokens,
    )
    engine_options = {
        "policy": args.policy,
        "model_size": args.model_size,
        "device": args.device,
        "num_blocks": args.num_blocks,
    }
    results = []
    with local_cluster(num_cpus=args.num_cpus):
        for i in range(args.repeat):
            for r in routers:  # interleaved, so drift hits every router alike
                res = run_router(
                    r,
                    reqs,
                    replicas=args.replicas,
                    ingress=args.ingress,
                    engine_options=engine_options,
                    d2lpm_options={"worker_quantum": args.worker_quantum},
                    timeout_s=args.timeout_s,
                    kill_after=args.kill_after,
                )
                res["run"] = i
                results.append(res)
    import platform

    payload = {
        "command": "fairq ray-bench " + " ".join(sys.argv[2:]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "config": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "results": results,
    }
    print(markdown(results))
    if args.json:
        write_json(args, payload)
    return 0
