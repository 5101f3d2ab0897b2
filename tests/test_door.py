"""The front door (fairq.ledger.door, fairq.vllm.door) as an ASGI middleware
over a fake app: 429 with Retry-After, 413, the tenant from the scheduler's
resolver and the gateway headers (handed on in vllm_xargs), exact release
of what was accepted, pass-through of what is not a generation request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fairq.ledger.door import estimate_tokens
from fairq.vllm.door import FairAdmission, door_options, share_leads
from fairq.vllm.tenants import FairOptions


class App:
    """Answers 200 with the body it got; ``gate`` holds answers back."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None
        self.fail = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        msg = await receive()
        try:
            self.bodies.append(json.loads(msg["body"]))
        except (ValueError, RecursionError):
            self.bodies.append({"raw": msg["body"]})
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})


async def call(
    door: Any, body: Any, headers: dict[str, str] | None = None, path: str = "/v1/completions"
) -> tuple[int, dict[str, str], bytes]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    sent: list[Any] = []
    fed = False

    async def receive() -> Any:
        nonlocal fed
        if not fed:
            fed = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.sleep(3600)

    async def send(msg: Any) -> None:
        sent.append(msg)

    await door(scope, receive, send)
    start = sent[0]
    hs = {k.decode(): v.decode() for k, v in start.get("headers", [])}
    return start["status"], hs, b"".join(m.get("body", b"") for m in sent[1:])


def door(limits: dict[str, Any], **raw: Any) -> tuple[FairAdmission, App]:
    app = App()
    return FairAdmission(app, FairOptions.from_mapping("vtc", {"limits": limits, **raw})), app


def body(tenant: str, n: int = 8) -> dict[str, Any]:
    return {"model": "m", "prompt": [1] * n, "max_tokens": 4, "vllm_xargs": {"tenant": tenant}}


def test_estimate_counts_token_ids_exactly_and_text_by_bytes() -> None:
    assert estimate_tokens({"prompt": [5] * 10, "max_tokens": 3}) == 13
    assert estimate_tokens({"prompt": "abcdefgh", "max_tokens": 0}) == 2
    chat = {"messages": [{"role": "user", "content": "x" * 40}], "max_completion_tokens": 5}
    assert estimate_tokens(chat) == 15
    assert estimate_tokens({"text": "abcd", "sampling_params": {"max_new_tokens": 7}}) == 8


def test_estimate_counts_every_completion_asked_for_and_any_depth() -> None:
    from types import SimpleNamespace

    from fairq.ray.extract import estimate_tokens as ray_estimate

    # n completions of max_tokens each occupy n times the output
    assert estimate_tokens({"prompt": [5] * 10, "max_tokens": 3, "n": 4}) == 22
    sg = {"text": "abcd", "sampling_params": {"max_new_tokens": 7, "n": 2}}
    assert estimate_tokens(sg) == 15
    assert estimate_tokens({"prompt": "abcd", "max_tokens": 3, "n": 0}) == 4  # at least one
    # the Ray router counts the same, from a dict or a request object
    assert ray_estimate(10, ({"max_tokens": 3, "n": 4},), {}) == 22
    assert ray_estimate(10, (SimpleNamespace(max_completion_tokens=3, n=2),), {}) == 16
    # nesting deeper than Python's recursion limit is counted, not a RecursionError
    deep: list = ["abcd"]
    for _ in range(5000):
        deep = [deep, "abcd"]
    assert estimate_tokens({"prompt": deep, "max_tokens": 0}) == 5001


