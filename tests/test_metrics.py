"""Prometheus metrics for every policy (``fairq.metrics``, issue 15 item 2)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

import fairq

prometheus_client = pytest.importorskip("prometheus_client")

from fairq import metrics  # noqa: E402


def scrape(obj: Any, **kw: Any) -> Any:
    reg = prometheus_client.CollectorRegistry()
    metrics.register(obj, "x", registry=reg, **kw)
    return reg


def test_local_scheduler_metrics_and_the_tenant_cap() -> None:
    s = fairq.DLPM(fairq.RadixTree(), quantum=100.0)
    for i in range(10):
        s.add(i, f"t{i % 5}", [1, 2, 3, i])
    s.schedule(12, max_requests=3)  # t0, t1, t2 admitted
    reg = scrape(s, max_tenants=2)
    v = reg.get_sample_value
    assert v("fairq_scheduler_admissions_total", {"name": "x", "tenant": "t0"}) == 1
    assert v("fairq_scheduler_admissions_total", {"name": "x", "tenant": "other"}) == 1
    assert v("fairq_scheduler_waiting_requests", {"name": "x", "tenant": "other"}) == 5
    assert v("fairq_scheduler_running_requests", {"name": "x", "tenant": "t1"}) == 1
    assert v("fairq_tenants_other", {"name": "x"}) == 3
    assert v("fairq_scheduler_deficit", {"name": "x", "tenant": "t0"}) == s.deficit("t0")
    assert v("fairq_scheduler_service_tokens_total", {"name": "x", "tenant": "t0"}) == s.service(
        "t0"
    )
    assert v("fairq_scheduler_refills_total", {"name": "x"}) == s.refills
    # a later scrape: the same tenants keep their labels, "other" only grows
    s.schedule(1000)
    assert v("fairq_scheduler_admissions_total", {"name": "x", "tenant": "other"}) == 6
    assert v("fairq_scheduler_admissions_total", {"name": "x", "tenant": "t0"}) == 2


def test_vtc_counter_and_plain_policies() -> None:
    s = fairq.VTC()
    s.add(1, "a", [1, 2])
    s.schedule(10)
    reg = scrape(s)
    assert reg.get_sample_value("fairq_scheduler_vtc_counter", {"name": "x", "tenant": "a"}) == 2
    reg = scrape(fairq.FCFS())
    assert reg.get_sample_value("fairq_tenants_other", {"name": "x"}) == 0


def test_dispatcher_drr_wfq_dualphase_metrics() -> None:
    d = fairq.D2LPM(2, 50.0)
    d.dispatch(1, "a", [1, 2, 3])
    v = scrape(d).get_sample_value
    assert v("fairq_dispatch_dispatched_total", {"name": "x", "worker": "0"}) == 1
    assert v("fairq_dispatch_inflight_requests", {"name": "x", "worker": "0"}) == 1
    assert v("fairq_dispatch_deficit", {"name": "x", "tenant": "a", "worker": "0"}) == 47
    v = scrape(fairq.RoundRobin(3)).get_sample_value
    assert v("fairq_dispatch_dispatched_total", {"name": "x", "worker": "2"}) == 0
    q = fairq.DRRQueue([fairq.PolicyClass("c", 10)])
    q.push("i", "c", 4)
    v = scrape(q).get_sample_value
    assert v("fairq_drr_queue_depth", {"name": "x", "class": "c"}) == 1
    w = fairq.WFQQueue()
    w.add("i", tokens=5, flow="f")
    w.pop()
    v = scrape(w).get_sample_value
    assert (
        v("fairq_wfq_virtual_time", {"name": "x"}) == 0 and v("fairq_wfq_flows", {"name": "x"}) == 1
    )
    p = fairq.DualPhaseQueue()
    p.add(1)
    v = scrape(p).get_sample_value
    assert v("fairq_dualphase_queue_depth", {"name": "x", "queue": "think"}) == 1
    assert v("fairq_dualphase_schedule_calls_total", {"name": "x"}) == 0


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="no fairq metrics for a list"):
        metrics.FairqCollector([])
    with pytest.raises(ValueError, match="max_tenants"):
        metrics.FairqCollector(fairq.FCFS(), max_tenants=-1)


def test_publish_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metrics.ENV_VAR, raising=False)
    assert metrics.publish(fairq.FCFS(), "t-off") is None
    monkeypatch.setenv(metrics.ENV_VAR, "1")
    s = fairq.VTC()
    c1 = metrics.publish(s, "t-on")
    c2 = metrics.publish(s, "t-on")  # replaces, no duplicate registration
    assert c1 is not None and c2 is not None
    try:
        assert (
            prometheus_client.REGISTRY.get_sample_value("fairq_tenants_other", {"name": "t-on"})
            == 0
        )
        assert metrics.publish(object(), "t-none") is None  # nothing to export
    finally:
        prometheus_client.REGISTRY.unregister(c2)
        metrics._published.pop("t-on", None)


def test_vllm_scheduler_publishes_its_wfq_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    from fairq.vllm.scheduler import replace_queues

    monkeypatch.setenv(metrics.ENV_VAR, "1")
    sched = SimpleNamespace(waiting=[], skipped_waiting=[])
    replaced = replace_queues(sched, "wfq")
    try:
        assert replaced
        for attr in replaced:
            name = f"vllm-{attr.strip('_')}"
            assert (
                prometheus_client.REGISTRY.get_sample_value("fairq_wfq_queue_depth", {"name": name})
                == 0
            )
    finally:
        for attr in replaced:
            c = metrics._published.pop(f"vllm-{attr.strip('_')}", None)
            if c is not None:
                prometheus_client.REGISTRY.unregister(c)


def test_simulate_serves_metrics_on_loopback() -> None:
    from fairq.cli import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = ["simulate", "--workload", "qa-S1", "--workers", "2", "--policy", "dlpm",
            "--duration", "20", "--no-progress", "--metrics-port", str(port),
            "--metrics-hold", "4"]  # fmt: skip
    t = threading.Thread(target=main, args=(argv,), daemon=True)
    t.start()
    body = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "fairq_dispatch_dispatched_total" not in body:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                body = r.read().decode()
        except OSError:
            time.sleep(0.2)
    t.join(timeout=30)
    assert 'fairq_scheduler_admissions_total{name="w0"' in body
    assert 'fairq_dispatch_dispatched_total{name="dispatcher",worker="1"}' in body
