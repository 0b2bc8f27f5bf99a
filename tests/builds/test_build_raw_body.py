"""The build context read from the socket by the unpacking thread (``svc.api.rawbody``), as
real clients send it: chunked with chunk extensions and trailers, ``Content-Length``, behind
``Expect: 100-continue`` (curl asks for it above 1 MiB); the answer closes the connection
(``Connection: close``); a badly framed body is refused in the stream and leaves nothing; a
request refused before its body is read keeps its connection for the next request."""

from __future__ import annotations

import io
import json
import os
import tarfile

import httpx
import trio

from tests.builds.conftest import BASE, built_id, messages
from tests.builds.test_build_streaming import _nothing_left
from tests.support.daemon import Daemon
from tests.support.http import closing_exchange, connect, header, read_head

BIG = os.urandom(3 << 20)


def _context(svcfile: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Svcfile", svcfile.encode()), ("big", BIG)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_600_000_000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _chunked(body: bytes, size: int) -> bytes:
    out = bytearray()
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x;piece=%d\r\n%s\r\n" % (len(piece), i // size, piece)
    return bytes(out + b"0\r\nX-Checksum: none\r\n\r\n")


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        line, _, data = data.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if not size:
            return bytes(out)
        out += data[:size]
        data = data[size + 2:]


async def _exchange(sock: str, head: bytes, body: bytes, *, expect: bool = False
                    ) -> tuple[bytes, list[dict[str, object]]]:
    """Send a request (waiting for ``100 Continue`` with ``expect``) and read the answer to
    the end: (head, messages)."""
    answer, rest = await closing_exchange(sock, head, body, expect=expect)
    return answer, messages(_dechunk(rest).decode())


def _head(extra: str) -> bytes:
    return (f"POST /v1.23/build?nocache=1 HTTP/1.1\r\nHost: d\r\n"
            f"Content-Type: application/x-tar\r\n{extra}\r\n").encode()


async def test_chunked_with_extensions_and_trailers(bdaemon: Daemon) -> None:
    body = _chunked(_context(f"FROM {BASE}\nCOPY big /big\nRUN wc -c /big\n"), 100_003)
    _, msgs = await _exchange(str(bdaemon.sock), _head("Transfer-Encoding: chunked\r\n"),
                              body)
    built_id(msgs)
    assert f"{len(BIG)} /big\n" in "".join(str(m.get("stream", "")) for m in msgs)


async def test_content_length_behind_expect_continue(bdaemon: Daemon) -> None:
    body = _context(f"FROM {BASE}\nCOPY big /big\n")
    _, msgs = await _exchange(
        str(bdaemon.sock),
        _head(f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"), body, expect=True)
    built_id(msgs)


async def test_a_badly_framed_body_is_refused_and_leaves_nothing(
        api: httpx.AsyncClient, bdaemon: Daemon) -> None:
    images = len((await api.get("/images/json", params={"all": "1"})).json())
    tar = _context(f"FROM {BASE}\nCOPY big /big\n")
    body = _chunked(tar[:1 << 20], 65536)[:-len(b"0\r\nX-Checksum: none\r\n\r\n")]
    _, msgs = await _exchange(str(bdaemon.sock), _head("Transfer-Encoding: chunked\r\n"),
                              body + b"zz\r\n")
    assert msgs[-1]["error"] == "bad chunked request body: chunk size b'zz'", \
        json.dumps(msgs)[-500:]
    await _nothing_left(api, bdaemon, images)


async def test_refused_before_the_body_keeps_the_connection(bdaemon: Daemon) -> None:
    """A bad tag is a 400 before the body is read: the body is read and dropped (as for any
    request answered early) and the connection serves the next request."""
    body = _context(f"FROM {BASE}\n")
    s = await connect(str(bdaemon.sock))
    async with s:
        await s.send_all(b"POST /v1.23/build?t=Bad:Tag:x HTTP/1.1\r\nHost: d\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:4096])
        buf = bytearray()
        with trio.fail_after(20):
            answer = await read_head(s, buf)
            assert answer.startswith(b"HTTP/1.1 400 "), answer
            assert header(answer, "Connection") is None, answer
            length = int(header(answer, "Content-Length") or 0)
            while len(buf) < length:
                buf += await s.receive_some(65536)
            assert b"repository name must be lowercase" in buf[:length]
            del buf[:length]
            await s.send_all(body[4096:] + b"GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n")
            while b"OK" not in buf:
                buf += await s.receive_some(65536)
        assert bytes(buf).startswith(b"HTTP/1.1 200 "), bytes(buf)
