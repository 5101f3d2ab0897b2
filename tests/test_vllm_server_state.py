"""Fairness state across real vLLM server restarts (``state_file``, issue 19).

A real vLLM OpenAI server (:mod:`fairq.enginebench.server`) with fairq's scheduler
class, policy ``vtc``, ``--max-num-seqs 1`` (one request runs at a time, so
completions come in admission order) and ``{"state_file": ..., "state_interval_s":
1}``. One server lifetime after another on the same state file:

1. the first server starts from a corrupt file: it comes up, warns, moves the
   file aside (``state.json.bad-*``) and starts fresh. Control: a greedy
   tenant ``g`` that sends first is served first.
2. ``g`` gets ahead; with all three tenants waiting, SIGTERM to the API
   server; the file holds a save made after the SIGTERM, ``g`` ahead.
3. the second server restores it: ``g`` sends first and is served after
   ``a`` and ``b``. All three waiting again, SIGKILL of the whole group.
4. the third server restores the last periodic save: ``g`` still last.

Every order is made by the state, not by timing: a blocker request (tenant
``z``, streamed) holds the only running slot while the others queue; the
state file itself (saved every second while the engine steps) says when
they are all waiting; then the blocker's client goes away (vLLM aborts it)
and the queue drains in the scheduler's order.

Needs ``$FAIRQ_VLLM_SERVER_PYTHON`` (a Python with vLLM's CPU build 0.32 and
fairq) as ``tests/test_vllm_server.py``. Marker ``vllm_server``; about 3
minutes on 2 cores (three server starts).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from fairq.enginebench.server import VllmServer, write_model
from fairq.enginebench.traffic import HttpRequest, HttpResult, metric_sum, scrape, send_all

from reference.vllm import require_serving_vllm, vllm_server

pytestmark = pytest.mark.vllm_server

_VERSION = require_serving_vllm()

#: a context long enough that the blocker never finishes on its own
MAX_LEN = 16384
BLOCKER_TOKENS = MAX_LEN - 64
GREEDY = "g"
OTHERS = ("a", "b")
#: requests per tenant in each round
N = 3
#: the greedy tenant's prompt; the others' are 16 tokens
LONG = 1200
#: seconds between the first group's requests and the second's
GAP = 1.5
#: vLLM's grace for the engine core at SIGTERM: 0.32 drains requests for
#: ``--shutdown-timeout`` s (fairq saves every second meanwhile), 0.33 aborts
#: them (fairq saves first) and gives the engine core this long to exit
GRACE = 5
if str(_VERSION).startswith("0.32."):
    SHUTDOWN_ARGS, SHUTDOWN_ENV = ["--shutdown-timeout", str(GRACE)], {}
else:
    SHUTDOWN_ARGS, SHUTDOWN_ENV = [], {"VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": str(GRACE)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(write_model(tmp_path_factory.mktemp("model"), "tiny"))
    for name, key in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        doc = json.loads((path / name).read_text())
        doc[key] = MAX_LEN
        (path / name).write_text(json.dumps(doc))
    return str(path)


def _server(model: str, state: Path, log: Path) -> VllmServer:
    """A vtc server on ``state`` (a new instance: a new free port)."""
    return vllm_server(
        model,
        "vtc",
        options={"state_file": str(state), "state_interval_s": 1},
        args=["--max-num-seqs", "1", *SHUTDOWN_ARGS],
        env=SHUTDOWN_ENV,
        log=log,
        max_model_len=MAX_LEN,
    )


def _prompt(seed: int, n: int) -> list[int]:
    return [3 + (seed * 131 + 7 * i) % 4000 for i in range(n)]


# -- the state file -----------------------------------------------------------------


def _doc(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())  # writes are atomic: never a partial file
    assert doc["format"] == "fairq.vllm.state" and doc["version"] == 1, doc
    assert doc["policy"] == "vtc", doc
    return doc


def _clients(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tiers = doc["state"]["tiers"]
    return {c["name"]: c for c in tiers["0"]["clients"]} if "0" in tiers else {}


def _waiting(doc: dict[str, Any]) -> dict[str, int]:
    return {t: c["waiting"] for t, c in _clients(doc).items()}


def _all_waiting(doc: dict[str, Any]) -> bool:
    w = _waiting(doc)
    return all(w.get(t) == N for t in (GREEDY, *OTHERS))


def _assert_greedy_ahead_all_waiting(doc: dict[str, Any]) -> None:
    c = _clients(doc)
    assert _all_waiting(doc), _waiting(doc)
    for t in OTHERS:
        assert c[GREEDY]["counter"] > c[t]["counter"] + 1000, c
        assert c[GREEDY]["service"] > c[t]["service"] + 1000, c


def _wait_for(
    path: Path,
    ok: Callable[[dict[str, Any]], bool],
    what: str,
    since: float,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """The state file's first document (read every 0.2 s) saved after
    ``since`` (``time.time()``) for which ``ok`` (an idle server does not
    save: the file can be older than the last requests)."""
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = _doc(path)
        if doc["saved_at"] > since and ok(doc):
            return doc
        time.sleep(0.2)
    raise AssertionError(f"the state file never showed {what}; last: {doc}")


# -- traffic --------------------------------------------------------------------------


class Blocker:
    """A streamed request of tenant ``z`` that holds the server's only running
    slot (``--max-num-seqs 1``) until :meth:`release` closes its connection
    (vLLM then aborts it). Started: its first token has come back."""

    def __init__(self, server: VllmServer, model: str, tag: str) -> None:
        self.finished = False  # the server ended it (it must not)
        self.error: str | None = None
        self._stop = threading.Event()
        self._started = threading.Event()
        body = {
            "model": model,
            "prompt": _prompt(sum(map(ord, tag)), 16),
            "max_tokens": BLOCKER_TOKENS,
            "min_tokens": BLOCKER_TOKENS,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "vllm_xargs": {"tenant": "z"},
        }
        self._thread = threading.Thread(target=self._run, args=(server.url, body), daemon=True)
        self._thread.start()
        assert self._started.wait(120) and self.error is None, f"blocker: {self.error}"

    def _run(self, url: str, body: dict[str, Any]) -> None:
        import httpx

        try:
            with (
                httpx.Client(timeout=600) as client,
                client.stream("POST", url + "/v1/completions", json=body) as r,
            ):
                assert r.status_code == 200, r.read()[:500]
                for line in r.iter_lines():
                    if line.startswith("data: ") and '"text"' in line:
                        self._started.set()
                    if self._stop.is_set():
                        return
                    if line.strip() == "data: [DONE]":
                        self.finished = True
                        return
        except Exception as e:  # noqa: BLE001 (a killed server, say)
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self._started.set()

    def abandon(self) -> None:
        """Stop reading (the server is going away) and wait for the thread."""
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive()

    def release(self) -> None:
        """Close the connection; the slot is free once vLLM aborts it."""
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive()
        assert not self.finished, "the blocker finished on its own: the test did not hold"


class Traffic:
    """:func:`send_all` in a thread (results when :meth:`join` ed)."""

    def __init__(self, server: VllmServer, model: str, requests: Sequence[HttpRequest]) -> None:
        self.results: list[HttpResult] = []
        self._thread = threading.Thread(
            target=lambda: self.results.extend(send_all(server.url, model, requests, timeout=300)),
            daemon=True,
        )
        self._thread.start()

    def join(self) -> list[HttpResult]:
        self._thread.join(300)
        assert not self._thread.is_alive()
        return self.results


def _requests(tag: str, greedy_first: bool) -> list[HttpRequest]:
    """``g``'s long prompts and ``a``'s and ``b``'s short ones (all
    distinct), one group ``GAP`` s after the other."""
    first, second = (0.0, GAP) if greedy_first else (GAP, 0.0)
    seed = 100 * sum(map(ord, tag))
    reqs = [
        HttpRequest(f"{tag}-g{i}", GREEDY, _prompt(seed + i, LONG), 8, arrival=first)
        for i in range(N)
    ]
    reqs += [
        HttpRequest(f"{tag}-{t}{i}", t, _prompt(seed + 10 * k + i + 10, 16), 8, arrival=second)
        for k, t in enumerate(OTHERS)
        for i in range(N)
    ]
    return reqs


def _round(
    server: VllmServer,
    model: str,
    state: Path,
    tag: str,
    while_waiting: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """``g`` sends first, ``a`` and ``b`` ``GAP`` s later, all queued behind
    the blocker; ``while_waiting`` (the state file's document) runs then;
    then the blocker goes. Returns that document and the tenants in
    completion order."""
    since = time.time()
    blocker = Blocker(server, model, tag)
    traffic = Traffic(server, model, _requests(tag, greedy_first=True))
    doc = _wait_for(state, _all_waiting, f"{N} requests of each tenant waiting ({tag})", since)
    if while_waiting is not None:
        while_waiting(doc)
    blocker.release()
    results = traffic.join()
    for r in results:
        assert r.ok, (r.request.request_id, r.status, r.error)
        assert r.completion_tokens == 8, r
    order = [r.request.tenant for r in sorted(results, key=lambda r: r.end)]
    return doc, order


def _load(
    server: VllmServer, model: str, state: Path, tag: str
) -> tuple[Blocker, Traffic, dict[str, Any]]:
    """``a`` and ``b`` send first (so the greedy tenant is not the lift floor
    they would rise to), ``g`` ``GAP`` s later, all queued behind the
    blocker, which stays. Returns once the file shows them all waiting."""
    since = time.time()
    blocker = Blocker(server, model, tag)
    traffic = Traffic(server, model, _requests(tag, greedy_first=False))
    doc = _wait_for(state, _all_waiting, f"{N} requests of each tenant waiting ({tag})", since)
    _assert_greedy_ahead_all_waiting(doc)
    return blocker, traffic, doc


def _engine_processes(server: VllmServer) -> list[int]:
    """Live (not zombie) processes of the server's group other than the API
    server and multiprocessing's helpers (its resource tracker lives as long
    as the API server): the engine core and its workers."""
    assert server.proc is not None
    pgid, out = server.proc.pid, []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == pgid:
            continue
        try:
            if os.getpgid(int(d)) != pgid:
                continue
            stat = Path(f"/proc/{d}/stat").read_text()
            cmdline = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] != "Z" and b"multiprocessing" not in cmdline:
            out.append(int(d))
    return out


def _line(log: str, text: str) -> str:
    """The first line of ``log`` holding ``text`` ("" if none)."""
    return next((line for line in log.splitlines() if text in line), "")


def _restored(server: VllmServer, saved: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A check for while a round's requests wait in the restarted server
    (none of them served yet): its state file and its metrics carry
    ``saved``'s counters and service."""

    def check(doc: dict[str, Any]) -> None:
        before, now = _clients(saved), _clients(doc)
        for t in (GREEDY, *OTHERS):
            assert now[t]["counter"] == pytest.approx(before[t]["counter"]), (t, before, now)
            assert now[t]["service"] == pytest.approx(before[t]["service"]), (t, before, now)
        # fairq's metrics travel with vLLM's stats (about once a second
        # while the engine steps, and the blocker keeps it stepping)
        deadline = time.monotonic() + 60
        while True:
            series = scrape(server.url).get("fairq_scheduler_vtc_counter", {})
            if any(dict(k).get("tenant") == GREEDY for k in series):
                break
            assert time.monotonic() < deadline, f"no VTC counter of {GREEDY} in /metrics"
            time.sleep(0.5)
        got = metric_sum({"c": series}, "c", tenant=GREEDY)
        assert got == pytest.approx(before[GREEDY]["counter"]), series

    return check


