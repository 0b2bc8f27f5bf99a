"""A client that goes away cancels what its request started, promptly."""

from __future__ import annotations

import trio

from tests.conftest import http_client
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def _cancel_latency(daemon: Daemon, tag: str) -> float:
    async with http_client(daemon.sock) as c:
        with trio.fail_after(5):
            while tag not in (report := (await c.get("/_probe/cancelled")).json()):
                await trio.sleep(0.005)
    return float(report[tag])


async def test_stream_producer_is_cancelled_when_client_closes(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    await s.send_all(b"GET /_probe/stream?tag=close1 HTTP/1.1\r\nHost: svc\r\n\r\n")
    buf = bytearray()
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 200")
    while b"tick" not in buf:
        buf += await s.receive_some()
    closed_at = trio.current_time()
    await s.aclose()
    await _cancel_latency(daemon, "close1")
    # the producer's finally ran within a fraction of a second of the close
    assert trio.current_time() - closed_at < 1.0


async def test_events_subscriber_is_released_on_disconnect(daemon: Daemon) -> None:
    async with http_client(daemon.sock) as c:
        base = (await c.get("/info")).json()["NEventsListener"]
        streams = []
        for _ in range(3):
            s = await connect(daemon.sock)
            await s.send_all(b"GET /events HTTP/1.1\r\nHost: svc\r\n\r\n")
            await read_head(s, bytearray())
            streams.append(s)
        assert (await c.get("/info")).json()["NEventsListener"] == base + 3
        for s in streams:
            await s.aclose()
        with trio.fail_after(3):
            while (await c.get("/info")).json()["NEventsListener"] != base:
                await trio.sleep(0.01)
