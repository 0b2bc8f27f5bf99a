"""Connections the clients close are closed by the daemon, and a daemon out of descriptors
goes on: the leak and the crash of the second hardening round (issue 24, item 1)."""

from __future__ import annotations

import concurrent.futures
import http.client
import os
import socket
import struct
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.daemon import Daemon
from tests.support.descriptors import quiet_fds, settled_fds


class LimitedDaemon(Daemon):
    """A daemon whose descriptor limit, soft and hard, is ``nofile`` (it cannot raise it)."""

    def __init__(self, nofile: int, args: Sequence[str] = (), **kw: object) -> None:
        super().__init__(args, **kw)  # type: ignore[arg-type]
        self.nofile = nofile

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *super().command()]


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self._path)


def _ping(path: Path, *, close: bool = False) -> int:
    conn = _UnixHTTP(path)
    conn.request("GET", "/_ping", headers={"Connection": "close"} if close else {})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


@pytest.fixture(scope="module")
def d() -> Daemon:
    daemon = Daemon().start()
    yield daemon  # type: ignore[misc]
    daemon.cleanup()


def test_cli_runs_leave_no_descriptor_behind(d: Daemon) -> None:
    """Each ``docker version`` negotiates (HEAD /_ping), asks, and closes its idle keep-alive
    connection: 1,000 of them leave the daemon's descriptors where they were."""
    _ping(d.sock)
    before = quiet_fds(d)
    env = dict(os.environ, DOCKER_HOST=d.url)

    def one(_: int) -> int:
        return subprocess.run(["docker", "version", "--format", "{{.Server.APIVersion}}"],
                              env=env, capture_output=True, timeout=30).returncode

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(one, range(1000)))
    assert codes == [0] * 1000
    assert settled_fds(d, before) <= before


def test_http_client_connections_leave_no_descriptor_behind(d: Daemon) -> None:
    """http.client without ``Connection: close`` (the client closes), with it (the daemon
    closes), and connections reset with a request unanswered or half sent."""
    _ping(d.sock)
    before = quiet_fds(d)
    assert {_ping(d.sock, close=i % 3 == 0) for i in range(1000)} == {200}
    for data in (b"GET /_ping HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /_pi", b""):
        for _ in range(50):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(d.sock))
                s.sendall(data)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert settled_fds(d, before) <= before


def test_an_events_stream_dropped_by_its_client_is_closed(d: Daemon) -> None:
    _ping(d.sock)
    before = quiet_fds(d)
    for _ in range(50):
        conn = _UnixHTTP(d.sock)
        conn.request("GET", "/events")
        resp = conn.getresponse()
        assert resp.status == 200
        resp.close()  # (the answer says Connection: close: the response holds the socket)
        conn.close()
    assert settled_fds(d, before) <= before


def test_a_256_descriptor_daemon_survives_2000_dropped_connections() -> None:
    d = LimitedDaemon(256).start()
    try:
        before = quiet_fds(d)
        for i in range(2000):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(10)
                s.connect(str(d.sock))
                if i % 2:
                    s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert s.recv(12) == b"HTTP/1.1 200"
        assert _ping(d.sock) == 200
        assert settled_fds(d, before) <= before
        assert d.proc is not None and d.proc.poll() is None
    finally:
        d.cleanup()


def test_out_of_descriptors_new_connections_are_refused_and_open_ones_served() -> None:
    """With the cap above the descriptor limit, held connections exhaust the descriptors:
    the daemon says so once, answers what it cannot take with 503 (or closes it), serves
    the connections it holds, and accepts again once they close."""
    d = LimitedDaemon(256, env={"SVC_MAX_CONNECTIONS": "100000"}).start()
    held: list[socket.socket] = []
    try:
        for _ in range(400):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(str(d.sock))
            held.append(s)
        deadline = time.monotonic() + 10
        while "out of file descriptors" not in d.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "out of file descriptors (EMFILE" in d.log()
        served = refused = 0
        for s in held:
            try:
                s.sendall(b"GET /_ping HTTP/1.1\r\nHost: x\r\n\r\n")
                head = s.recv(64)
            except OSError:  # closed before the request was written
                head = b""
            if head.startswith(b"HTTP/1.1 200"):
                served += 1
            else:
                assert head in (b"", ) or head.startswith(b"HTTP/1.1 503"), head
                refused += 1
        assert served > 150 and refused > 0, (served, refused)
        for s in held:
            s.close()
        held.clear()
        deadline = time.monotonic() + 5
        while True:  # the daemon may still be closing them: refused (503) until it has
            try:
                if _ping(d.sock) == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        deadline = time.monotonic() + 5
        while "available again" not in d.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "file descriptors are available again" in d.log()
        assert d.proc is not None and d.proc.poll() is None
        assert "Traceback" not in d.log()
    finally:
        for s in held:
            s.close()
        d.cleanup()
