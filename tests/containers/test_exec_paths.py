"""Exec create, start and inspect answer alike whether a request's body came with its head (the
protocol answers it plainly, ``svc.api.plainstream``) or after it (the full ASGI way): the
same status, headers and body, the same errors, stdin pipelined after the start's body reaches
the process, and a kept-alive connection serves its next request."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from svc.wire.stdcopy import FrameDecoder
from tests.containers.test_exec_stats import running
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head, read_until_eof

SPLITS = [False, True]  # (False: head and body in one write; True: the body 0.1 s after)


def _post(target: str, body: bytes, *extra: str, content_type: str = "application/json") \
        -> tuple[bytes, bytes]:
    lines = [f"POST {target} HTTP/1.1", "Host: docker", "User-Agent: Docker-Client/28.0.0",
             f"Content-Length: {len(body)}", *extra]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), body


async def _send(s: trio.SocketStream, head: bytes, body: bytes, split: bool) -> None:
    if split:
        await s.send_all(head)
        await trio.sleep(0.1)
        await s.send_all(body)
    else:
        await s.send_all(head + body)


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


async def _exchange(d: Daemon, head: bytes, body: bytes, split: bool) \
        -> tuple[int, dict[str, str], bytes]:
    s = await connect(d.sock)
    try:
        await _send(s, head, body, split)
        return await _answer(s, bytearray())
    finally:
        await s.aclose()


def _shape(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "date"}


async def _create(d: Daemon, cid: str, split: bool, **fields: object) -> str:
    raw = json.dumps({"Cmd": ["cat"], "AttachStdin": True, "AttachStdout": True,
                      "AttachStderr": True, **fields}).encode()
    status, _, body = await _exchange(d, *_post(f"/v1.23/containers/{cid}/exec", raw), split)
    assert status == 201, body
    return str(json.loads(body)["Id"])


@pytest.mark.parametrize("split", SPLITS)
async def test_an_exec_runs_alike_either_way(cdaemon: Daemon, api: httpx.AsyncClient,
                                             split: bool) -> None:
    cid = await running(api)
    eid = await _create(cdaemon, cid, split)
    start = json.dumps({"Detach": False, "Tty": False}).encode()
    s = await connect(cdaemon.sock)
    head, body = _post(f"/v1.23/exec/{eid}/start", start, "Connection: Upgrade",
                       "Upgrade: tcp")
    await _send(s, head, body + b"in the same write\n", split)  # (stdin pipelined)
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
    for split in SPLITS:
        eid = await _create(cdaemon, cid, split, Cmd=["echo", "hi"], AttachStdin=False)
        s = await connect(cdaemon.sock)
        await _send(s, *_post(f"/v1.23/exec/{eid}/start", b'{"Detach":false,"Tty":true}'),
                    split)
        buf = bytearray()
        assert await read_head(s, buf) == \
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.svc.raw-stream\r\n\r\n"
        with trio.fail_after(15):
            # (the start's Tty: raw, not framed; the create's none: no terminal, no \r)
            assert await read_until_eof(s, buf) == b"hi\n"
        await s.aclose()


async def test_answers_and_errors_are_the_same_either_way(cdaemon: Daemon,
                                                          api: httpx.AsyncClient) -> None:
    cid = await running(api)
    eid = await _create(cdaemon, cid, False, Cmd=["true"])
    cases = [
        _post("/v1.23/containers/no-such/exec", b'{"Cmd":["true"]}'),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]', ),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]}', content_type=""),
        _post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":[]}'),
        _post("/v1.23/exec/no-such/start", b'{"Detach":false}'),
        _post(f"/v1.23/exec/{eid}/start", b'{"Detach":"maybe"}'),
        _post(f"/v1.1/containers/{cid}/exec", b'{"Cmd":["true"]}'),
    ]
    for head, body in cases:
        together = await _exchange(cdaemon, head, body, False)
        apart = await _exchange(cdaemon, head, body, True)
        assert together[0] in (400, 404), together
        assert (together[0], _shape(together[1]), together[2]) == \
            (apart[0], _shape(apart[1]), apart[2])
    # a detached start answers 200 at once; a second start is a 409, either way
    status, _, body = await _exchange(cdaemon, *_post(f"/v1.23/exec/{eid}/start",
                                                     b'{"Detach":true}'), False)
    assert (status, body) == (200, b"")
    for split in SPLITS:
        status, _, body = await _exchange(cdaemon, *_post(f"/v1.23/exec/{eid}/start",
                                                         b'{"Detach":false}'), split)
        assert status == 409 and b"has already run" in body, body


async def test_a_kept_alive_connection_serves_on_after_a_plain_create(
        cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    cid = await running(api)
    s = await connect(cdaemon.sock)
    buf = bytearray()
    answers = []
    for _ in range(2):
        await s.send_all(b"".join(_post(f"/v1.23/containers/{cid}/exec", b'{"Cmd":["true"]}')))
        answers.append(await _answer(s, buf))
    eid = json.loads(answers[0][2])["Id"]
    await s.send_all(f"GET /v1.23/exec/{eid}/json HTTP/1.1\r\nHost: docker\r\n\r\n".encode())
    status, headers, body = await _answer(s, buf)
    await s.aclose()
    assert [a[0] for a in answers] == [201, 201]
    assert answers[0][1]["content-type"] == "application/json"
    assert answers[0][1]["api-version"] and answers[0][1]["server"]
    assert status == 200 and json.loads(body)["ID"] == eid
    slow = await _exchange(cdaemon, *_post(f"/v1.23/containers/{cid}/exec",
                                           b'{"Cmd":["true"]}'), True)
    assert _shape(slow[1]).keys() == _shape(answers[0][1]).keys()
