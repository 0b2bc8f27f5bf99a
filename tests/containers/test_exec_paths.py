"""Exec create, start and inspect answer alike on the plain path (``svc.api.plainstream``: a
body of a known length, whether it came with the head or after it) and the full ASGI way (a
chunked body): the same status, headers and body, the same errors, stdin pipelined after the
start's body reaches the process, and a kept-alive connection serves its next request."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from svc.wire.stdcopy import FrameDecoder
from tests.containers.test_exec_stats import running
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head, read_until_eof

# together: head and body in one write (as the docker CLI sends); apart: the body 0.1 s after
# (as Python's http.client sends); chunked: the full way
WAYS = ["together", "apart", "chunked"]


def _post(target: str, body: bytes, *extra: str, content_type: str = "application/json") \
        -> tuple[list[str], bytes]:
    lines = [f"POST {target} HTTP/1.1", "Host: docker", "User-Agent: Docker-Client/28.0.0",
             *extra]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    return lines, body


async def _send(s: trio.SocketStream, lines: list[str], body: bytes, way: str,
                after: bytes = b"") -> None:
    """The request, and ``after`` it (stdin) in the same write as its body's end."""
    if way == "chunked":
        head = [*lines, "Transfer-Encoding: chunked"]
        body = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    else:
        head = [*lines, f"Content-Length: {len(body)}"]
    raw = ("\r\n".join(head) + "\r\n\r\n").encode()
    if way == "apart":
        await s.send_all(raw)
        await trio.sleep(0.1)
        await s.send_all(body + after)
    else:
        await s.send_all(raw + body + after)


async def _answer(s: trio.SocketStream, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    head = await read_head(s, buf)
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    length = int(headers.get("content-length", "0"))
    while len(buf) < length:
        buf += await s.receive_some(65536)
    body = bytes(buf[:length])
    del buf[:length]
    return int(lines[0].split()[1]), headers, body


async def _exchange(d: Daemon, lines: list[str], body: bytes, way: str) \
        -> tuple[int, dict[str, str], bytes]:
    s = await connect(d.sock)
    try:
        await _send(s, lines, body, way)
        return await _answer(s, bytearray())
    finally:
        await s.aclose()


def _shape(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "date"}


async def _create(d: Daemon, cid: str, way: str, **fields: object) -> str:
    raw = json.dumps({"Cmd": ["cat"], "AttachStdin": True, "AttachStdout": True,
                      "AttachStderr": True, **fields}).encode()
    status, _, body = await _exchange(d, *_post(f"/v1.23/containers/{cid}/exec", raw), way)
    assert status == 201, body
    return str(json.loads(body)["Id"])


@pytest.mark.parametrize("way", WAYS)
async def test_an_exec_runs_alike_every_way(cdaemon: Daemon, api: httpx.AsyncClient,
                                            way: str) -> None:
    cid = await running(api)
    eid = await _create(cdaemon, cid, way)
    start = json.dumps({"Detach": False, "Tty": False}).encode()
    s = await connect(cdaemon.sock)
    lines, body = _post(f"/v1.23/exec/{eid}/start", start, "Connection: Upgrade",
                        "Upgrade: tcp")
    await _send(s, lines, body, way, after=b"in the same write\n")  # (stdin pipelined)
    buf = bytearray()
    got = await read_head(s, buf)
    assert got == (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.svc.raw-stream"
                   b"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
    await s.send_all(b"and after\n")
    await s.send_eof()
    with trio.fail_after(15):
        out = await read_until_eof(s, buf)
    await s.aclose()
    frames = FrameDecoder().feed(out)
    assert {f.stream for f in frames} == {1}
    assert b"".join(f.data for f in frames) == b"in the same write\nand after\n"
    with trio.fail_after(5):
        while True:
            r = await api.get(f"/exec/{eid}/json")
            if not r.json()["Running"]:
                break
            await trio.sleep(0.05)
    assert r.json()["ExitCode"] == 0 and r.json()["ContainerID"] == cid


async def test_a_start_without_upgrade_gets_the_raw_200(cdaemon: Daemon,
                                                        api: httpx.AsyncClient) -> None:
    cid = await running(api)
    for way in WAYS:
        eid = await _create(cdaemon, cid, way, Cmd=["echo", "hi"], AttachStdin=False)
        s = await connect(cdaemon.sock)
        await _send(s, *_post(f"/v1.23/exec/{eid}/start", b'{"Detach":false,"Tty":true}'),
                    way)
        buf = bytearray()
        assert await read_head(s, buf) == \
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.svc.raw-stream\r\n\r\n"
        with trio.fail_after(15):
            # (the start's Tty: raw, not framed; the create's none: no terminal, no \r)
            assert await read_until_eof(s, buf) == b"hi\n"
        await s.aclose()


async def test_answers_and_errors_are_the_same_every_way(cdaemon: Daemon,
                                                          api: httpx.AsyncClient) -> None:
    cid = await running(api)
    eid = await _create(cdaemon, cid, "together", Cmd=["true"])
    cases = [
        _post("/v1.23/containers/no-such/exec", b'{"Cmd":["true"]}'),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]', ),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]}', content_type=""),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":[]}'),
        _post("/v1.23/exec/no-such/start", b'{"Detach":false}'),
        _post(f"/v1.23/exec/{eid}/start", b'{"Detach":"maybe"}'),
        _post(f"/v1.1/containers/{cid}/exec", b'{"Cmd":["true"]}'),
    ]
    for lines, body in cases:
        answers = [await _exchange(cdaemon, lines, body, way) for way in WAYS]
        assert answers[0][0] in (400, 404), answers[0]
        assert len({(status, tuple(sorted(_shape(headers).items())), got)
                    for status, headers, got in answers}) == 1, answers
    # a detached start answers 200 at once; a second start is a 409, either way
    status, _, body = await _exchange(cdaemon, *_post(f"/v1.23/exec/{eid}/start",
                                                     b'{"Detach":true}'), "together")
    assert (status, body) == (200, b"")
    for way in WAYS:
        status, _, body = await _exchange(cdaemon, *_post(f"/v1.23/exec/{eid}/start",
                                                         b'{"Detach":false}'), way)
        assert status == 409 and b"has already run" in body, body


async def test_a_kept_alive_connection_serves_on_after_a_plain_create(
        cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    cid = await running(api)
    s = await connect(cdaemon.sock)
    buf = bytearray()
    answers = []
    for way in ("together", "apart"):
        await _send(s, *_post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]}'), way)
        answers.append(await _answer(s, buf))
    eid = json.loads(answers[0][2])["Id"]
    await s.send_all(f"GET /v1.23/exec/{eid}/json HTTP/1.1\r\nHost: docker\r\n\r\n".encode())
    status, headers, body = await _answer(s, buf)
    await s.aclose()
    assert [a[0] for a in answers] == [201, 201]
    assert answers[0][1]["content-type"] == "application/json"
    assert answers[0][1]["api-version"] and answers[0][1]["server"]
    assert status == 200 and json.loads(body)["ID"] == eid
    full = await _exchange(cdaemon, *_post(f"/v1.23/containers/{cid}/exec",
                                           b'{"Cmd":["true"]}'), "chunked")
    assert _shape(full[1]).keys() == _shape(answers[0][1]).keys()
