"""Overload on a real vLLM OpenAI server: a flood tenant against three
well-behaved ones, with fairq's front door (``--middleware
fairq.vllm.door.FairAdmission``) refusing what is over the limits
(issue 33; ``docs/results/overload.md``).

Two runs on the same server configuration, each on a fresh server:

* ``flood``: the flood tenant sends ``--flood`` requests spread evenly over
  ``--duration`` seconds while three tenants send ``--rate`` requests per
  second each;
* ``baseline``: the same, but the flood sends only as many requests as the
  door accepted of it in the ``flood`` run (spread the same way): the run
  "without the flood's excess".

Reported per run: HTTP statuses per tenant, whether every accepted request
completed, the well-behaved tenants' latency (p50, p99), the server's
resident memory (API server and engine core, the process group's RSS
summed; before the traffic and its peak during it) and the door's largest
held count (``fairq_admission_held_requests``, sampled).

Usage::

    python -m fairq.enginebench.overload --flood 20000 --duration 60 \\
        --json overload.json | tee overload.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from fairq.enginebench.server import VllmServer, write_model
from fairq.enginebench.traffic import HttpRequest, HttpResult, scrape, send_all

__all__ = [
    "LIGHT",
    "Sampler",
    "group_rss",
    "requests",
    "run_once",
    "send_with_flood",
    "summarize",
    "main",
]

#: The well-behaved tenants (the last one names itself in X-Request-Id).
LIGHT = ("alice", "bob", "carol")
FLOOD = "flood"
MIDDLEWARE = "fairq.vllm.door.FairAdmission"


def _prompt(seed: int, n: int) -> list[int]:
    return [3 + (seed * 131 + 7 * i) % 4000 for i in range(n)]


def requests(
    flood: int, duration: float, rate: float, *, prompt: int = 32, max_tokens: int = 8
) -> list[HttpRequest]:
    """The flood's ``flood`` requests and each well-behaved tenant's
    ``rate * duration``, evenly spread over ``duration`` seconds."""
    out = [
        HttpRequest(
            f"f{i}", FLOOD, _prompt(i, prompt), max_tokens, arrival=duration * i / max(flood, 1)
        )
        for i in range(flood)
    ]
    n = max(1, int(rate * duration))
    for k, tenant in enumerate(LIGHT):
        via = "header" if k == len(LIGHT) - 1 else "xargs"
        for i in range(n):
            out.append(
                HttpRequest(
                    f"{tenant}{i}",
                    tenant,
                    _prompt(10_000 + 97 * k + i, prompt),
                    max_tokens,
                    arrival=(i + (k + 1) / (len(LIGHT) + 1)) / rate,
                    tenant_via=via,  # type: ignore[arg-type]
                )
            )
    return out


async def _status_line(reader: asyncio.StreamReader) -> bytes:
    """The response's status line, or ``b""`` when the server had closed
    the connection (a reset reads as closed)."""
    try:
        return await reader.readline()
    except ConnectionResetError:
        return b""


async def _flood(
    base: str, model: str, reqs: Sequence[HttpRequest], t0: float, connections: int
) -> list[tuple[int, float, float, bool]]:
    """Send the flood's requests over ``connections`` keep-alive HTTP/1.1
    connections with pre-serialized bodies (a client an order of magnitude
    cheaper than httpx, so that on a small machine the load generator does
    not eat the CPU the server needs): ``(status, sent, end, complete)`` per
    request, in order. A request goes at its arrival, or when a connection
    is free if all are busy (a client's connection pool)."""
    host, port = base.split("//", 1)[1].split(":")
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(reqs)):
        queue.put_nowait(i)
    out: list[tuple[int, float, float, bool]] = [(0, 0.0, 0.0, False)] * len(reqs)
    payloads = []
    for r in reqs:
        body = json.dumps(
            {
                "model": model,
                "prompt": list(r.prompt),
                "max_tokens": r.max_tokens,
                "min_tokens": r.max_tokens,
                "ignore_eos": True,
                "vllm_xargs": {"tenant": r.tenant},
            }
        ).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        payloads.append(head.encode() + body)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            delay = t0 + reqs[i].arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter() - t0
            writer.write(payloads[i])
            status_line = await _status_line(reader)
            if not status_line:
                # the server closed the idle keep-alive connection while this
                # worker waited for the arrival (vLLM's
                # VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): nothing was read of the
                # request; send it again on a new connection
                writer.close()
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(payloads[i])
                status_line = await reader.readline()
                if not status_line:
                    raise ConnectionError(f"flood request {reqs[i].request_id}: no response")
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            data = await reader.readexactly(length)
            status = int(status_line.split()[1])
            done = status == 200 and b'"finish_reason":"length"' in data.replace(b" ", b"")
            out[i] = (status, sent, time.perf_counter() - t0, done)
        writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return out


