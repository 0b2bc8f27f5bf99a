"""Small HTTP helpers over a unix socket for tests that need the raw bytes."""

from __future__ import annotations

import trio


async def connect(sock_path: str | object) -> trio.SocketStream:
    return await trio.open_unix_socket(str(sock_path))


async def read_head(stream: trio.abc.ReceiveStream, buf: bytearray) -> bytes:
    """Read until the end of the response head; leftover bytes stay in ``buf``."""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(65536)
        if not data:
            raise EOFError("connection closed before the response head")
        buf.extend(data)
    end = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:end])
    del buf[:end]
    return head


async def read_until_eof(stream: trio.abc.ReceiveStream, buf: bytearray) -> bytes:
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return bytes(buf)
        buf.extend(data)


def header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.lower().encode():
            return v.strip().decode()
    return None


def dechunk(body: bytes) -> bytes:
    """Decode a complete chunked body."""
    out = bytearray()
    i = 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[j + 2 : j + 2 + size]
        i = j + 2 + size + 2
