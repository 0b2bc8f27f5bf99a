"""``POST /images/load`` read from the socket by the loading thread (``svc.api.rawbody``), as
real clients send it: the docker CLI's chunked body (Go sends a file of unknown length
chunked), docker-py's ``Content-Length``; the answer closes the connection
(``Connection: close``) and the next connection is served; a badly framed or cut-short body
is an error in the stream and leaves nothing in the store."""

from __future__ import annotations

import json
import os

import trio

from tests.api.test_images import store_state
from tests.builds.test_build_raw_body import _chunked, _dechunk
from tests.conftest import http_client
from tests.support import images as timg
from tests.support.daemon import Daemon
from tests.support.http import closing_exchange, connect, header, read_head, read_until_eof


def _archive(tag: str) -> bytes:
    big = timg.layer_tar([timg.file(f"data/f{i}", os.urandom(256 << 10)) for i in range(16)])
    return timg.docker_save_tar([timg.SaveImage([big], repo_tags=[tag])])


async def _load(d: Daemon, extra: str, body: bytes) -> tuple[bytes, list[dict[str, str]]]:
    answer, rest = await closing_exchange(
        d.sock, ("POST /v1.23/images/load?quiet=1 HTTP/1.1\r\nHost: d\r\n"
                 f"Content-Type: application/x-tar\r\n{extra}\r\n").encode(), body)
    data = _dechunk(rest) if header(answer, "Transfer-Encoding") == "chunked" else rest
    return answer, [json.loads(line) for line in data.decode().splitlines() if line]


async def test_a_chunked_load_as_the_cli_sends_it(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    body = _chunked(_archive("chunked:1"), 100_003)
    _, msgs = await _load(d, "Transfer-Encoding: chunked\r\n", body)
    assert msgs == [{"stream": "Loaded image: chunked:1\n"}], msgs
    async with http_client(d.sock) as c:  # (a new connection)
        assert (await c.get("/images/chunked:1/json")).status_code == 200


async def test_a_content_length_load(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    archive = _archive("sized:1")
    _, msgs = await _load(d, f"Content-Length: {len(archive)}\r\n", archive)
    assert msgs == [{"stream": "Loaded image: sized:1\n"}], msgs
    async with http_client(d.sock) as c:
        assert (await c.get("/images/sized:1/json")).status_code == 200


async def test_a_badly_framed_load_is_an_error_and_leaves_nothing(  # type: ignore[no-untyped-def]
        spawn) -> None:
    d = spawn()
    before = store_state(d)
    archive = _archive("broken:1")
    body = _chunked(archive[: len(archive) // 2], 65536)
    body = body[: -len(b"0\r\nX-Checksum: none\r\n\r\n")] + b"zz\r\n"
    _, msgs = await _load(d, "Transfer-Encoding: chunked\r\n", body)
    assert msgs[-1]["error"] == "bad chunked request body: chunk size b'zz'", msgs
    with trio.fail_after(10):
        while store_state(d) != before:
            await trio.sleep(0.02)
    async with http_client(d.sock) as c:
        assert (await c.get("/images/broken:1/json")).status_code == 404


async def test_a_load_slower_than_the_head_timeout_is_not_cut_short(  # type: ignore[no-untyped-def]
        spawn) -> None:
    """The head's timeout ends with the head: a body that takes longer to come (gigabytes
    from a slow disk) is read to its end."""
    d = spawn(env={"SVC_HEAD_TIMEOUT": "1"})
    archive = _archive("slow:1")
    s = await connect(d.sock)
    async with s:
        buf = bytearray()
        await s.send_all(("POST /v1.23/images/load HTTP/1.1\r\nHost: d\r\nContent-Type: "
                          f"application/x-tar\r\nContent-Length: {len(archive)}\r\n\r\n"
                          ).encode())
        half = len(archive) // 2
        await s.send_all(archive[:half])
        await trio.sleep(2.5)  # past the head timeout and its slot
        await s.send_all(archive[half:])
        with trio.fail_after(60):
            answer = await read_head(s, buf)
            rest = await read_until_eof(s, buf)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"Loaded image: slow:1" in rest, rest


async def test_a_whole_archive_with_broken_framing_after_it_loads_nothing(  # type: ignore[no-untyped-def]
        spawn) -> None:
    """The archive is read whole, then the body's framing breaks: an error, and the layers
    already unpacked are discarded, not left staged."""
    d = spawn()
    before = store_state(d)
    body = _chunked(_archive("after:1"), 65536)
    body = body[: -len(b"0\r\nX-Checksum: none\r\n\r\n")] + b"zz\r\n"
    _, msgs = await _load(d, "Transfer-Encoding: chunked\r\n", body)
    assert msgs[-1]["error"] == "bad chunked request body: chunk size b'zz'", msgs
    assert store_state(d) == before
    async with http_client(d.sock) as c:
        assert (await c.get("/images/after:1/json")).status_code == 404
