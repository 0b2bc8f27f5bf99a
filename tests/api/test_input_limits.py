"""Malformed and oversized input over the socket: each gets a clear 4xx (or a closed
connection), quickly, on every endpoint the hardening probe named."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import Daemon

BODY_ENDPOINTS = ["/containers/create", "/networks/create", "/volumes/create",
                  "/containers/nope/update", "/containers/nope/exec", "/exec/nope/start",
                  "/networks/nope/connect", "/commit?container=nope"]


@pytest.fixture(scope="module")
def d() -> Daemon:
    daemon = Daemon(env={"SVC_HEAD_TIMEOUT": "2"}).start()
    yield daemon  # type: ignore[misc]
    daemon.cleanup()


def _client(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=10)


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
@pytest.mark.parametrize("body", [
    b'{"Memory": 1' + b"0" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000,
    b'{"Name": NaN}'], ids=["5000-digits", "deep", "nan"])
def test_bad_json_is_a_400(d: Daemon, path: str, body: bytes) -> None:
    with _client(d) as c:
        r = c.post(path, content=body, headers={"Content-Type": "application/json"})
    # an endpoint naming a missing object may answer its 404 first, as dockerd does
    assert r.status_code in ((400, 404) if "nope" in path else (400,)), r.text
    assert r.status_code == 404 or "invalid JSON body" in r.text


def test_long_names_are_a_400(d: Daemon) -> None:
    with _client(d) as c:
        r = c.post("/volumes/create", json={"Name": "a" * 300})
        assert r.status_code == 400 and "too long" in r.text
        r = c.post("/networks/create", json={"Name": "n" * 70000})
        assert r.status_code == 400 and "network name" in r.text


def test_an_8_mib_json_body_is_a_413_at_once(d: Daemon) -> None:
    body = json.dumps({"Image": "x", "Labels": {"x": "y" * (8 << 20)}}).encode()
    with _client(d) as c:
        start = time.monotonic()
        r = c.post("/containers/create", content=body,
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "at most 4 MiB" in r.text
        assert time.monotonic() - start < 5
        assert c.get("/_ping").status_code == 200  # the same connection serves on


def _exchange(d: Daemon, data: bytes, timeout: float = 10) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(d.sock))
        with contextlib.suppress(OSError):
            s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("data, status", [
    (b"GET /info?" + b"a" * (8 << 20) + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"GET /info HTTP/1.1\r\nX: " + b"a" * (2 << 20) + b"\r\n\r\n", b"431"),
    (bytes(range(256)) * 4, b"400"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"505"),
    (b"GET /info HTTP/1.1\r\nX-Slow: aaa", b"408"),  # never finished: the head timeout
], ids=["url", "header", "garbage", "h2", "slowloris"])
def test_the_head_limits(d: Daemon, data: bytes, status: bytes) -> None:
    start = time.monotonic()
    out = _exchange(d, data)
    assert out.startswith(b"HTTP/1.1 " + status + b" "), out[:80]
    assert b"Connection: close" in out
    assert time.monotonic() - start < 6


def test_a_silent_connection_is_closed_and_an_idle_one_kept(d: Daemon) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(d.sock))
        start = time.monotonic()
        assert s.recv(10) == b""  # never asked anything: closed after the head timeout
        assert 1.5 < time.monotonic() - start < 6
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(d.sock))
        for pause in (0, 3):  # idle after a request: kept, as dockerd keeps it
            time.sleep(pause)
            s.sendall(b"GET /_ping HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b"OK"):
                chunk = s.recv(4096)
                assert chunk, got
                got += chunk
            assert got.startswith(b"HTTP/1.1 200")


def test_a_head_whose_first_byte_came_late_is_due_from_the_accept(d: Daemon) -> None:
    """The head timeout (2 s here) counts from the connection's accept, not from its first
    byte: a client that waits, then sends half a head, gets its 408 2 s after connecting
    (counted from its first byte, it would come after 3.7 s)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(d.sock))
        start = time.monotonic()
        time.sleep(1.7)
        s.sendall(b"GET /_ping HTTP/1.1\r\nHost: x\r\n")
        out = s.recv(65536)
        assert out.startswith(b"HTTP/1.1 408 "), out[:80]
        assert 1.7 < time.monotonic() - start < 3.2


def test_rss_stays_bounded(d: Daemon) -> None:
    assert d.proc is not None
    rss = int(next(line for line in Path(f"/proc/{d.proc.pid}/status").read_text()
                   .splitlines() if line.startswith("VmRSS:")).split()[1]) << 10
    assert rss < 160 << 20, rss >> 20


def test_the_daemon_raises_its_descriptor_limit_to_the_hard_one() -> None:
    """The connection cap is half the soft limit, so the daemon lifts it as dockerd does:
    started with a soft limit of 256 it runs with its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        daemon = Daemon().start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert daemon.proc is not None
        line = next(x for x in Path(f"/proc/{daemon.proc.pid}/limits").read_text()
                    .splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)], line
    finally:
        daemon.cleanup()


def test_clients_that_go_while_their_unread_body_is_dropped_leave_nothing_due(
        d: Daemon) -> None:
    """An answer before the body (a 404 here) starts dropping the rest of the body; a client
    that has gone by then leaves a connection whose task group has ended. Its linger must not
    fire after that (it once took the daemon down two seconds later)."""
    head = (b"POST /containers/nope/start HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            b"\r\nContent-Length: 100000\r\n\r\n{")
    for _ in range(3):
        for close_early in (True, False):
            socks = []
            for _ in range(40):
                s = socket.socket(socket.AF_UNIX)
                s.connect(str(d.sock))
                s.sendall(head)
                socks.append(s)
            for s in socks:
                if not close_early:
                    s.settimeout(10)
                    assert s.recv(12).startswith(b"HTTP/1.1 404")
                s.close()
    time.sleep(2.0 + 1.0)  # the linger (``LINGER_SECONDS``) and the clock's slot
    assert d.proc is not None and d.proc.poll() is None, d.log()[-12000:]
    with _client(d) as c:
        assert c.get("/_ping").status_code == 200
