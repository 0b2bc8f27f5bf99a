"""The plugin calls' HTTP/1.1 client against small servers of the test's own: kept-alive
connections reused, closed ones not, and each way a server can fail mapped to its kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from svc.plugins.client import PluginBadAnswer, PluginClient, PluginGone, PluginUnreachable
from svc.plugins.discovery import PluginSpec
from svc.plugins.http1 import KEEP_IDLE

Reply = Callable[[bytes], bytes | None]  # the request's bytes -> the answer (None: close)


async def serve(path: Path, reply: Reply, accepted: list[int], nursery: trio.Nursery) -> None:
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await listener.bind(str(path))
    listener.listen()
    listeners = [trio.SocketListener(listener)]

    async def handle(stream: trio.SocketStream) -> None:
        accepted.append(1)
        buf = b""
        async with stream:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if not sep:
                    continue
                length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length")), b"0"))
                if len(rest) < length:
                    continue
                buf = rest[length:]
                answer = reply(head)
                if answer is None:
                    return
                try:
                    await stream.send_all(answer)
                except trio.BrokenResourceError:  # the client stopped reading (too large)
                    return

    nursery.start_soon(trio.serve_listeners, handle, listeners)


def ok(body: bytes, *extra: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
            + b"".join(e + b"\r\n" for e in extra) + b"\r\n" + body)


async def with_server(tmp_path: Path, reply: Reply,
                      test: Callable[[PluginClient, list[int]], Awaitable[None]]) -> None:
    accepted: list[int] = []
    sock = tmp_path / "p.sock"
    async with trio.open_nursery() as nursery:
        await serve(sock, reply, accepted, nursery)
        client = PluginClient(PluginSpec("p", f"unix://{sock}"), timeout=5)
        try:
            await test(client, accepted)
        finally:
            await client.aclose()
            nursery.cancel_scope.cancel()


async def test_calls_reuse_kept_alive_connections(tmp_path: Path) -> None:
    async def test(client: PluginClient, accepted: list[int]) -> None:
        for i in range(5):
            assert await client.call("M.One", {"i": i}) == {"a": 1}
        assert len(accepted) == 1  # one after another: one connection
        async with trio.open_nursery() as nursery:
            for _ in range(KEEP_IDLE + 2):
                nursery.start_soon(client.call, "M.Two", {})
        assert len(accepted) == 1 + KEEP_IDLE + 1  # at once: one each (the idle one reused)
        assert len(client.pool._idle) == KEEP_IDLE  # at most this many kept

    await with_server(tmp_path, lambda head: ok(b'{"a": 1}'), test)


async def test_a_connection_the_server_closes_is_not_reused(tmp_path: Path) -> None:
    async def test(client: PluginClient, accepted: list[int]) -> None:
        assert await client.call("M.One") == {}
        assert await client.call("M.One") == {}
        assert len(accepted) == 2 and client.pool._idle == []

    await with_server(tmp_path, lambda head: ok(b"", b"Connection: close"), test)


async def test_what_a_broken_server_does_is_named(tmp_path: Path) -> None:
    async def test(client: PluginClient, accepted: list[int]) -> None:
        with pytest.raises(PluginGone, match="M.Close: plugin p went away during the call: "
                           "the plugin closed the connection before its answer ended"):
            await client.call("M.Close")
        with pytest.raises(PluginGone, match="not an HTTP answer"):
            await client.call("M.Junk")
        with pytest.raises(PluginBadAnswer, match="answered more than 16 MiB"):
            await client.call("M.Huge")
        assert await client.call("M.Fine") == {"fine": True}  # a fresh connection each

    def reply(head: bytes) -> bytes | None:
        if b"/M.Close " in head:
            return None
        if b"/M.Junk " in head:
            return b"SSH-2.0-OpenSSH\r\n\r\n"
        if b"/M.Huge " in head:
            return b"HTTP/1.1 200 OK\r\nContent-Length: 20000000\r\n\r\n" + b"x" * (17 << 20)
        return ok(b'{"fine": true}')

    await with_server(tmp_path, reply, test)


async def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    client = PluginClient(PluginSpec("p", f"unix://{tmp_path}/none.sock"), timeout=5)
    with pytest.raises(PluginUnreachable, match="plugin p is unreachable"):
        await client.call("M.One")
    await client.aclose()
