"""vLLM replicas on Ray Serve: fairq's scheduler inside, D2LPM in front.

Built on Ray Serve's own LLM serving pieces (``ray.serve.llm``): its
``LLMServer`` deployment runs vLLM's ``AsyncLLM`` and its ``OpenAiIngress``
answers ``/v1/completions`` and ``/v1/chat/completions``. Tested with Ray
2.60 and vLLM's CPU build 0.32.0 (``ray[llm]`` 2.60 pins vLLM 0.29; the
pieces fairq uses work unchanged with 0.32, see docs/USAGE.md). fairq adds:

* inside each replica, vLLM's ``scheduler_cls`` is fairq's scheduler
  (``FAIRQ_VLLM_POLICY``, default ``dlpm``; ``None``: vLLM's own FCFS);
* in front, the LLM deployment's request router is
  :class:`~fairq.ray.router.FairqD2LPMRouter` (or any other
  ``RequestRouterConfig``);
* :class:`FairqLLMServer`, the ``LLMServer`` subclass each replica runs,
  reports to the routers what only the engine knows (through
  :class:`~fairq.ray.feedback.ReplicaFeedback` and Serve's
  routing-stats hook):

  - **finishes** from the engine's own outputs: it wraps the engine client's
    ``generate`` and records, when a request's output stream ends, how many
    output tokens vLLM generated for it (also when the client went away);
  - **evictions** from vLLM's KV-cache events: the engine publishes them
    (``kv_events_config``, a ZMQ ``ipc://`` socket private to the replica)
    and :class:`~fairq.ray.kvevents.KVEventListener` turns each
    evicted block into the token prefix it ended.

  It also keeps per-replica counters (requests, prompt tokens, cached prompt
  tokens from vLLM's ``num_cached_tokens``, output tokens, evictions), in
  the routing stats and, when ``FAIRQ_RAY_STATS_DIR`` is set, in a JSON file
  per replica there (the benchmark reads them).

:func:`fairq_vllm_app` builds the whole application.

For eviction feedback to line up with the router's prefix tree, the router
must see the token ids the engine caches: send prompts as token ids
(``/v1/completions`` with ``"prompt": [ids]``). Text prompts route on
pseudo-tokens (:mod:`fairq.ray.extract`), which the engine's
events do not name; their evictions are then missed and affinity can stay
on a replica that lost the prefix until the tenant's deficit moves it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from ray.serve.llm import LLMConfig, LLMServer

from fairq.ray.feedback import ReplicaFeedback, current_request_id
from fairq.ray.kvevents import KVEventListener

logger = logging.getLogger("ray.serve")

__all__ = [
    "STATE_DIR_ENV",
    "STATS_DIR_ENV",
    "FairqLLMServer",
    "fairq_vllm_app",
    "read_replica_stats",
]

#: Environment variable: a folder where each replica writes its counters.
STATS_DIR_ENV = "FAIRQ_RAY_STATS_DIR"

#: Environment variable: a folder for each replica's fairness state file
#: (``replica-<rank>.json``; a replacement replica takes the dead one's rank
#: and loads its state).
STATE_DIR_ENV = "FAIRQ_RAY_STATE_DIR"

#: Tenants counted by name per replica (the rest are counted as ``"(other)"``).
MAX_TENANTS = 1000

#: fairq's scheduler class for vLLM's ``scheduler_cls``.
SCHEDULER_CLS = "fairq.vllm.scheduler.FairqAsyncScheduler"

#: fairq's session router (each session to one replica, the sessions spread
#: evenly; :mod:`fairq.ray.ingress`), for the ingress deployment when
#: ``fairq_vllm_app(ingress_affinity=True)``.
SESSION_ROUTER_CLS = "fairq.ray.ingress:BalancedSessionRouter"


class FairqLLMServer(LLMServer):
    """``ray.serve.llm``'s ``LLMServer`` that reports finishes and evictions
    to fairq's D2LPM router (see the module doc)."""

    async def __init__(self, llm_config: LLMConfig, **kwargs: Any) -> None:  # type: ignore[misc]
        self.feedback = ReplicaFeedback()
        self.replica_tag = uuid.uuid4().hex[:8]
        self.counters: dict[str, int] = dict.fromkeys(
            ("requests", "prompt_tokens", "cached_tokens", "output_tokens", "evictions"), 0
        )
        #: requests per tenant (``vllm_xargs.tenant``; the first
        #: :data:`MAX_TENANTS`, the rest under ``"(other)"``)
        self.tenants: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stats_file: str | None = None
        stats_dir = os.environ.get(STATS_DIR_ENV, "").strip()
        if stats_dir:
            os.makedirs(stats_dir, exist_ok=True)
            self._stats_file = os.path.join(stats_dir, f"replica-{self.replica_tag}.json")
        # The engine publishes its KV-cache events on a socket only this
        # replica reads (colocated replicas must not share a port).
        self._kv_endpoint = f"ipc://{tempfile.gettempdir()}/fairq-kv-{self.replica_tag}.sock"
        llm_config.update_engine_kwargs(
            kv_events_config={
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": self._kv_endpoint,
            }
        )
        self._listener: KVEventListener | None = None
        self.state_file = self._state_file()
        await super().__init__(llm_config, **kwargs)
        self._listener = KVEventListener(self._kv_endpoint, self._on_evict)
        self._wrap_generate()
        self._write_stats()

    def _state_file(self) -> str | None:
        """With ``FAIRQ_RAY_STATE_DIR``: point fairq's scheduler in this
        replica's engine at ``replica-<rank>.json`` there (its
        ``state_file`` option; the engine process inherits the
        environment), so a replica Serve starts in place of a dead one
        resumes the dead one's deficits."""
        state_dir = os.environ.get(STATE_DIR_ENV, "").strip()
        if not state_dir or not os.environ.get("FAIRQ_VLLM_POLICY"):
            return None
        from ray import serve

        rank = serve.get_replica_context().rank.rank
        os.makedirs(state_dir, exist_ok=True)
        path = os.path.join(state_dir, f"replica-{rank}.json")
        raw = os.environ.get("FAIRQ_VLLM_OPTIONS", "").strip()
        options = json.loads(raw) if raw else {}
        options.setdefault("state_file", path)
        os.environ["FAIRQ_VLLM_OPTIONS"] = json.dumps(options)
        return str(options["state_file"])

    # --- feedback from the engine -------------------------------------------

    def _on_evict(self, tokens: list[int], kept: int) -> None:
        self.feedback.record_evict(tokens, kept)
        with self._lock:
            self.counters["evictions"] += 1

    def _wrap_generate(self) -> None:
        """Wrap the engine client's ``generate`` (the one vLLM's OpenAI
        serving objects call) to see each request's outputs."""
        client = getattr(self.engine, "_engine_client", None)
        if client is None or not hasattr(client, "generate"):
            raise RuntimeError(
                "fairq: ray.serve.llm's vLLM engine has no _engine_client.generate; "
                "this Ray/vLLM pair is not one fairq was tested with"
            )
        inner = client.generate
        server = self

        async def generate(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            rid = current_request_id()
            params = kwargs.get("sampling_params", args[1] if len(args) > 1 else None)
            delta = getattr(getattr(params, "output_kind", None), "name", "") == "DELTA"
            xargs = getattr(params, "extra_args", None)
            tenant = xargs.get("tenant") if isinstance(xargs, dict) else None
            server._started(rid, tenant, kwargs.get("prompt", args[0] if args else None))
            produced = 0
            prompt = cached = 0
            try:
                async for out in inner(*args, **kwargs):
                    n = sum(len(c.token_ids) for c in out.outputs[:1])
                    produced = produced + n if delta else max(produced, n)
                    if out.prompt_token_ids is not None:
                        prompt = len(out.prompt_token_ids)
                    # set on the first output of a stream (0 on later deltas)
                    cached = max(cached, int(getattr(out, "num_cached_tokens", 0) or 0))
                    yield out
            finally:
                server._finished(rid, tenant, prompt, cached, produced)

        client.generate = generate

    def _started(self, rid: str | None, tenant: Any, prompt: Any) -> None:
        """The routers' shared view: this replica took the request (its prompt
        ids when the engine got ids; a text prompt is published without)."""
        if rid is None:
            return
        ids = prompt.get("prompt_token_ids") if isinstance(prompt, Mapping) else None
        if ids is None:
            ids = prompt if isinstance(prompt, list) else getattr(prompt, "prompt_token_ids", None)
        name = tenant if isinstance(tenant, str) and tenant else "default"
        try:
            tokens = [int(t) for t in ids] if ids is not None else []
            self.feedback.record_start(rid, name, tokens)
        except Exception:  # not ids after all: the view goes without them, never the request
            self.feedback.record_start(rid, name)

    def _finished(
        self, rid: str | None, tenant: Any, prompt: int, cached: int, produced: int
    ) -> None:
        if rid is not None:
            self.feedback.record_finish(rid, produced)
        name = tenant if isinstance(tenant, str) and tenant else "default"
        with self._lock:
            if name not in self.tenants and len(self.tenants) >= MAX_TENANTS:
                name = "(other)"
            self.tenants[name] = self.tenants.get(name, 0) + 1
            c = self.counters
            c["requests"] += 1
            c["prompt_tokens"] += prompt
            c["cached_tokens"] += cached
            c["output_tokens"] += produced
        self._write_stats()  # small; a reader sees every finished request

    # --- routing stats ------------------------------------------------------

    def _write_stats(self) -> None:
        if self._stats_file is None:
            return
        with self._lock:
            doc = {
                "replica": self.replica_tag,
                "pid": os.getpid(),
                "time": time.time(),
                **self.counters,
                "tenants": dict(self.tenants),
            }
        tmp = self._stats_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self._stats_file)

    async def record_routing_stats(self) -> dict[str, Any]:
        """Ray's routing stats, plus fairq's feedback and counters."""
        stats = dict(await super().record_routing_stats() or {})
        stats.update(self.feedback.routing_stats())
        with self._lock:
            stats[self.feedback.key]["counters"] = {**self.counters, "tenants": dict(self.tenants)}
        self._write_stats()  # evictions since the last finish
        return stats

    async def __del__(self) -> None:
        """Stop the KV-event listener, then shut the engine down (Serve
        awaits this when the replica stops)."""
        listener = getattr(self, "_listener", None)
        if listener is not None:
            listener.close(0.5)
        await super().__del__()