def _assert_greedy_last(order: list[str]) -> None:
    # one request at a time: completion order is admission order
    assert order[: 2 * N] == [t for t in order if t != GREEDY], order
    assert order[2 * N :] == [GREEDY] * N, order


# -- the test --------------------------------------------------------------------------


def test_fairness_state_survives_sigterm_and_sigkill(model: str, tmp_path: Path) -> None:
    state = tmp_path / "state" / "state.json"
    state.parent.mkdir()
    garbage = "{this is not a fairq state file"
    state.write_text(garbage)

    # -- 1. a corrupt file: the server comes up fresh, the file moved aside --------
    s1 = _server(model, state, tmp_path / "server1.log")
    with s1:
        log = s1.log_text()
        # fairq's records go through vLLM's handlers (its format and level)
        assert "WARNING" in _line(log, "is not valid JSON"), log[-3000:]
        assert "starting with fresh fairness state" in log, log[-3000:]
        bad = sorted(state.parent.glob("state.json.bad-*"))
        assert len(bad) == 1 and bad[0].read_text() == garbage, bad
        assert _doc(state)["state"] == {"tiers": {}}  # the fresh start's first save

        # control: with fresh state the greedy tenant, first to arrive, is
        # served in the first round (VTC: the others are lifted to its
        # counter, ties go to the first seen), not last as after a restore.
        # Completion order is read by the client: under load two consecutive
        # completions can be read in either order (one run had a, g, b, ...),
        # so g may be read second.
        doc, order = _round(s1, model, state, "c1")
        assert list(_clients(doc))[:2] == ["z", GREEDY], _clients(doc)  # g arrived first
        assert GREEDY in order[:2], order

        # -- 2. all three waiting, g ahead: SIGTERM to the API server -------------------
        # (the file shows the control's service once the engine steps again:
        # a server that went idle within the interval saved nothing since)
        blocker, traffic, _ = _load(s1, model, state, "l1")
        t_term = time.time()
        s1.signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE + 60
        while _engine_processes(s1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _engine_processes(s1), "the engine core outlived the SIGTERM grace"
        # the API server waits for its clients' connections: stop it
        s1.stop()
        blocker.abandon()
        traffic.join()
    after_term = _doc(state)
    assert after_term["saved_at"] > t_term, (after_term["saved_at"], t_term)
    _assert_greedy_ahead_all_waiting(after_term)

    # -- 3. restart: restored, g (backlogged at the save) is still behind ---------------
    s2 = _server(model, state, tmp_path / "server2.log")
    with s2:
        assert "INFO" in _line(s2.log_text(), "restored the vtc fairness state")
        assert not list(state.parent.glob(".state.json.tmp-*"))
        _, order = _round(s2, model, state, "r2", _restored(s2, after_term))
        _assert_greedy_last(order)

        # all three waiting again, then SIGKILL of the whole group: the last
        # periodic save survives
        blocker, traffic, seen = _load(s2, model, state, "l2")
        s2.kill()
        blocker.abandon()
        traffic.join()
    after_kill = _doc(state)
    assert after_kill["saved_at"] >= seen["saved_at"], (after_kill, seen)
    _assert_greedy_ahead_all_waiting(after_kill)
    # a snapshot of the second server's service, not the state it restored
    for t in OTHERS:
        assert _clients(after_kill)[t]["service"] > _clients(after_term)[t]["service"], t

    # -- 4. restart from the crash: restored, g still behind --------------------------
    s3 = _server(model, state, tmp_path / "server3.log")
    with s3:
        assert not list(state.parent.glob(".state.json.tmp-*"))  # a crash's leftovers go
        _, order = _round(s3, model, state, "r3", _restored(s3, after_kill))
        _assert_greedy_last(order)
    assert len(list(state.parent.glob("state.json.bad-*"))) == 1  # good files stay


# -- a burst, silence, SIGKILL (issue 30) ---------------------------------------------

#: the burst: BURST concurrent requests of one tenant, 4 prompt and 32 output
#: tokens each; VTC's service per request is 1 * 4 + 2 * 32
BURST, BURST_PROMPT, BURST_OUT = 12, 4, 32
BURST_SERVICE = BURST * (1.0 * BURST_PROMPT + 2.0 * BURST_OUT)


def _burst_server(model: str, state: Path, log: Path) -> VllmServer:
    """A vtc server on ``state`` saving every second, vLLM's defaults otherwise."""
    return vllm_server(
        model,
        "vtc",
        options={"state_file": str(state), "state_interval_s": 1},
        log=log,
        max_model_len=MAX_LEN,
    )


def test_a_burst_then_silence_then_sigkill_keeps_the_whole_burst(
    model: str, tmp_path: Path
) -> None:
    """Twelve concurrent requests of tenant ``heavy``, then nothing: once the
    engine goes idle, fairq saves its state and ships its metrics as they are
    (not as they were at the last save or shipment, up to a second before the
    burst ended), so the last ``/metrics`` scrape and the state restored after
    a SIGKILL both hold the whole burst: 816 service tokens, 12 admissions,
    nothing running."""
    state = tmp_path / "state" / "state.json"
    state.parent.mkdir()
    with _burst_server(model, state, tmp_path / "burst1.log") as s1:
        reqs = [
            HttpRequest(f"burst-{i}", "heavy", _prompt(500 + i, BURST_PROMPT), BURST_OUT)
            for i in range(BURST)
        ]
        results = send_all(s1.url, model, reqs, timeout=300)
        assert all(r.ok and r.completion_tokens == BURST_OUT for r in results), results
        time.sleep(2.5)  # silence: the engine does not step
        m = scrape(s1.url)
        served = metric_sum(m, "fairq_scheduler_service_tokens_total", tenant="heavy")
        admitted = metric_sum(m, "fairq_scheduler_admissions_total", tenant="heavy")
        running = metric_sum(m, "fairq_scheduler_running_requests", tenant="heavy")
        assert (served, admitted, running) == (BURST_SERVICE, BURST, 0.0), (
            served,
            admitted,
            running,
        )
        s1.kill()
    saved = _clients(_doc(state))["heavy"]
    assert saved["service"] == pytest.approx(BURST_SERVICE), saved

    # the restarted server holds the whole burst too
    with _burst_server(model, state, tmp_path / "burst2.log") as s2:
        assert "restored the vtc fairness state" in s2.log_text()
        deadline = time.monotonic() + 30
        while True:
            m = scrape(s2.url)
            served = metric_sum(m, "fairq_scheduler_service_tokens_total", tenant="heavy")
            if served or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        # the restored state reaches /metrics with no request (the flusher)
        assert served == pytest.approx(BURST_SERVICE), served
