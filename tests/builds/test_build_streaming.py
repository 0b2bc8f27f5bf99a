"""A context whose instructions file comes first starts building while the rest arrives:
steps that need no context run during the upload, COPY waits for it; a context refused once
the stream has begun is an in-stream error that leaves nothing behind, as does a client gone
mid-upload; what is known before the stream (an empty or unparsable instructions file) is
still a 400."""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import AsyncIterator

import httpx
import trio

from tests.builds.conftest import BASE, messages, refused
from tests.support.daemon import Daemon

BIG = 6 << 20
PIECE = 256 << 10


def _head(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime, info.mode = size, kind, 1_600_000_000, 0o644
    return info.tobuf(tarfile.USTAR_FORMAT)


def _entry(name: str, data: bytes) -> bytes:
    return _head(name, len(data)) + data + bytes(-len(data) % 512)


async def _slow_body(svcfile: bytes, *, extra: bytes = b"", pause: float = 0.1,
                     sent: dict[str, float] | None = None) -> AsyncIterator[bytes]:
    """The instructions file first, then ``extra`` entries, then a big file in pieces with a
    pause between them (the upload of a large context), then the end of the archive."""
    yield _entry("Svcfile", svcfile) + extra + _head("big", BIG)
    data = os.urandom(BIG)
    for i in range(0, BIG, PIECE):
        await trio.sleep(pause)
        yield data[i:i + PIECE]
    yield bytes(-BIG % 512) + bytes(1024)
    if sent is not None:
        sent["done"] = time.monotonic()


async def _post(sock: str, body: AsyncIterator[bytes], seen: dict[str, float],
                marker: bytes, query: str = "") -> bytes:
    """POST /build over a raw connection, reading the answer while the body goes out (as
    the docker CLI does); the time ``marker`` was first seen goes into ``seen``."""
    stream = await trio.open_unix_socket(sock)
    answer = bytearray()
    async with stream:
        await stream.send_all(f"POST /v1.23/build{query} HTTP/1.1\r\nHost: d\r\n"
                              "Content-Type: application/x-tar\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n".encode())

        async def send() -> None:
            try:
                async for chunk in body:
                    await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await stream.send_all(b"0\r\n\r\n")
            except trio.BrokenResourceError:
                # a refused context: the daemon answered and closed without reading the
                # rest; as with Go's client, what counts is the answer, read to its end
                pass

        async def receive() -> None:
            while not answer.endswith(b"\r\n0\r\n\r\n"):
                data = await stream.receive_some(65536)
                if not data:
                    return
                answer.extend(data)
                if marker in answer and "marker" not in seen:
                    seen["marker"] = time.monotonic()

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await receive()
                nursery.cancel_scope.cancel()
    return bytes(answer)


def _body_of(answer: bytes) -> str:
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    out = bytearray()
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2:]
    return out.decode()


async def _nothing_left(api: httpx.AsyncClient, daemon: Daemon, images: int) -> None:
    with trio.fail_after(10):
        while os.listdir(daemon.root / "builds"):
            await trio.sleep(0.05)
    assert len((await api.get("/images/json", params={"all": "1"})).json()) == images
    assert (await api.get("/containers/json", params={"all": "1"})).json() == []


async def test_steps_run_while_the_context_arrives(api: httpx.AsyncClient,
                                                   bdaemon: Daemon) -> None:
    svcfile = f"FROM {BASE}\nRUN echo early-bird\nCOPY big /big\nRUN wc -c < /big\n".encode()
    seen: dict[str, float] = {}
    sent: dict[str, float] = {}
    answer = await _post(str(bdaemon.sock), _slow_body(svcfile, pause=0.15, sent=sent),
                         seen, b"early-bird\\n")
    text = "".join(m.get("stream", "") for m in messages(_body_of(answer)))
    assert "Successfully built" in text and f"{BIG}\n" in text, text
    assert seen["marker"] < sent["done"] - 1.0, (seen, sent)  # the RUN ran mid-upload


async def test_refused_mid_stream_leaves_nothing(api: httpx.AsyncClient,
                                                 bdaemon: Daemon) -> None:
    images = len((await api.get("/images/json", params={"all": "1"})).json())
    svcfile = f"FROM {BASE}\nRUN echo started\nCOPY big /big\n".encode()
    for extra, words in ((_entry("../evil", b"x"), "points outside the context"),
                         (_entry("Svcfile", b"FROM scratch\n"), "appears more than once")):
        seen: dict[str, float] = {}
        answer = await _post(str(bdaemon.sock), _slow_body(svcfile, extra=extra, pause=0.02),
                             seen, b"started")
        msgs = messages(_body_of(answer))
        assert words in msgs[-1].get("error", ""), msgs
        assert msgs[-1]["errorDetail"]["message"] == msgs[-1]["error"]
        await _nothing_left(api, bdaemon, images)


async def test_client_gone_mid_upload_leaves_nothing(api: httpx.AsyncClient,
                                                     bdaemon: Daemon) -> None:
    images = len((await api.get("/images/json", params={"all": "1"})).json())
    svcfile = f"FROM {BASE}\nRUN echo started\nCOPY big /big\n".encode()
    seen: dict[str, float] = {}
    with trio.move_on_after(2.5):  # the client goes mid-upload, after the first step ran
        await _post(str(bdaemon.sock), _slow_body(svcfile, pause=0.2), seen, b"started")
    assert "marker" in seen
    await _nothing_left(api, bdaemon, images)


async def test_known_before_the_stream_is_a_400(api: httpx.AsyncClient) -> None:
    def tar(svcfile: bytes) -> bytes:
        buf = io.BytesIO()
        buf.write(_entry("Svcfile", svcfile) + _entry("big", os.urandom(1 << 20)))
        buf.write(bytes(1024))
        return buf.getvalue()

    assert "cannot be empty" in await refused(api, tar(b"\n  \n"))
    assert "Svcfile parse error line 2: unknown instruction: BOGUS" in \
        await refused(api, tar(b"FROM x\nBOGUS y\n"))
