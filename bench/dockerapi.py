"""Docker Engine API calls that work against svcd and the reference engine alike: one keep-alive
client, image loads from a ``docker save`` tarball, a hijacked exec, and the busybox image
(Debian's busybox-static, as the tests build it), so nothing needs the internet.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from bench.bench_images import read_body
from bench.harness import connect, parse_head, read_head, request_bytes
from tests.support import images as timg

API = "/v1.23"
BUSYBOX = "svc-bench/busybox:latest"
TIMEOUT = 600.0


class ApiError(RuntimeError):
    """An answer other than the expected status."""


class Client:
    """One keep-alive connection; answers with Content-Length or chunked."""

    def __init__(self, sock_path: Path) -> None:
        self.path = sock_path
        self.sock = connect(sock_path, timeout=TIMEOUT)

    def call(self, method: str, target: str, body: dict[str, Any] | None = None,
             want: int | None = None) -> tuple[int, bytes]:
        raw = json.dumps(body).encode() if body is not None else b""
        req = request_bytes(method, API + target, body=raw)
        if body is not None:
            req = req.replace(b"\r\n\r\n", b"\r\nContent-Type: application/json\r\n\r\n", 1)
        self.sock.sendall(req)
        status, kept = read_response(self.sock)
        if want is not None and status != want:
            raise ApiError(f"{method} {target}: {status} {kept[:300]!r}")
        return status, kept

    def json(self, method: str, target: str, body: dict[str, Any] | None = None,
             want: int = 200) -> Any:
        return json.loads(self.call(method, target, body, want)[1])

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- containers ----------------------------------------------------------------------

    def create(self, cmd: list[str], image: str = BUSYBOX) -> str:
        body = {"Image": image, "Cmd": cmd, "HostConfig": {"NetworkMode": "none"}}
        return str(self.json("POST", "/containers/create", body, 201)["Id"])

    def start(self, cid: str) -> None:
        self.call("POST", f"/containers/{cid}/start", want=204)

    def wait(self, cid: str) -> None:
        self.call("POST", f"/containers/{cid}/wait", want=200)

    def remove(self, cid: str, force: bool = False) -> None:
        self.call("DELETE", f"/containers/{cid}" + ("?force=1" if force else ""), want=204)

    def exec_create(self, cid: str, cmd: list[str]) -> str:
        body = {"Cmd": cmd, "AttachStdout": True, "AttachStderr": True}
        return str(self.json("POST", f"/containers/{cid}/exec", body, 201)["Id"])


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One whole response: (status, body). 204 and 304 have no body (dockerd sends neither
    Content-Length nor chunks with them)."""
    head, rest = read_head(sock)
    status, length = parse_head(head)
    if status in (204, 304):
        return status, b""
    if length is not None:
        buf = bytearray(rest)
        while len(buf) < length:
            data = sock.recv(max(65536, length - len(buf)))
            if not data:
                raise ConnectionError("connection closed in the middle of the body")
            buf += data
        return status, bytes(buf[:length])
    if b"transfer-encoding: chunked" not in head.lower():
        raise ApiError(f"neither Content-Length nor chunked: {head[:200]!r}")
    body = bytearray()
    buf = bytearray(rest)
    while True:
        while b"\r\n" not in buf:
            buf += _recv(sock)
        line, _, tail = bytes(buf).partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        buf = bytearray(tail)
        while len(buf) < size + 2:
            buf += _recv(sock)
        if size == 0:  # no trailers expected
            return status, bytes(body)
        body += buf[:size]
        del buf[: size + 2]


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise ConnectionError("connection closed in the middle of a chunked body")
    return data


def exec_start(sock_path: Path, eid: str) -> int:
    """``POST /exec/{id}/start`` hijacked (Upgrade: tcp), read to EOF; returns bytes read."""
    body = b'{"Detach":false,"Tty":false}'
    with connect(sock_path, timeout=TIMEOUT) as s:
        head = (f"POST {API}/exec/{eid}/start HTTP/1.1\r\nHost: docker\r\nUpgrade: tcp\r\n"
                f"Connection: Upgrade\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        s.sendall(head.encode() + body)
        head_b, rest = read_head(s)
        if not head_b.startswith(b"HTTP/1.1 101"):
            raise ApiError(f"exec start: no upgrade: {head_b[:200]!r}")
        total = len(rest)
        while data := s.recv(65536):
            total += len(data)
    return total


def load_image(sock_path: Path, tarball: Path) -> float:
    """``POST /images/load`` of a tarball (sendfile, Content-Length); seconds to the answer."""
    size = tarball.stat().st_size
    head = (f"POST {API}/images/load?quiet=1 HTTP/1.1\r\nHost: docker\r\n"
            f"Content-Type: application/x-tar\r\nContent-Length: {size}\r\n\r\n").encode()
    with connect(sock_path, timeout=TIMEOUT) as s, open(tarball, "rb") as f:
        t0 = time.perf_counter()
        s.sendall(head)
        s.sendfile(f)
        status, _, body = read_body(s, keep=1 << 16)
        seconds = time.perf_counter() - t0
    if status != 200 or b'"error' in body:
        raise ApiError(f"load {tarball.name}: {status} {body[:300]!r}")
    return seconds


def busybox_tarball(where: Path) -> Path:
    """A ``docker save`` tarball of busybox (the host's busybox-static), made once."""
    path = where / "busybox-save.tar"
    if not path.exists():
        img = timg.SaveImage([timg.busybox_rootfs_tar("symlink")], repo_tags=[BUSYBOX])
        path.write_bytes(timg.docker_save_tar([img]))
    return path


def ensure_busybox(sock_path: Path, where: Path) -> None:
    """Load busybox into the engine unless it has it already."""
    with Client(sock_path) as c:
        status, _ = c.call("GET", f"/images/{BUSYBOX}/json")
    if status != 200:
        load_image(sock_path, busybox_tarball(where))


def open_stream(sock_path: Path, target: str) -> socket.socket:
    """Connect and send a GET without waiting for the answer."""
    s = connect(sock_path, timeout=TIMEOUT)
    s.sendall(request_bytes("GET", API + target))
    return s


def sync() -> None:
    os.sync()