def test_flood_gets_429_with_retry_after_and_light_tenant_passes() -> None:
    async def run() -> None:
        d, app = door({"max_requests": 2})
        app.gate = asyncio.Event()
        held = [asyncio.create_task(call(d, body("flood"))) for _ in range(2)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        status, hs, payload = await call(d, body("flood"))
        assert status == 429 and int(hs["retry-after"]) >= 1
        err = json.loads(payload)["error"]
        assert err["code"] == 429 and err["fairq"] == {"reason": "global", "tenant": "flood"}
        light = asyncio.create_task(call(d, body("light")))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert d.control.held("light") == (1, 12)
        app.gate.set()
        results = await asyncio.gather(*held, light)
        assert [r[0] for r in results] == [200, 200, 200]
        assert (d.control.requests, d.control.tokens) == (0, 0)  # every one released
        st = d.control.stats()
        assert st["flood"]["refused"] == {"global": 1} and st["light"]["accepted"] == 1

    asyncio.run(run())


def test_413_for_a_request_no_cap_can_hold() -> None:
    d, _ = door({"tenant_max_tokens": 10})
    status, hs, _ = asyncio.run(call(d, body("a", n=20)))
    assert status == 413 and "retry-after" not in hs


def test_gateway_header_names_the_tenant_and_is_handed_on() -> None:
    d, app = door({"max_requests": 5})
    hdr = {"x-gateway-inference-fairness-id": "gw-team", "content-length": "999"}
    asyncio.run(call(d, body("spoofed"), hdr))
    assert app.bodies[-1]["vllm_xargs"] == {"tenant": "gw-team"}
    asyncio.run(call(d, body("x"), {"x-llm-d-inference-fairness-id": "llmd"}))
    assert app.bodies[-1]["vllm_xargs"]["tenant"] == "llmd"
    # no header: the body's tenant, untouched
    asyncio.run(call(d, {"prompt": "hi", "vllm_xargs": {"tenant": "own"}}))
    assert app.bodies[-1]["vllm_xargs"] == {"tenant": "own"}
    assert set(d.control.stats()) == {"gw-team", "llmd", "own"}


def test_request_id_header_names_the_tenant_as_the_scheduler_does() -> None:
    d, _ = door({"max_requests": 5})
    asyncio.run(call(d, {"prompt": "hi"}, {"x-request-id": "acme:1"}))
    asyncio.run(call(d, {"messages": []}, {"x-request-id": "beta:2"}, "/v1/chat/completions"))
    assert set(d.control.stats()) == {"acme", "beta"}


def test_a_failing_app_still_releases_and_other_paths_pass() -> None:
    d, app = door({"tenant_max_requests": 1})
    app.fail = True
    with pytest.raises(RuntimeError):
        asyncio.run(call(d, body("a")))
    assert d.control.requests == 0
    app.fail = False
    assert asyncio.run(call(d, b"not json"))[0] == 200
    assert asyncio.run(call(d, body("a"), path="/health"))[0] == 200
    assert d.control.stats()["a"]["accepted"] == 1


def test_bad_door_options_name_the_field() -> None:
    env = {"FAIRQ_VLLM_OPTIONS": json.dumps({"limits": {"max_tokens": -3}})}
    with pytest.raises(ValueError, match=r"limits\.max_tokens must be an integer >= 1"):
        door_options(env)
    ok = door_options({"FAIRQ_VLLM_OPTIONS": json.dumps({"quantum": 64, "limits": {}})})
    assert ok.limits is not None and not ok.limits.active


def test_accounts_come_from_the_metrics_payload() -> None:
    fam = [
        "fairq_scheduler_share_lead",
        "gauge",
        "",
        [["fairq_scheduler_share_lead", {"name": "vllm-vtc-tier0", "tenant": "a"}, 5.0]],
    ]
    other = [["fairq_scheduler_share_lead", {"name": "x", "tenant": "a"}, 9.0]]
    payloads = [json.dumps([fam]), json.dumps([[fam[0], fam[1], fam[2], other]])]
    assert share_leads(payloads) == {"a": 9.0}


def test_door_metrics_per_tenant() -> None:
    from fairq.metrics import FairqCollector

    d, app = door({"tenant_max_requests": 1})
    app.gate = asyncio.Event()

    async def run() -> None:
        t = asyncio.create_task(call(d, body("a")))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert (await call(d, body("a")))[0] == 429
        fams = {f.name: f for f in FairqCollector(d.control, "door").collect()}
        held = {s.labels["tenant"]: s.value for s in fams["fairq_admission_held_requests"].samples}
        assert held == {"a": 1}
        refused = fams["fairq_admission_refused"].samples
        assert [(s.labels["reason"], s.value) for s in refused] == [("tenant_requests", 1)]
        app.gate.set()
        await t

    asyncio.run(run())


def test_a_door_built_again_replaces_its_metrics() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")

    def held() -> list[tuple[str, float]]:
        return [
            (s.labels["tenant"], s.value)
            for fam in prometheus_client.REGISTRY.collect()
            if fam.name == "fairq_admission_held_requests"
            for s in fam.samples
            if s.labels.get("name") == "vllm-door"
        ]

    first, _ = door({"tenant_max_requests": 1})
    assert first.control.offer("a", 10) is None
    assert held() == [("a", 1)]
    second, _ = door({"tenant_max_requests": 1})  # the app built again
    assert second.control.offer("b", 10) is None
    # the latest door's series alone: the first door's are gone, not doubled
    assert held() == [("b", 1)]


def test_sglang_door_resolves_as_sglang_and_hands_headers_on_in_custom_labels() -> None:
    from fairq.sglang.door import FairAdmission as SGLangAdmission
    from fairq.sglang.tenants import FairOptions as SGLangOptions

    app = App()
    opts = SGLangOptions.from_mapping("vtc", {"limits": {"tenant_max_requests": 1}})
    d = SGLangAdmission(app, opts)
    gen = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
    assert asyncio.run(call(d, {**gen, "rid": "acme:1"}, path="/generate"))[0] == 200
    hdr = {"x-llm-d-inference-fairness-id": "gw"}
    assert asyncio.run(call(d, {**gen, "rid": "acme:2"}, hdr, "/generate"))[0] == 200
    assert app.bodies[-1]["custom_labels"] == {"tenant": "gw"}
    assert set(d.control.stats()) == {"acme", "gw"}


def test_sglang_install_door_adds_the_middleware_to_the_serving_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    import types

    from fairq.sglang.door import FairAdmission as SGLangAdmission
    from fairq.sglang.door import install_door

    added: list[Any] = []
    fake = types.ModuleType("sglang.srt.entrypoints.http_server")
    fake.app = types.SimpleNamespace(add_middleware=lambda cls, **kw: added.append((cls, kw)))  # type: ignore[attr-defined]
    env = {"FAIRQ_SGLANG_OPTIONS": json.dumps({"limits": {"max_requests": 4}})}
    assert not install_door(env)  # not the serving process
    monkeypatch.setitem(sys.modules, "sglang.srt.entrypoints.http_server", fake)
    assert install_door(env)
    assert added[0][0] is SGLangAdmission and added[0][1]["options"].limits.max_requests == 4
    assert not install_door({})  # no limits: no door
    with pytest.raises(ValueError, match=r"limits\.max_requests"):
        install_door({"FAIRQ_SGLANG_OPTIONS": json.dumps({"limits": {"max_requests": "x"}})})


def test_unreadable_accounts_or_a_too_deep_body_never_fail_the_request() -> None:
    class Broken(FairAdmission):
        def accounts(self) -> Any:
            raise OSError("a metrics file half written")

    app = App()
    d = Broken(app, FairOptions.from_mapping("vtc", {"limits": {"max_requests": 4}}))
    assert asyncio.run(call(d, body("a")))[0] == 200
    assert d.control.stats()["a"]["accepted"] == 1
    # JSON nested past the parser's recursion: not the door's to judge, the app answers
    deep = b"[" * 100_000 + b"]" * 100_000
    assert asyncio.run(call(d, deep))[0] == 200
    assert app.bodies[-1] == {"raw": deep}
