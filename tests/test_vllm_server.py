"""A real vLLM OpenAI server with fairq inside, under real HTTP traffic (issue 19).

Each test starts ``python -m vllm.entrypoints.openai.api_server`` as a
subprocess on 127.0.0.1 (a random-weight tiny Llama written here, nothing
downloaded; :mod:`fairq.enginebench.server`), sends concurrent multi-tenant traffic
with a real HTTP client (:mod:`fairq.enginebench.traffic`) and reads fairq's and
vLLM's metrics from the server's own ``/metrics``. The server always stops
(SIGTERM, then SIGKILL of its process group).

Needs a vLLM that can serve on this machine: ``$FAIRQ_VLLM_SERVER_PYTHON``
names its interpreter (``.ci/run`` builds a virtualenv with vLLM's CPU build
0.32 and fairq), else this interpreter's vLLM must be able to. Marker
``vllm_server``; about 10 minutes on 2 cores (each server takes ~45 s to
start).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fairq.enginebench.server import ServerError, VllmServer, write_model
from fairq.enginebench.traffic import (
    HttpRequest,
    HttpResult,
    metric_sum,
    scrape,
    send_all,
    settle_metrics,
)

from reference.vllm import require_serving_vllm, vllm_server, wait_until_waiting

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()

#: A small server: 4 running requests, 512 tokens per step, 24 KV blocks (of
#: 128 tokens on the CPU build): requests wait and prefixes get evicted.
SMALL = [
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "512",
    "--num-gpu-blocks-override",
    "24",
]

#: stock vLLM (None) and fairq's scheduler class with each policy
POLICIES: list[str | None] = [None, "fcfs", "priority", "wfq", "vtc", "lpm", "dlpm"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_model(tmp_path_factory.mktemp("model"), "tiny")


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Slow enough per step that the flood outlasts the stalls a busy 2-core
    machine puts into the client and the API server: with the tiny model the
    engine can serve the whole flood before the well-behaved tenants'
    requests reach it, and there is no contention left to test."""
    return write_model(tmp_path_factory.mktemp("model"), "small")


def _server(model: str, policy: str | None, tmp: Path, **kw: Any) -> VllmServer:
    args = list(SMALL)
    if policy == "priority":
        args += ["--scheduling-policy", "priority"]
    return vllm_server(model, policy, args=args + list(kw.pop("args", [])), log=tmp, **kw)