def read_replica_stats(stats_dir: str) -> dict[str, dict[str, Any]]:
    """The counters files of ``stats_dir``: ``{replica tag: counters}``."""
    out: dict[str, dict[str, Any]] = {}
    if not os.path.isdir(stats_dir):
        return out
    for name in sorted(os.listdir(stats_dir)):
        if name.startswith("replica-") and name.endswith(".json"):
            try:
                with open(os.path.join(stats_dir, name)) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue
            out[str(doc.get("replica", name))] = doc
    return out


def fairq_vllm_app(
    model: str,
    *,
    model_id: str = "fairq-model",
    num_replicas: int = 2,
    policy: str | None = "dlpm",
    fairq_options: Mapping[str, Any] | None = None,
    router_config: Any = None,
    engine_kwargs: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    cpus_per_replica: float = 1.0,
    max_ongoing_requests: int = 256,
    state_dir: str | None = None,
    ingress_replicas: int = 1,
    ingress_affinity: bool = False,
    deployment_options: Mapping[str, Any] | None = None,
) -> Any:
    """The Serve application: ``ray.serve.llm``'s OpenAI ingress in front of
    ``num_replicas`` :class:`FairqLLMServer` replicas of ``model``.

    ``policy``: fairq's policy inside each engine (``dlpm``, ``vtc``,
    ``lpm``, ``fcfs``...; ``None``: vLLM's own scheduler) with
    ``fairq_options`` (``FAIRQ_VLLM_OPTIONS``). ``router_config``: the LLM
    deployment's ``RequestRouterConfig`` (default: fairq's D2LPM with its
    default options; see :func:`fairq.ray.fairq_router_config`).
    ``engine_kwargs``: more vLLM engine arguments. ``env``: more environment
    for the replicas. ``state_dir``: each replica saves its fairness state
    there and a replacement replica loads it (``FAIRQ_RAY_STATE_DIR``).
    ``ingress_replicas``: OpenAI ingress replicas, each with its own router
    (and its own D2LPM state). ``ingress_affinity``: Serve's HTTP proxy
    sends each session to one ingress replica, the sessions spread evenly
    over them (:class:`fairq.ray.ingress.BalancedSessionRouter` on the
    ingress deployment, keyed on the ``x-session-id`` header; requests
    without it spread as before). Clients
    that send their tenant as the session id then meet one D2LPM router per
    tenant, which holds that tenant's whole credit: the fairness bound of
    one router, whatever ``ingress_replicas`` is. ``deployment_options``:
    more Serve deployment options for the vLLM replicas (for example
    ``{"health_check_timeout_s": 60}``: an overloaded replica on a few CPU
    cores can miss Serve's default 10 s health check and be killed).
    """
    from ray.serve.llm import build_openai_app

    from fairq.ray import fairq_router_config

    if router_config is None:
        router_config = fairq_router_config()
    env_vars = dict(env or {})
    kwargs: dict[str, Any] = {
        "enable_prefix_caching": True,
        # each response's usage says how many prompt tokens were cached
        "enable_prompt_tokens_details": True,
        **(engine_kwargs or {}),
    }
    if policy is not None:
        kwargs["scheduler_cls"] = SCHEDULER_CLS
        env_vars["FAIRQ_VLLM_POLICY"] = policy
        if fairq_options:
            env_vars["FAIRQ_VLLM_OPTIONS"] = json.dumps(dict(fairq_options))
        if state_dir:
            env_vars[STATE_DIR_ENV] = state_dir
    config = LLMConfig(
        model_loading_config={"model_id": model_id, "model_source": model},
        placement_group_config={"bundles": [{"CPU": cpus_per_replica}]},
        deployment_config={
            "num_replicas": num_replicas,
            "max_ongoing_requests": max_ongoing_requests,
            "request_router_config": router_config,
            **(deployment_options or {}),
        },
        engine_kwargs=kwargs,
        runtime_env={"env_vars": env_vars},
        server_cls=FairqLLMServer,
    )
    args: dict[str, Any] = {"llm_configs": [config]}
    ingress: dict[str, Any] = {}
    if ingress_replicas != 1:
        ingress["num_replicas"] = ingress_replicas
    if ingress_affinity:
        from ray.serve.config import RequestRouterConfig

        session: dict[str, Any] = {"request_router_class": SESSION_ROUTER_CLS}
        ingress["request_router_config"] = RequestRouterConfig(**session)
    if ingress:
        args["ingress_deployment_config"] = ingress
    return build_openai_app(args)
