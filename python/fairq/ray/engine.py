"""A Ray Serve replica running a real engine with a fair local scheduler.

``EngineReplica`` is the body of a Serve deployment (wrap it with
``serve.deployment``): transformers' continuous batching on a Llama-style
model with random weights built from a local config (nothing is downloaded;
:func:`fairq.transformers.model.build_model`), scheduled by a
fairq policy (``fairq-dlpm`` by default), so D2LPM's router and DLPM's local
scheduler run together as ALGORITHMS.md section 7 describes. The tests and
``fairq ray-bench`` use it on CPU; in production the replicas are
``ray.serve.llm`` vLLM engines running fairq's vLLM scheduler (see
docs/design/engines.md, "D2LPM on Ray Serve").

Request body (a dict; anything else fails the request through Ray's normal
error path, a ``ValueError`` naming the field)::

    {"user": "alice",                      # tenant (optional: "default")
     "prompt_token_ids": [1, 2, ...],      # or "prompt": "text" (UTF-8 bytes as ids)
     "max_tokens": 16}

Response: ``{"request_id", "tenant", "replica", "prompt_tokens",
"output_tokens", "cached_tokens", "engine_s"}``. Every finish is reported to
the routers through :class:`ReplicaFeedback` and ``record_routing_stats``.
Needs ``fairq[engine]`` (torch, transformers) and ``fairq[ray]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from fairq.ray.extract import default_tenant, default_tokens
from fairq.ray.feedback import ReplicaFeedback, current_request_id


def _as_dict(body: Any) -> dict[str, Any]:
    """A JSON-object body, or a dataclass request object, as a dict."""
    if isinstance(body, Mapping):
        return dict(body)
    if dataclasses.is_dataclass(body) and not isinstance(body, type):
        return dataclasses.asdict(body)
    raise ValueError(f"the request body must be a JSON object, got {type(body).__name__}")


def _body_tokens(body: dict[str, Any], vocab_size: int) -> list[int]:
    ids = body.get("prompt_token_ids")
    if ids is None and isinstance(body.get("prompt"), str):
        ids = list(body["prompt"].encode("utf-8"))
    if ids is None:
        raise ValueError("the request body needs prompt_token_ids (a list of ints) or prompt (str)")
    if not isinstance(ids, list) or not ids:
        raise ValueError("prompt_token_ids must be a non-empty list of ints")
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise ValueError(f"prompt_token_ids[{i}] must be an int in 0..{vocab_size - 1}")
    return ids


class EngineReplica:
    """transformers continuous batching with a fairq scheduler, as a Serve replica.

    Args:
        policy: fairq local policy (``"dlpm"``, ``"vtc"``, ``"lpm"``, ``"fcfs"``)
            or ``"fifo"`` (transformers' own).
        model_size: ``"tiny"``, ``"small"`` or ``"1b"``
            (:data:`fairq.transformers.model.MODEL_SIZES`).
        device: ``"cpu"`` or ``"cuda"``.
        page_size, num_blocks, max_batch_tokens, max_requests_per_batch: the
            continuous-batching cache and batch limits.
        max_tokens_limit: the largest ``max_tokens`` a request may ask for.
        request_timeout_s: a request not finished by then fails (TimeoutError).
        torch_threads: torch intra-op threads (keep small next to other replicas).
    """

    def __init__(
        self,
        policy: str = "dlpm",
        model_size: str = "tiny",
        device: str = "cpu",
        page_size: int = 16,
        num_blocks: int = 256,
        max_batch_tokens: int = 256,
        max_requests_per_batch: int = 8,
        max_tokens_limit: int = 256,
        request_timeout_s: float = 120.0,
        torch_threads: int = 1,
        seed: int = 0,
    ) -> None:
        import torch

        from fairq.transformers import model as tf_model
        from fairq.transformers import scheduler as fs

        torch.set_num_threads(torch_threads)
        self.policy = policy
        self.max_tokens_limit = max_tokens_limit
        self.request_timeout_s = request_timeout_s
        self.model = tf_model.build_model(model_size, seed=seed, device=device)
        self.vocab_size = int(self.model.config.vocab_size)
        sched = tf_model.check_scheduler_type(fs.scheduler_type(policy))
        self.manager = tf_model.greedy_manager(
            self.model,
            sched,
            max_tokens_limit,
            page_size=page_size,
            num_blocks=num_blocks,
            max_batch_tokens=max_batch_tokens,
            max_requests_per_batch=max_requests_per_batch,
        )
        self.manager.start()
        self.feedback = ReplicaFeedback()
        self._waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_results, daemon=True)
        self._reader.start()
        self.replica = _replica_tag()

    def _read_results(self) -> None:
        while not self._stop.is_set():
            result = self.manager.get_result(timeout=0.05)
            if result is None:
                if not self.manager.is_running():
                    self._fail_all(RuntimeError("the engine stopped"))
                    return
                continue
            with self._lock:
                waiter = self._waiting.pop(result.request_id, None)
            if waiter is not None:
                loop, fut = waiter
                loop.call_soon_threadsafe(_set_result, fut, result)

    def _fail_all(self, err: BaseException) -> None:
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for loop, fut in waiting.values():
            loop.call_soon_threadsafe(_set_exception, fut, err)

    async def __call__(self, request: Any) -> dict[str, Any]:
        body = _as_dict(request)
        tokens = _body_tokens(body, self.vocab_size)
        max_tokens = body.get("max_tokens", 16)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise ValueError("max_tokens must be an int")
        if not 1 <= max_tokens <= self.max_tokens_limit:
            raise ValueError(f"max_tokens must be in 1..{self.max_tokens_limit}, got {max_tokens}")
        tenant = default_tenant([body], {})
        rid = current_request_id() or uuid.uuid4().hex
        # the routers' shared view: the request is here (its tokens as the routers see them)
        self.feedback.record_start(rid, tenant, default_tokens([body], {}), len(tokens))
        try:
            return await self._serve(tokens, max_tokens, tenant, rid)
        except BaseException:
            self.feedback.record_finish(rid, 0)  # leaves the view's in-flight list
            raise

    async def _serve(
        self, tokens: list[int], max_tokens: int, tenant: str, rid: str
    ) -> dict[str, Any]:
        engine_id = f"{tenant}/{rid}"  # fairq's ClientResolver: the tenant is the prefix
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._waiting[engine_id] = (loop, fut)
        t0 = time.perf_counter()
        added = self.manager.add_request(
            tokens, request_id=engine_id, max_new_tokens=max_tokens, record_timestamps=True
        )
        if added is None:
            with self._lock:
                self._waiting.pop(engine_id, None)
            raise RuntimeError("the engine refused the request (it is stopping)")
        try:
            result = await asyncio.wait_for(fut, self.request_timeout_s)
        except BaseException:
            with self._lock:
                self._waiting.pop(engine_id, None)
            self.manager.cancel_request(engine_id)
            raise
        if result.error:
            raise RuntimeError(f"the engine failed request {rid}: {result.error}")
        out = len(result.generated_tokens)
        self.feedback.record_finish(rid, out)
        return {
            "request_id": rid,
            "tenant": tenant,
            "replica": self.replica,
            "prompt_tokens": len(tokens),
            "output_tokens": out,
            "cached_tokens": self._cached(engine_id),
            "engine_s": time.perf_counter() - t0,
        }

    def _cached(self, engine_id: str) -> int:
        from fairq.transformers import scheduler as fs

        sched = fs.running_scheduler(self.manager)
        rec = getattr(getattr(sched, "stats", None), "requests", {}).get(engine_id)
        cached = getattr(rec, "engine_cached", None)
        return int(cached) if cached is not None else 0

    def record_routing_stats(self) -> dict[str, Any]:
        """Serve's routing-stats hook: the finishes for the D2LPM routers."""
        return self.feedback.routing_stats()

    def actor_name(self) -> str:
        """This replica's Ray actor name (the tests kill it by name)."""
        import ray

        return str(ray.get_runtime_context().get_actor_name())

    def scheduler_name(self) -> str:
        """Class of the scheduler the engine runs (checked by the tests)."""
        from fairq.transformers import scheduler as fs

        return type(fs.running_scheduler(self.manager)).__name__

    def shutdown(self) -> None:
        """Stop the engine; requests still running fail (RuntimeError)."""
        stop = getattr(self, "_stop", None)
        if stop is None or stop.is_set():
            return
        stop.set()
        self.manager.stop(block=True, timeout=10, hard_stop=True)
        self._fail_all(RuntimeError("the engine stopped"))

    def __del__(self) -> None:  # Serve calls it when the replica shuts down
        self.shutdown()


def _set_result(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future[Any], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)


def _replica_tag() -> str:
    try:
        from ray import serve

        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # outside Serve
        return "local"
