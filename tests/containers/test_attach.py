"""Attach (hijacked, 101 and 200, websocket), stdin and half-close, detach keys, several
clients, a slow client, TTY framing."""

from __future__ import annotations

import contextlib

import httpx
import pytest
import trio

from tests.containers.conftest import create, demux, inspect
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def hijacked(d: Daemon, cid: str, query: str, *, upgrade: bool = True
                   ) -> tuple[trio.SocketStream, bytes, bytearray]:
    s = await connect(d.sock)
    extra = "Upgrade: tcp\r\nConnection: Upgrade\r\n" if upgrade else ""
    await s.send_all(f"POST /containers/{cid}/attach?{query} HTTP/1.1\r\nHost: svc\r\n"
                     f"{extra}\r\n".encode())
    buf = bytearray()
    head = await read_head(s, buf)
    return s, head, buf


async def until_eof(s: trio.SocketStream, buf: bytearray, timeout: float = 10) -> bytes:
    with trio.fail_after(timeout):
        while chunk := await s.receive_some(65536):
            buf += chunk
    return bytes(buf)


async def test_attach_before_start_stdin_and_half_close(cdaemon: Daemon,
                                                       api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh", "-c", "while read x; do echo got $x; done; echo err >&2"],
                        OpenStdin=True, StdinOnce=True, AttachStdin=True))["Id"]
    s, head, buf = await hijacked(cdaemon, cid, "stream=1&stdin=1&stdout=1&stderr=1")
    assert head.startswith(b"HTTP/1.1 101 UPGRADED")
    assert b"application/vnd.svc.raw-stream" in head
    await s.send_all(b"early\n")  # before the start: held until the process exists
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    await s.send_all(b"late\n")
    await trio.sleep(0.2)
    await s.send_eof()  # half-close: the container's stdin ends (StdinOnce)
    out = demux(await until_eof(s, buf))
    assert out[1] == b"got early\ngot late\n" and out[2] == b"err\n"
    with trio.fail_after(5):
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 0}


async def test_attach_200_without_upgrade_and_logs(cdaemon: Daemon,
                                                  api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh", "-c", "echo before; sleep 0.5; echo after"]))["Id"]
    await api.post(f"/containers/{cid}/start")
    await trio.sleep(0.25)
    s, head, buf = await hijacked(cdaemon, cid, "logs=1&stream=1&stdout=1", upgrade=False)
    assert head.startswith(b"HTTP/1.1 200 OK")
    out = demux(await until_eof(s, buf))
    assert out[1] == b"before\nafter\n"


async def test_several_clients_get_every_byte(cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    script = "sleep 0.3; i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done"
    cid = (await create(api, ["sh", "-c", script]))["Id"]
    clients = [await hijacked(cdaemon, cid, "stream=1&stdout=1") for _ in range(3)]
    await api.post(f"/containers/{cid}/start")
    expected = "".join(f"line{i}\n" for i in range(2000)).encode()
    for s, _, buf in clients:
        assert demux(await until_eof(s, buf))[1] == expected


async def test_a_stalled_client_is_cut_off_and_never_blocks(cdaemon: Daemon,
                                                           api: httpx.AsyncClient) -> None:
    """A client 4 MiB behind that reads nothing for a second is detached; the reading client
    and the container go on (docs/architecture.md, attach policy)."""
    cid = (await create(api, ["sh", "-c", "sleep 0.3; head -c 30000000 /dev/zero"]))["Id"]
    slow, _, slow_buf = await hijacked(cdaemon, cid, "stream=1&stdout=1")
    fast, _, fast_buf = await hijacked(cdaemon, cid, "stream=1&stdout=1")
    await api.post(f"/containers/{cid}/start")
    got = demux(await until_eof(fast, fast_buf, timeout=30))
    assert len(got[1]) == 30_000_000  # the reading client got everything
    with trio.fail_after(10):  # and the container was not held up by the stalled one
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 0}
    slow_out = demux(await until_eof(slow, slow_buf, timeout=30))
    assert len(slow_out[1]) < 30_000_000
    assert b"fell more than 4 MiB behind" in slow_out[2]


async def test_tty_attach_is_raw_and_detach_keys(cdaemon: Daemon,
                                                api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh"], Tty=True, OpenStdin=True, AttachStdin=True))["Id"]
    await api.post(f"/containers/{cid}/start")
    s, _, buf = await hijacked(cdaemon, cid, "stream=1&stdin=1&stdout=1&detachKeys=ctrl-a,x")
    await s.send_all(b"echo tty-$((40+2))\n")
    with trio.fail_after(10):
        while b"tty-42\r\n" not in buf:
            buf += await s.receive_some()
    assert b"\x01\x00\x00\x00" not in buf  # no frames with a TTY
    await s.send_all(b"\x01x")  # detach
    await until_eof(s, buf)
    assert (await inspect(api, cid))["State"]["Running"]  # still running
    s, head, buf = await hijacked(cdaemon, cid, "stream=1&detachKeys=ctrl-")
    assert head.startswith(b"HTTP/1.1 400")
    with trio.fail_after(5):
        while b"Invalid escape keys" not in buf:
            buf += await s.receive_some()
    await s.aclose()


async def test_attach_unknown_container(cdaemon: Daemon) -> None:
    s, head, _ = await hijacked(cdaemon, "nope", "stream=1")
    assert head.startswith(b"HTTP/1.1 404")


async def test_websocket_attach(cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    import wsproto
    import wsproto.events as ev

    cid = (await create(api, ["sh", "-c", "read x; echo ws-$x; sleep 0.2"], OpenStdin=True,
                        AttachStdin=True))["Id"]
    await api.post(f"/containers/{cid}/start")
    s = await connect(cdaemon.sock)
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    await s.send_all(ws.send(ev.Request(
        host="svc", target=f"/v1.23/containers/{cid}/attach/ws?stream=1&stdin=1&stdout=1")))
    received = bytearray()
    accepted = False
    with trio.fail_after(10):
        while True:
            data = await s.receive_some(65536)
            if not data:
                break
            ws.receive_data(data)
            for e in ws.events():
                if isinstance(e, ev.AcceptConnection):
                    accepted = True
                    await s.send_all(ws.send(ev.TextMessage(data="hello\n")))
                elif isinstance(e, ev.BytesMessage):
                    received += e.data
                elif isinstance(e, ev.CloseConnection):
                    with contextlib.suppress(trio.BrokenResourceError):
                        await s.send_all(ws.send(e.response()))
            if ws.state.name in ("CLOSED", "REMOTE_CLOSING"):
                break
    assert accepted and received == b"ws-hello\n"
    await s.aclose()


@pytest.mark.parametrize("keys", ["ctrl-p,ctrl-q", "a", "ctrl-@", "ctrl-["])
def test_detach_keys_parse(keys: str) -> None:
    from svc.api.detachkeys import parse_detach_keys

    assert parse_detach_keys(keys)


def test_detach_key_filter_holds_a_partial_sequence() -> None:
    from svc.engine.containers.attach import DetachKeyFilter

    f = DetachKeyFilter(b"\x10\x11")
    assert f.feed(b"ab\x10") == (b"ab", False)
    assert f.feed(b"c") == (b"\x10c", False)
    assert f.feed(b"\x10") == (b"", False)
    assert f.feed(b"\x11rest") == (b"", True)