def send_with_flood(
    base: str, model: str, flood: Sequence[HttpRequest], light: Sequence[HttpRequest], conns: int
) -> tuple[list[tuple[int, float, float, bool]], list[HttpResult]]:
    """The flood by :func:`_flood`, the rest by :func:`fairq.enginebench.traffic`'s
    client, on one clock."""
    from fairq.enginebench.traffic import _send_all

    async def both() -> Any:
        t0 = time.perf_counter() + 1.0  # both clients started and connected
        light_task = asyncio.ensure_future(_send_all(base, model, light, 900.0, 256, t0))
        f = await _flood(base, model, flood, t0, conns)
        return f, await light_task

    return asyncio.run(both())


def group_rss(pgid: int) -> int:
    """Resident bytes of every process in process group ``pgid`` (Linux)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after the name: state ppid pgrp
                continue
            with open(f"/proc/{pid}/statm", encoding="ascii") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


class Sampler(threading.Thread):
    """Samples the group's RSS and the door's held requests while traffic runs."""

    def __init__(self, server: VllmServer, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.server, self.every = server, every
        self.peak_rss = 0
        self.peak_held = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        assert self.server.proc is not None
        while not self.stop.is_set():
            self.peak_rss = max(self.peak_rss, group_rss(self.server.proc.pid))
            try:
                held = scrape(self.server.url).get("fairq_admission_held_requests", {})
                self.peak_held = max(self.peak_held, sum(held.values()))
            except Exception:  # noqa: BLE001 (a missed sample)
                pass
            self.stop.wait(self.every)


def _pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def summarize(
    flood: list[tuple[int, float, float, bool]], light: list[HttpResult]
) -> dict[str, Any]:
    """Statuses per tenant, completion of the accepted, light latencies."""
    status: dict[str, dict[str, int]] = {FLOOD: {}}
    for code, *_ in flood:
        status[FLOOD][str(code)] = status[FLOOD].get(str(code), 0) + 1
    for r in light:
        d = status.setdefault(r.request.tenant, {})
        d[str(r.status)] = d.get(str(r.status), 0) + 1
    flood_ok = [f for f in flood if f[0] not in (429, 413)]
    light_ok = [r for r in light if r.status not in (429, 413)]
    lat = [r.latency for r in light]
    return {
        "status": status,
        "flood_accepted": len(flood_ok),
        "accepted_incomplete": sum(1 for f in flood_ok if not f[3])
        + sum(1 for r in light_ok if not r.complete),
        "light_429": sum(1 for r in light if r.status == 429),
        "light_p50_s": _pct(lat, 0.5),
        "light_p99_s": _pct(lat, 0.99),
        "flood_429_p50_ms": 1000 * _pct([e - s for c, s, e, _ in flood if c == 429], 0.5),
        "errors": sorted({(r.error or "")[:120] for r in light_ok if r.error})[:5],
    }


def run_once(
    model: str,
    reqs: list[HttpRequest],
    *,
    options: dict[str, Any],
    args: Sequence[str],
    log: str,
    connections: int = 256,
    door: bool = True,
) -> dict[str, Any]:
    """One fresh server (with the door unless ``door`` is False), ``reqs``
    sent (the flood's by the cheap client), summarized."""
    extra = ["--middleware", MIDDLEWARE] if door else []
    with VllmServer(model, "vtc", options=options, args=[*args, *extra], log=log) as s:
        assert s.proc is not None
        # warm up (the first request compiles and allocates)
        send_all(s.url, model, [HttpRequest("warm", "warm", _prompt(1, 32), 4)])
        time.sleep(1.0)
        rss0 = group_rss(s.proc.pid)
        sampler = Sampler(s)
        sampler.start()
        t = time.perf_counter()
        flood = [r for r in reqs if r.tenant == FLOOD]
        light = [r for r in reqs if r.tenant != FLOOD]
        f, li = send_with_flood(s.url, model, flood, light, min(connections, max(len(flood), 1)))
        wall = time.perf_counter() - t
        sampler.stop.set()
        sampler.join()
        out = summarize(f, li)
        out.update(
            wall_s=wall,
            rss_before_mb=rss0 / 2**20,
            rss_peak_mb=max(sampler.peak_rss, rss0) / 2**20,
            peak_held=sampler.peak_held,
            requests=len(reqs),
        )
        return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flood", type=int, default=20_000, help="flood requests (default 20000)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    p.add_argument("--rate", type=float, default=1.0, help="requests/s per light tenant")
    p.add_argument("--max-requests", type=int, default=32, help="limits.max_requests")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--model", default=None, help="model folder (default: write tiny)")
    p.add_argument("--log-dir", default="/tmp")
    p.add_argument(
        "--no-door",
        type=int,
        default=0,
        metavar="N",
        help="a third run without the door, the flood sending N requests (0: none)",
    )
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    model = a.model or write_model(os.path.join(a.log_dir, "fairq-overload-model"), "tiny")
    options = {"limits": {"max_requests": a.max_requests}}
    args = ["--max-num-seqs", str(a.max_num_seqs)]
    flood = run_once(
        model,
        requests(a.flood, a.duration, a.rate),
        options=options,
        args=args,
        log=os.path.join(a.log_dir, "fairq-overload-flood.log"),
    )
    base = run_once(
        model,
        requests(flood["flood_accepted"], a.duration, a.rate),
        options=options,
        args=args,
        log=os.path.join(a.log_dir, "fairq-overload-baseline.log"),
    )
    doc = {"args": vars(a), "flood": flood, "baseline": base}
    if a.no_door:
        doc["no_door"] = run_once(
            model,
            requests(a.no_door, a.duration, a.rate),
            options={},
            args=args,
            log=os.path.join(a.log_dir, "fairq-overload-nodoor.log"),
            door=False,
        )
    doc["p99_ratio"] = flood["light_p99_s"] / base["light_p99_s"]
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
    print(table(doc))
    return 0


def table(doc: dict[str, Any]) -> str:
    """The runs as a Markdown table."""
    rows = [
        "| run | requests | flood accepted / 429 | light 429 | accepted incomplete | "
        "light p50 s | light p99 s | RSS before MB | RSS peak MB | door peak held |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("flood", "baseline", "no_door"):
        if name not in doc:
            continue
        r = doc[name]
        f429 = r["status"].get(FLOOD, {}).get("429", 0)
        rows.append(
            f"| {name} | {r['requests']} | {r['flood_accepted']} / {f429} | {r['light_429']} | "
            f"{r['accepted_incomplete']} | {r['light_p50_s']:.3f} | {r['light_p99_s']:.3f} | "
            f"{r['rss_before_mb']:.0f} | {r['rss_peak_mb']:.0f} | {r['peak_held']:.0f} |"
        )
    rows.append("")
    rows.append(f"light p99, flood / baseline: **{doc['p99_ratio']:.2f}x**")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
