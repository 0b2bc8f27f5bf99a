"""Event subscribers whose clients never read (issue 24, item 4): cut off at the documented
lag (4,096 events beyond what the small send buffer holds), then closed; the cost of a tag
does not grow with them."""

from __future__ import annotations

import io
import os
import socket
import statistics
import tarfile
import time

import httpx
import pytest

from tests.support.daemon import Daemon

SUBSCRIBERS = 1000


def _tiny_image() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return buf.getvalue()


def _tag_latency(c: httpx.Client, rounds: int, label: str) -> float:
    times = []
    for i in range(rounds):
        start = time.perf_counter()
        r = c.post("/images/tiny/tag", params={"repo": f"tagged-{label}", "tag": str(i)})
        times.append(time.perf_counter() - start)
        assert r.status_code == 201, r.text
    return statistics.median(times)


def _listeners(c: httpx.Client) -> int:
    return int(c.get("/info").json()["NEventsListener"])


@pytest.fixture
def d() -> Daemon:
    daemon = Daemon().start()
    yield daemon  # type: ignore[misc]
    daemon.cleanup()


def test_a_thousand_stuck_subscribers_are_cut_off_and_tags_stay_fast(d: Daemon) -> None:
    transport = httpx.HTTPTransport(uds=str(d.sock))
    with httpx.Client(transport=transport, base_url="http://svc", timeout=30) as c:
        r = c.post("/images/create", params={"fromSrc": "-", "repo": "tiny"},
                   content=_tiny_image())
        assert r.status_code == 200, r.text
        _tag_latency(c, 10, "warm")
        baseline = _tag_latency(c, 40, "base")
        assert d.proc is not None
        fds_before = len(os.listdir(f"/proc/{d.proc.pid}/fd"))

        stuck = []
        try:
            for _ in range(SUBSCRIBERS):
                s = socket.socket(socket.AF_UNIX)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(str(d.sock))
                s.sendall(b"GET /events HTTP/1.1\r\nHost: svc\r\n\r\n")
                stuck.append(s)  # never read
            deadline = time.monotonic() + 20
            while _listeners(c) < SUBSCRIBERS and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _listeners(c) == SUBSCRIBERS

            # below the documented lag nobody is cut off...
            assert c.post("/_probe/events", params={"n": "3000"}).status_code == 200
            assert _listeners(c) == SUBSCRIBERS
            # ...and past it (4,096 plus a batch and the small send buffer) everybody is
            assert c.post("/_probe/events", params={"n": "3000"}).status_code == 200
            deadline = time.monotonic() + 10
            while _listeners(c) > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _listeners(c) == 0
            assert d.log().count("cutting off a slow event subscriber") == SUBSCRIBERS

            with_stuck = _tag_latency(c, 40, "stuck")
            print(f"tag median: {baseline * 1e3:.2f} ms alone, {with_stuck * 1e3:.2f} ms with "
                  f"{SUBSCRIBERS} stuck subscribers")
            assert with_stuck < 2 * baseline + 0.005, (baseline, with_stuck)

            # their connections are shut once the grace for a late reader has passed
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if len(os.listdir(f"/proc/{d.proc.pid}/fd")) <= fds_before + 5:
                    break
                time.sleep(0.2)
            assert len(os.listdir(f"/proc/{d.proc.pid}/fd")) <= fds_before + 5
        finally:
            for s in stuck:
                s.close()
        assert c.get("/_ping").text == "OK"
