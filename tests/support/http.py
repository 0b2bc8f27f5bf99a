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


async def closing_exchange(sock: str | object, head: bytes, body: bytes, *,
                           expect: bool = False) -> tuple[bytes, bytes]:
    """Send a request whose body the server reads from the socket itself (``RawBody``:
    waiting for ``100 Continue`` first with ``expect``) and read the answer to the end: it
    is a 200 that closes the connection (``Connection: close``). Returns (head, the rest)."""
    s = await connect(sock)
    async with s:
        buf = bytearray()
        await s.send_all(head)
        if expect:
            interim = await read_head(s, buf)
            assert interim.startswith(b"HTTP/1.1 100 "), interim
        await s.send_all(body)
        with trio.fail_after(60):
            answer = await read_head(s, buf)
            rest = await read_until_eof(s, buf)  # Connection: close: the server ends it
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert header(answer, "Connection") == "close", answer
    return answer, rest
