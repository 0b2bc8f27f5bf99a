"""Plain routes on the wire (svc.api.fastpath): a simple request of a plain route is answered
without h11; anything less simple goes through h11 and the app, with the same bytes; and the
connection's framing is kept whatever way each request went."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.daemon import Daemon

PING = b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n"


@pytest.fixture(scope="module")
def d() -> Iterator[Daemon]:
    daemon = Daemon().start()
    yield daemon
    daemon.cleanup()


def connect(d: Daemon) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(d.sock))
    return s


def read_response(s: socket.socket, buf: bytearray, *, head_only: bool = False) \
        -> tuple[bytes, dict[bytes, bytes], bytes]:
    """One response off ``s`` (Content-Length framing); what follows stays in ``buf``."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, bytes(buf)
        buf += chunk
    end = buf.index(b"\r\n\r\n")
    lines = bytes(buf[:end]).split(b"\r\n")
    del buf[: end + 4]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    length = 0 if head_only else int(headers[b"content-length"])
    while len(buf) < length:
        chunk = s.recv(65536)
        assert chunk
        buf += chunk
    body = bytes(buf[:length])
    del buf[:length]
    return lines[0], headers, body


def test_simple_and_other_requests_answer_alike(d: Daemon) -> None:
    """The same route asked for simply, with a Connection: keep-alive, in two writes, and
    pipelined: every answer the same, on one connection."""
    with connect(d) as s:
        buf = bytearray()
        answers = []
        for data in (PING, b"GET /v1.23/_ping HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
                     b"User-Agent: Docker-Client/28.0.0 (linux)\r\n\r\n"):
            s.sendall(data)
            answers.append(read_response(s, buf))
        s.sendall(PING[:10])  # a head in two writes: h11's way
        s.sendall(PING[10:])
        answers.append(read_response(s, buf))
        s.sendall(PING + b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n" + PING)  # pipelined
        answers += [read_response(s, buf) for _ in range(3)]
    version = answers.pop(4)
    assert version[0] == b"HTTP/1.1 200 OK" and b'"ApiVersion":"1.23"' in version[2]
    for status, headers, body in answers:
        assert (status, body) == (b"HTTP/1.1 200 OK", b"OK")
        assert headers[b"api-version"] == b"1.23" and headers[b"content-length"] == b"2"
        assert headers[b"cache-control"] == b"no-cache, no-store, must-revalidate"
        assert headers[b"date"] and headers[b"server"].startswith(b"svc/")


def test_head_has_no_body_and_the_connection_goes_on(d: Daemon) -> None:
    with connect(d) as s:
        buf = bytearray()
        s.sendall(b"HEAD /_ping HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = read_response(s, buf, head_only=True)
        assert status == b"HTTP/1.1 200 OK" and headers[b"content-length"] == b"2"
        s.sendall(PING)
        assert read_response(s, buf)[2] == b"OK"
        assert not buf  # HEAD's answer carried no body


def test_connection_close_and_http10_close_after_the_answer(d: Daemon) -> None:
    for data in (b"GET /_ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 b"GET /_ping HTTP/1.0\r\n\r\n"):
        with connect(d) as s:
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b"\r\n\r\nOK"), out


def test_malformed_and_incomplete_requests_are_h11s_to_refuse(d: Daemon) -> None:
    for data, status in ((b"GET /_ping HTTP/1.1\r\n\r\n", b"400"),  # no Host
                         (b"GET /_ping HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", b"400"),
                         (b"GET /v9.99/_ping HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),
                         (b"GET /containers/nope/json HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
                         (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", b"404")):
        with connect(d) as s:
            s.sendall(data)
            got = s.recv(65536)
            assert got.startswith(b"HTTP/1.1 " + status), (data, got)


def test_a_plain_request_with_a_body_goes_the_full_way(d: Daemon) -> None:
    with connect(d) as s:
        buf = bytearray()
        s.sendall(b"GET /_ping HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + PING)
        assert read_response(s, buf)[2] == b"OK"
        assert read_response(s, buf)[2] == b"OK"  # the body was not taken for a request
