"""Waiting until a client has read its answer (``api/peerread``)."""

import socket

import trio

from svc.api.peerread import unread, until_read


async def test_the_wait_ends_when_the_client_reads() -> None:
    a, b = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        await a.send(b"x" * 100)
        assert unread(a.fileno()) > 0  # (the bytes and their buffer's overhead)

        async def reader() -> None:
            await trio.sleep(0.05)
            await b.recv(100)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            with trio.fail_after(2):
                await until_read(a, 5)
        assert unread(a.fileno()) == 0


async def test_a_socket_closed_during_the_wait_ends_it_without_an_error() -> None:
    """The connection closes its socket when the client goes (its fileno becomes -1)."""
    a, b = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with b:
        await a.send(b"x" * 100)

        async def closer() -> None:
            await trio.sleep(0.05)
            a.close()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(closer)
            with trio.fail_after(2):
                await until_read(a, 5)
        assert unread(-1) == 0
