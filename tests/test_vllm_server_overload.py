"""Overload on a real vLLM OpenAI server with fairq's front door (issue 33):
a flood tenant and three well-behaved ones; bad limits stop the server.

Marker ``vllm_server`` (``$FAIRQ_VLLM_SERVER_PYTHON``: vLLM's CPU build);
about 3 minutes on 2 cores (two server starts). The measured run (20,000
flood requests, p99 against a run without the flood's excess) is
``python -m fairq.enginebench.overload``, docs/results/overload.md.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fairq.enginebench.overload import (
    FLOOD,
    LIGHT,
    MIDDLEWARE,
    Sampler,
    group_rss,
    requests,
    send_with_flood,
    summarize,
)
from fairq.enginebench.server import ServerError, write_model
from fairq.enginebench.traffic import HttpRequest, metric_sum, scrape, send_all, settle_metrics

from reference.vllm import require_serving_vllm, vllm_server

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()

LIMIT = 16


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_model(tmp_path_factory.mktemp("model"), "tiny")


def _post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, dict[str, str], dict]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_flood_gets_429s_well_behaved_none_memory_bounded(model: str, tmp_path: Path) -> None:
    options = {"limits": {"max_requests": LIMIT}}
    args = ["--max-num-seqs", "4", "--middleware", MIDDLEWARE]
    with vllm_server(model, "vtc", options=options, args=args, log=tmp_path / "s.log") as s:
        assert s.proc is not None
        send_all(s.url, model, [HttpRequest("warm", "warm", [5] * 8, 2)])  # warm up
        rss0 = group_rss(s.proc.pid)
        sampler = Sampler(s, every=0.5)
        sampler.start()
        reqs = requests(600, 10.0, 1.0)
        flood = [r for r in reqs if r.tenant == FLOOD]
        light = [r for r in reqs if r.tenant != FLOOD]
        f, li = send_with_flood(s.url, model, flood, light, 128)
        sampler.stop.set()
        sampler.join()
        out = summarize(f, li)
        assert out["status"][FLOOD].get("429", 0) > 0, out
        assert out["light_429"] == 0, out
        assert all(out["status"][t] == {"200": len(li) // len(LIGHT)} for t in LIGHT), out
        assert out["accepted_incomplete"] == 0, out
        # the door never held more than its hard bound (2 x max_requests)
        assert 0 < sampler.peak_held <= 2 * LIMIT
        # memory: 600 requests arrived, at most 2 x 16 were held
        assert (sampler.peak_rss - rss0) / 2**20 < 150, (rss0, sampler.peak_rss)
        m = scrape(s.url)
        refused = metric_sum(m, "fairq_admission_refused_total", tenant=FLOOD)
        assert refused == out["status"][FLOOD]["429"]
        assert metric_sum(m, "fairq_admission_accepted_total", tenant="alice") == len(li) // 3
        # a gateway's header names the tenant, and the scheduler sees the same
        body = {"model": model, "prompt": [5] * 8, "max_tokens": 2, "vllm_xargs": {"tenant": "x"}}
        code, _, _ = _post(s.url, body, {"x-gateway-inference-fairness-id": "gw-team"})
        assert code == 200
        settle_metrics(s.url, model)
        m = scrape(s.url)
        assert metric_sum(m, "fairq_admission_accepted_total", tenant="gw-team") == 1
        assert metric_sum(m, "fairq_vllm_requests_total", tenant="gw-team") == 1
        assert metric_sum(m, "fairq_vllm_requests_total", tenant="x") == 0


def test_refusals_as_a_client_sees_them_and_bad_limits_stop_the_server(
    model: str, tmp_path: Path
) -> None:
    options = {"limits": {"tenant_max_requests": 1, "tenant_max_tokens": 400}}
    args = ["--max-num-seqs", "4", "--middleware", MIDDLEWARE]
    with vllm_server(model, "vtc", options=options, args=args, log=tmp_path / "s.log") as s:
        long = {"model": model, "prompt": [5] * 8, "max_tokens": 300, "ignore_eos": True}
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_post, s.url, long, {"x-request-id": "busy:1"})
            deadline = time.monotonic() + 60
            while metric_sum(scrape(s.url), "fairq_admission_held_requests", tenant="busy") < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            code, headers, err = _post(s.url, {**long, "max_tokens": 8}, {"x-request-id": "busy:2"})
            assert first.result()[0] == 200
        assert code == 429 and int(headers["retry-after"]) >= 1
        assert err["error"]["fairq"] == {"reason": "tenant_requests", "tenant": "busy"}
        code, headers, err = _post(s.url, {**long, "max_tokens": 500}, {"x-request-id": "big:1"})
        assert code == 413 and "retry-after" not in {k.lower() for k in headers}
        assert err["error"]["fairq"] == {"reason": "too_large", "tenant": "big"}
    t = time.monotonic()
    bad = vllm_server(
        model,
        "vtc",
        options={"limits": {"max_requests": 0}},
        args=["--middleware", MIDDLEWARE],
        log=tmp_path / "bad.log",
        startup_timeout=240,
    )
    with pytest.raises(ServerError) as e:
        bad.start()
    assert time.monotonic() - t < 240
    msg = "limits.max_requests must be an integer >= 1, got 0"
    assert msg in str(e.value) or msg in bad.log_text()
    assert not bad.running()
