"""The hijack layer: 101 and 200 takeovers, stdin pipelined and half-closed, keep-alive reuse,
peer-gone detection, and the SDKs' socket helpers. Driven through the probe echo routes."""

from __future__ import annotations

import json
import socket

import trio

from svc.wire.stdcopy import FrameDecoder
from tests.conftest import run_sdk
from tests.support.daemon import Daemon
from tests.support.http import connect, header, read_head, read_until_eof

ATTACH = "/v1.23/containers/probe-echo/attach?stream=1&stdin=1&stdout=1&stderr=1"


def frames(data: bytes) -> list[tuple[int, bytes]]:
    return [(f.stream, f.data) for f in FrameDecoder().feed(data)]


async def test_upgrade_gets_101_and_a_raw_bidirectional_stream(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    # stdin in the same write as the request head must not be lost
    await s.send_all(f"POST {ATTACH} HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade\r\n"
                     "Upgrade: tcp\r\nContent-Length: 0\r\n\r\nfirst".encode())
    buf = bytearray()
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 101 UPGRADED\r\n")
    assert header(head, "Content-Type") == "application/vnd.svc.raw-stream"
    assert header(head, "Connection") == "Upgrade" and header(head, "Upgrade") == "tcp"
    assert header(head, "Transfer-Encoding") is None
    while len(buf) < 13:
        buf += await s.receive_some()
    assert frames(bytes(buf)) == [(1, b"first")]
    buf.clear()
    await s.send_all(b"second")
    while len(buf) < 14:
        buf += await s.receive_some()
    assert frames(bytes(buf)) == [(1, b"second")]
    buf.clear()
    # half-close: stdin EOF for the server, while its output keeps flowing
    await s.send_eof()
    rest = await read_until_eof(s, buf)
    assert frames(rest) == [(2, b"bye 11\n")]
    await s.aclose()


async def test_without_upgrade_headers_200_raw_no_chunking(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    await s.send_all(f"POST {ATTACH} HTTP/1.1\r\nHost: svc\r\nContent-Length: 0\r\n\r\n".encode())
    buf = bytearray()
    head = await read_head(s, buf)
    assert head == (b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.svc.raw-stream\r\n\r\n")
    await s.send_all(b"abc")
    await s.send_eof()
    body = await read_until_eof(s, buf)
    assert frames(body) == [(1, b"abc"), (2, b"bye 3\n")]


async def test_hijack_on_a_reused_keepalive_connection_with_json_body(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    buf = bytearray()
    for _ in range(3):
        await s.send_all(b"GET /_ping HTTP/1.1\r\nHost: svc\r\n\r\n")
        head = await read_head(s, buf)
        assert head.startswith(b"HTTP/1.1 200")
        while len(buf) < 2:
            buf += await s.receive_some()
        assert bytes(buf[:2]) == b"OK"
        del buf[:2]
    body = b'{"Detach": false, "Tty": false}'
    await s.send_all(b"POST /v1.23/exec/probe-echo/start HTTP/1.1\r\nHost: svc\r\n"
                     b"Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
                     b"Content-Length: %d\r\n\r\n%sping" % (len(body), body))
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 101 UPGRADED")
    await s.send_eof()
    assert frames(await read_until_eof(s, buf)) == [(1, b"ping"), (2, b"bye 4\n")]


async def test_exec_start_detach_is_a_plain_response(daemon: Daemon) -> None:
    from tests.conftest import http_client

    async with http_client(daemon.sock) as c:
        r = await c.post("/exec/probe-echo/start", json={"Detach": True})
        assert r.status_code == 200 and r.content == b""
        assert (await c.get("/_ping")).text == "OK"  # the connection is still usable


async def test_large_stdin_is_back_pressured_not_lost(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    await s.send_all(f"POST {ATTACH}&mode=raw HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade\r\n"
                     "Upgrade: tcp\r\n\r\n".encode())
    buf = bytearray()
    await read_head(s, buf)
    payload = bytes(range(256)) * 16384  # 4 MiB
    received = bytearray(buf)

    async def reader() -> None:
        while True:
            data = await s.receive_some(1 << 16)
            if not data:
                return
            received.extend(data)

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await s.send_all(payload)
        await s.send_eof()
    assert bytes(received) == payload + f"bye {len(payload)}\n".encode()


async def test_writer_notices_the_client_is_gone(daemon: Daemon) -> None:
    from tests.conftest import http_client

    s = await connect(daemon.sock)
    await s.send_all(b"POST /_probe/flood?tag=gone HTTP/1.1\r\nHost: svc\r\n"
                     b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
    buf = bytearray()
    await read_head(s, buf)
    await s.receive_some(65536)
    await s.aclose()
    async with http_client(daemon.sock) as c:
        with trio.fail_after(5):
            while "gone" not in (report := (await c.get("/_probe/cancelled")).json()):
                await trio.sleep(0.01)
    assert report["gone"] < 5


def test_raw_client_with_blocking_socket_and_shutdown(daemon: Daemon) -> None:
    """The way docker-py's socket helpers use the connection: plain blocking socket calls."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(daemon.sock))
        s.sendall(f"POST {ATTACH} HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade\r\n"
                  "Upgrade: tcp\r\n\r\nxyz".encode())
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    assert frames(body) == [(1, b"xyz"), (2, b"bye 3\n")]


SDK_SOCKET_SCRIPT = """
import json, socket, sys, docker
from docker.utils.socket import frames_iter
client = docker.APIClient(base_url=sys.argv[1], version="1.23")
out = {}
sock = client.attach_socket("probe-echo", params={"stdin": 1, "stdout": 1, "stream": 1})
raw = getattr(sock, "_sock", sock)
raw.sendall(b"hello sdk")
raw.shutdown(socket.SHUT_WR)
out["attach"] = [[s, d.decode()] for s, d in frames_iter(sock, tty=False)]
sock = client.exec_start("probe-echo", socket=True)
raw = getattr(sock, "_sock", sock)
raw.sendall(b"exec in")
raw.shutdown(socket.SHUT_WR)
out["exec"] = [[s, d.decode()] for s, d in frames_iter(sock, tty=False)]
print(json.dumps(out))
"""


def test_sdk7_attach_socket_and_exec_socket(daemon: Daemon) -> None:
    out = json.loads(run_sdk("sdk7", SDK_SOCKET_SCRIPT, daemon.url))
    assert out["attach"] == [[1, "hello sdk"], [2, "bye 9\n"]]
    assert out["exec"] == [[1, "exec in"], [2, "bye 7\n"]]


DOCKERPY1_SOCKET_SCRIPT = """
import json, socket, sys, struct, docker
client = docker.Client(base_url=sys.argv[1], version="1.23")

def read_all(sock):
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk

out = {}
sock = client.attach_socket("probe-echo", params={"stdin": 1, "stdout": 1, "stream": 1})
raw = getattr(sock, "_sock", sock)
raw.sendall(b"old client")
raw.shutdown(socket.SHUT_WR)
out["attach"] = read_all(raw).hex()
sock = client.exec_start("probe-echo", socket=True)
raw = getattr(sock, "_sock", sock)
raw.sendall(b"old exec")
raw.shutdown(socket.SHUT_WR)
out["exec"] = read_all(raw).hex()
print(json.dumps(out))
"""


def test_dockerpy1_attach_socket_and_exec_socket(daemon: Daemon) -> None:
    out = json.loads(run_sdk("dockerpy1", DOCKERPY1_SOCKET_SCRIPT, daemon.url))
    assert frames(bytes.fromhex(out["attach"])) == [(1, b"old client"), (2, b"bye 10\n")]
    assert frames(bytes.fromhex(out["exec"])) == [(1, b"old exec"), (2, b"bye 8\n")]
