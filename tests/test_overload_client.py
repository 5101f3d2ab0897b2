"""The overload bench's flood client (``fairq.enginebench.overload._flood``)
against a loopback HTTP server that closes idle keep-alive connections, as
vLLM's API server does after ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (5 s): a
request sent on a connection the server had closed is sent again on a new
one, not lost and not an ``IndexError``. No vLLM needed."""

from __future__ import annotations

import asyncio
import json
import time

from fairq.enginebench.overload import _flood
from fairq.enginebench.traffic import HttpRequest

IDLE_S = 0.1  # the server's keep-alive timeout


async def _serve(received: list[str]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
                except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                    break  # idle past the keep-alive timeout: close
                length = 0
                for line in head.decode().split("\r\n"):
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                body = json.loads(await reader.readexactly(length))
                received.append(body["vllm_xargs"]["tenant"] + str(len(body["prompt"])))
                out = b'{"choices":[{"finish_reason": "length"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(out) + out)
                await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_a_request_after_the_server_closed_the_idle_connection_is_sent_again() -> None:
    async def run() -> tuple[list[tuple[int, float, float, bool]], list[str]]:
        received: list[str] = []
        server = await _serve(received)
        port = server.sockets[0].getsockname()[1]
        # one connection, arrivals further apart than the server's idle timeout
        reqs = [HttpRequest(f"f{i}", "flood", [1] * (i + 1), 4, arrival=0.3 * i) for i in range(3)]
        async with server:
            out = await asyncio.wait_for(
                _flood(f"http://127.0.0.1:{port}", "m", reqs, time.perf_counter(), 1), 10
            )
        return out, received

    out, received = asyncio.run(run())
    assert [(status, done) for status, _, _, done in out] == [(200, True)] * 3
    # each request reached the server once, in order
    assert received == ["flood1", "flood2", "flood3"]