@pytest.fixture(scope="module", params=POLICIES, ids=lambda p: p or "stock")
def server(
    request: pytest.FixtureRequest, model: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("log") / "server.log"
    with _server(model, request.param, log) as s:
        yield s


def _check_complete(results: list[HttpResult]) -> None:
    for r in results:
        assert r.ok, (r.request.request_id, r.status, r.error)
        assert r.completion_tokens == r.request.max_tokens, r
        assert r.finish_reason == "length", r
        if r.request.stream:
            assert r.chunk_times, r
            assert r.first_token is not None


def _prompt(seed: int, n: int, prefix: list[int] | None = None) -> list[int]:
    head = list(prefix or [])
    return head + [3 + (seed * 131 + 7 * i) % 4000 for i in range(n - len(head))]


def test_mixed_traffic_completes_once_with_tenants_resolved(server: VllmServer, model: str) -> None:
    reqs = []
    expected: dict[str, int] = {"settle": 1}
    vias = ("xargs", "header", "none")
    for i in range(36):
        tenant = ("alice", "bob", "carol")[i % 3]
        via = vias[(i // 3) % 3]
        reqs.append(
            HttpRequest(
                f"m{i}",
                tenant,
                _prompt(i, 40 + 17 * (i % 5)),
                3 + i % 10,
                arrival=0.02 * i,
                endpoint="chat" if i % 2 else "completions",
                stream=bool((i // 2) % 2),
                tenant_via=via,  # type: ignore[arg-type]
                priority=(i % 2) if server.policy == "priority" else None,
            )
        )
        name = "default" if via == "none" else tenant
        expected[name] = expected.get(name, 0) + 1
    results = send_all(server.url, model, reqs)
    assert len(results) == len(reqs)
    _check_complete(results)
    assert len({r.request.request_id for r in results}) == len(reqs)
    m = scrape(server.url)
    # vLLM's own counters: every request answered once, nothing left
    assert metric_sum(m, "vllm:request_success_total") == len(reqs)
    if server.policy is None:
        assert "fairq_vllm_requests_total" not in m
        return
    settle_metrics(server.url, model)
    m = scrape(server.url)
    got = {dict(k)["tenant"]: v for k, v in m["fairq_vllm_requests_total"].items()}
    assert got == expected
    if server.policy in ("vtc", "lpm", "dlpm"):
        # each request admitted once by fairq, nothing left waiting in fairq
        assert metric_sum(m, "fairq_scheduler_admissions_total") == len(reqs) + 1
        assert metric_sum(m, "fairq_scheduler_waiting_requests") == 0
        assert metric_sum(m, "fairq_scheduler_running_requests") <= 1  # the settling request
        assert metric_sum(m, "fairq_scheduler_service_tokens_total") > 0
    assert metric_sum(m, "fairq_vllm_steps_total") > 0
    assert 0 < metric_sum(m, "fairq_vllm_fairq_seconds_total") or server.policy in (
        "fcfs",
        "priority",
        "wfq",
    )


def test_hostile_traffic_keeps_serving(server: VllmServer, model: str) -> None:
    odd = [5, 1.5, ["a", "b"], "", True, None]
    reqs = [
        HttpRequest(f"odd{i}", "x", _prompt(i, 30), 4, extra={"vllm_xargs": {"tenant": v}})
        for i, v in enumerate(odd)
    ]
    reqs.append(  # not a valid vllm_xargs value: rejected by the server's validation
        HttpRequest("odd-dict", "x", _prompt(9, 30), 4, extra={"vllm_xargs": {"tenant": {"a": 1}}})
    )
    reqs.append(HttpRequest("too-long", "x", _prompt(10, 2100), 4))  # > --max-model-len
    # streams cancelled after two chunks; clients that give up mid-generation
    reqs += [
        HttpRequest(f"cancel{i}", "c", _prompt(20 + i, 200), 400, stream=True, cancel_after=2)
        for i in range(4)
    ]
    # four long streams hold every running slot (--max-num-seqs 4), so the
    # burst after them waits; its clients go away while it waits (by 0.8 s;
    # 300 tokens a stream last about 4 s at 2 cores' ~70 tokens/s a stream)
    reqs += [
        HttpRequest(f"hold{i}", "h", _prompt(30 + i, 30), 400, stream=True, cancel_after=300)
        for i in range(4)
    ]
    reqs += [
        HttpRequest(f"gone{i}", "g", _prompt(40 + i, 300), 400, arrival=0.3, client_timeout=0.5)
        for i in range(16)
    ]
    results = {r.request.request_id: r for r in send_all(server.url, model, reqs)}
    for i, v in enumerate(odd):
        r = results[f"odd{i}"]
        if isinstance(v, (int, float, str)):  # accepted by vLLM: fairq must cope
            assert r.ok, (v, r.status, r.error)
        else:  # vLLM's own validation may refuse the others; never a 500
            assert r.ok or r.status == 400, (v, r.status, r.error)
    assert results["odd-dict"].status == 400
    assert results["too-long"].status == 400
    for i in range(4):
        assert results[f"cancel{i}"].cancelled, results[f"cancel{i}"]
        hold = results[f"hold{i}"]
        assert hold.cancelled or hold.ok, (hold.status, hold.error)
    gone = [results[f"gone{i}"] for i in range(16)]
    # each client gave up while its request waited (or, on a machine fast
    # enough, was answered in full first): nothing else
    odd_out = [
        (r.request.request_id, r.status, r.error, r.latency)
        for r in gone
        if not (r.cancelled or r.ok)
    ]
    assert not odd_out, odd_out
    # the server goes on serving, and what was abandoned leaves everywhere
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = scrape(server.url)
        busy = metric_sum(m, "vllm:num_requests_running") + metric_sum(
            m, "vllm:num_requests_waiting"
        )
        if busy == 0:
            break
        time.sleep(0.5)
    assert busy == 0, "aborted requests are still in vLLM's scheduler"
    after = send_all(
        server.url, model, [HttpRequest(f"after{i}", "z", _prompt(60 + i, 50), 5) for i in range(8)]
    )
    _check_complete(after)
    if server.policy in ("vtc", "lpm", "dlpm"):
        settle_metrics(server.url, model)
        m = scrape(server.url)
        assert metric_sum(m, "fairq_scheduler_waiting_requests") == 0
        assert metric_sum(m, "fairq_scheduler_running_requests") <= 1
    assert "Traceback" not in server.log_text()


# ---- contention: fairness and locality measured over HTTP --------------------


#: the latest the well-behaved tenants are sent after the flood (s)
WELL_LATEST_S = 1.5


def _contention_workload() -> list[HttpRequest]:
    """A tenant floods 64 requests on one 512-token prefix (4 KV blocks) at
    t=0; three tenants send 6 each on their own prefixes once the flood is
    queued (:func:`_send_contended`). 32 output tokens, streamed. With 16 KV
    blocks, two prefixes fit beside the running requests, not four."""
    reqs = []
    flood_prefix = _prompt(1000, 512)
    for i in range(64):
        reqs.append(
            HttpRequest(
                f"f{i}", "flood", _prompt(2000 + i, 528, flood_prefix), 32, 0.0, stream=True
            )
        )
    for t in range(3):
        prefix = _prompt(3000 + t, 512)
        for i in range(6):
            reqs.append(
                HttpRequest(
                    f"w{t}-{i}",
                    f"well{t}",
                    _prompt(4000 + 10 * t + i, 528, prefix),
                    32,
                    stream=True,
                )
            )
    return reqs


def _contention_run(
    model: str,
    policy: str | None,
    tmp: Path,
    options: dict[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """One server (``policy`` with engine ``options``; its log ``tmp /
    f"{name or policy}.log"``) under the contention workload: the run's
    summary row (docs/results/contention.py runs it with chosen options)."""
    from fairq.enginebench.vllm_server import summarize

    # the cached tokens per request: DLPM's cost over the window
    args = ["--num-gpu-blocks-override", "16", "--enable-prompt-tokens-details"]
    log = tmp / f"{name or policy}.log"
    with _server(model, policy, log, args=args, max_model_len=1024, options=options) as s:
        before = scrape(s.url)
        results = _send_contended(s.url, model, _contention_workload())
        after = scrape(s.url)
    assert s.proc is not None
    with pytest.raises(ProcessLookupError):  # the whole process group is gone
        os.killpg(s.proc.pid, 0)
    _check_complete(results)
    row = summarize(results, before, after)
    row.pop("service_timeline")
    # latency relative to the flood's in the same run: what the policy does,
    # not how fast the (shared, noisy) machine was during this run
    row["latency_p50_vs_flood"] = (
        row["well_behaved"]["latency_p50_s"] / row["flood"]["latency_p50_s"]
    )
    row["well_behaved"] = {k: row["well_behaved"][k] for k in ("latency_p50_s", "ttft_p50_s")}
    row["flood"] = None
    return row


def _send_contended(url: str, model: str, reqs: list[HttpRequest]) -> list[HttpResult]:
    """Send the flood at once and the other tenants as soon as half the flood
    waits in vLLM's scheduler (:func:`wait_until_waiting`), and at the latest
    ``WELL_LATEST_S`` after it, on one clock. (At 0.5 s one CI run's flood had
    not all reached the engine; at 1.5 s a quiet run's stock vLLM had served
    most of it, leaving the fair policies nothing to improve on. Under a full
    test run here the gauge once never reached half the flood: its client
    sent it slower than the server took it; then the 1.5 s applies.)"""
    flood = [r for r in reqs if r.tenant == "flood"]
    well = [r for r in reqs if r.tenant != "flood"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(send_all, url, model, flood, t0=t0)
        until = time.monotonic() + WELL_LATEST_S
        wait_until_waiting(url, len(flood) // 2, until, stop=sent.done)
        now = time.perf_counter() - t0
        late = send_all(url, model, [replace(r, arrival=now) for r in well], t0=t0)
        return sent.result() + late


def _well_share(row: dict[str, Any], unit: str = "service_window") -> float:
    """The well-behaved tenants' share of what was served while every tenant
    was backlogged: output tokens streamed (``service_window``), or DLPM's
    cost, computed prompt tokens plus twice the output (``cost_window``).
    VTC aims at 3/4 of the output tokens here. DLPM aims at 3/4 of its cost,
    and a well-behaved miss costs ten of the flood's hits, so its share of
    the output tokens is far less; it is judged in its own unit."""
    window = row[unit]
    total = sum(window.values())
    return (total - window["flood"]) / total if total else 0.0


def test_fair_policies_protect_well_behaved_tenants_and_dlpm_keeps_locality(
    small_model: str, tmp_path: Path
) -> None:
    runs = {p or "stock": _contention_run(small_model, p, tmp_path) for p in (None, "vtc", "dlpm")}
    print(json.dumps(runs, indent=1))
    stock = runs["stock"]
    # stock vLLM serves the flood first (it arrived first): most of the
    # flood's requests end before the last well-behaved one (0.67 to 1.0
    # measured; how many overlap depends on the shared machine's speed)
    assert stock["flood_done_before_well"] > 0.5, stock
    for p, unit in (("vtc", "service_window"), ("dlpm", "cost_window")):
        r = runs[p]
        # more service to the well-behaved tenants while all are backlogged
        # (stock vLLM gives them next to nothing before the flood is done),
        # in the policy's own unit (measured as shipped: VTC 0.42-0.51 of the
        # output tokens; DLPM 0.52-0.65 of its cost, serving the three
        # tenants one after another: a tenant that pays for its miss admits
        # its cheap hits with it, the others' misses wait for seats) ...
        assert _well_share(r, unit) > _well_share(stock, unit) + 0.15, runs
        # ... with lower latency
        assert r["latency_p50_vs_flood"] < 0.7 * stock["latency_p50_vs_flood"], runs
    # VTC charges prompt and output tokens and every request here has the same
    # prompt length, so it also evens out output tokens. DLPM charges what is
    # computed: a flood request is a cache hit (its 512-token prefix is shared)
    # and costs as little as a tenth of a well-behaved one whose prefix the 16-block
    # cache evicted, so DLPM is fair in its cost while serving the flood more
    # output tokens, and Jain over output tokens is not its promise here.
    assert runs["vtc"]["jain_window"] > stock["jain_window"] + 0.2, runs
    # DLPM keeps the prefix locality that VTC gives up
    assert runs["dlpm"]["prefix_hit_rate"] > runs["vtc"]["prefix_hit_rate"], runs


# ---- start-up errors -------------------------------------------------------


@pytest.mark.parametrize(
    "policy, options, field",
    [
        ("dlpm", {"quantum": -5}, "quantum"),
        ("vtc", {"tenant": {"order": ["nope"]}}, "tenant.order"),
        ("bogus", None, "FAIRQ_VLLM_POLICY"),
    ],
)
def test_bad_options_stop_the_server_at_start(
    model: str, tmp_path: Path, policy: str, options: Any, field: str
) -> None:
    """fairq's vLLM plugin (fairq.vllm.preflight) stops the API server while
    it builds its argument parser, before the model loads: one line naming
    the field, no traceback, in the time vLLM takes to import (~10 s here,
    where loading the model took ~25 s more)."""
    s = _server(model, policy, tmp_path / "bad.log", options=options, startup_timeout=240)
    t = time.monotonic()
    with pytest.raises(ServerError):
        s.start()
    took = time.monotonic() - t
    log = s.log_text()
    ours = [line for line in log.splitlines() if line.startswith("fairq: ")]
    assert len(ours) == 1 and field in ours[0], log[-2000:]
    assert "Traceback" not in log, log[-2000:]
    assert s.proc is not None and s.proc.returncode == 2
    assert took < 60, took
    assert not s.running()


def test_bad_options_without_the_plugin_stop_the_engine(model: str, tmp_path: Path) -> None:
    """With fairq's plugin left out (VLLM_PLUGINS lists others only), the
    scheduler class's own check still stops the server, naming the field."""
    s = _server(
        model,
        "dlpm",
        tmp_path / "bad.log",
        options={"quantum": -5},
        env={"VLLM_PLUGINS": "none"},
        startup_timeout=240,
    )
    with pytest.raises(ServerError) as e:
        s.start()
    log = s.log_text()
    assert "quantum" in str(e.value) or "quantum" in log
    assert not any(line.startswith("fairq: ") for line in log.splitlines())
    assert not s.running()
