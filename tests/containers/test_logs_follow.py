"""``logs -f`` of a running container is served from its output as it is logged (log_tap):
whatever the follower gets must be byte for byte what reading the log back after the exit
gives, timestamps included, however the output was cut and however late the follower reads."""

from __future__ import annotations

import socket

import httpx
import trio

from tests.containers.conftest import create, inspect
from tests.support.daemon import Daemon

PARAMS = {"stdout": "1", "stderr": "1", "timestamps": "1"}


async def follow_then_compare(api: httpx.AsyncClient, cmd: list[str], *, after: float,
                              **fields: object) -> bytes:
    """Start ``cmd``, follow its log from ``after`` seconds on until it exits, and check that
    against the whole log read back."""
    cid = (await create(api, cmd, **fields))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    await trio.sleep(after)
    got = bytearray()
    with trio.fail_after(60):
        async with api.stream("GET", f"/containers/{cid}/logs",
                              params={**PARAMS, "follow": "1"}) as r:
            assert r.status_code == 200
            async for chunk in r.aiter_bytes():
                got += chunk
    assert (await inspect(api, cid))["State"]["Running"] is False
    back = (await api.get(f"/containers/{cid}/logs", params=PARAMS)).content
    assert bytes(got) == back
    return back


async def test_a_line_unfinished_at_subscription_is_whole_in_the_follow(
        api: httpx.AsyncClient) -> None:
    back = await follow_then_compare(
        api, ["sh", "-c", "printf 'a\\nb'; sleep 0.6; printf 'c\\nd\\n'; echo x >&2; "
                          "printf 'no newline'"], after=0.3)
    payloads = [(code, data[31:]) for code, data in _frames(back)]  # after the stamp
    assert [p for c, p in payloads if c == 1] == [b"a\n", b"bc\n", b"d\n", b"no newline"]
    assert [p for c, p in payloads if c == 2] == [b"x\n"]


async def test_long_lines_are_cut_as_the_log_cuts_them(api: httpx.AsyncClient) -> None:
    back = await follow_then_compare(
        api, ["sh", "-c", "sleep 0.3; head -c 40000 /dev/zero | tr '\\0' y; echo; "
                          "head -c 20000 /dev/zero | tr '\\0' z; sleep 0.2; echo end"],
        after=0.1)
    sizes = [len(f[1]) - 31 for f in _frames(back)]
    assert sizes == [16384, 16384, 40000 - 32768 + 1, 16384, 20000 - 16384 + 4]


async def test_tty_follow_is_raw_and_matches(api: httpx.AsyncClient) -> None:
    back = await follow_then_compare(api, ["sh", "-c", "echo one; sleep 0.5; echo two"],
                                     after=0.2, Tty=True)
    assert [line[31:] for line in back.split(b"\n") if line] == [b"one\r", b"two\r"]


async def test_a_follower_that_falls_behind_goes_on_from_the_file(cdaemon: Daemon,
                                                                   api: httpx.AsyncClient) -> None:
    """The follower reads nothing while 23 MB go by (more than a tap holds): the container is
    not held back, and the follower still gets every record once, in order."""
    lines = 3_000_000
    cid = (await create(api, ["sh", "-c", f"sleep 0.5; seq 0 {lines - 1}"]))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(cdaemon.sock))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(f"GET /v1.23/containers/{cid}/logs?stdout=1&follow=1 HTTP/1.1\r\n"
              "Host: svc\r\n\r\n".encode())
    with trio.fail_after(60):
        exit_code = (await api.post(f"/containers/{cid}/wait")).json()["StatusCode"]
    assert exit_code == 0  # it finished while the follower read nothing
    data = await trio.to_thread.run_sync(_read_all, s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    frames = _frames(_dechunk(body))
    assert len(frames) == lines
    assert b"".join(p for _, p in frames) == "".join(f"{i}\n" for i in range(lines)).encode()
    assert "fell 16 MiB behind; it catches up from the file" in cdaemon.logfile.read_text()


def _read_all(s: socket.socket) -> bytes:
    out = bytearray()
    with s:
        while chunk := s.recv(1 << 20):
            out += chunk
    return bytes(out)


def _dechunk(body: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        if size == 0:
            return bytes(out)
        out += body[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 4 : pos + 8], "big")
        out.append((data[pos], data[pos + 8 : pos + 8 + size]))
        pos += 8 + size
    return out
