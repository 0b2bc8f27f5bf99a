"""Adopted streams (svc.api.taskless): whatever writes to an adopted connection's descriptor
lets go of it before the descriptor is closed (its number is soon another file's), whether
the client went or the server stopped; a stream handed to a task is the task's to end."""

from __future__ import annotations

import os
import socket

import trio

from svc.api.clock import ConnectionClock
from svc.api.hangups import HangupWatch
from svc.api.taskless import Opener, TasklessStream


async def _settle() -> None:
    for _ in range(20):
        await trio.sleep(0.01)


def _opener(nursery: trio.Nursery, hangups: HangupWatch) -> Opener:
    return Opener(None, ConnectionClock(), hangups, lambda: False, nursery,  # type: ignore[arg-type]
                  max_connections=100)


def _adopted(opener: Opener) -> tuple[TasklessStream, socket.socket, list[str]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    conn = TasklessStream(ours, opener)
    opener._open.add(conn)
    seen: list[str] = []

    def detach() -> None:  # as the events route's: the descriptor must still be ours here
        os.fstat(conn.fd)
        seen.append("detached" if ours.fileno() == conn.fd else "closed already")

    conn.on_close(detach)
    conn.when_gone(conn.close)
    return conn, theirs, seen


async def test_a_client_that_goes_is_detached_before_its_socket_closes() -> None:
    hangups = HangupWatch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hangups.run)
        await _settle()
        conn, theirs, seen = _adopted(_opener(nursery, hangups))
        assert conn.write(b"HTTP/1.1 200 OK\r\n\r\n") == 19
        theirs.close()
        await _settle()
        assert seen == ["detached"] and conn.sock.fileno() == -1
        conn.close()  # (again: nothing more)
        assert seen == ["detached"]
        nursery.cancel_scope.cancel()


async def test_the_server_stopping_detaches_every_adopted_stream() -> None:
    hangups = HangupWatch()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hangups.run)
        await _settle()
        opener = _opener(nursery, hangups)
        streams = [_adopted(opener) for _ in range(5)]
        opener.close_all()
        assert [s[2] for s in streams] == [["detached"]] * 5
        assert all(s[1].recv(10) == b"" for s in streams)  # closed
        nursery.cancel_scope.cancel()


async def test_a_stream_handed_over_is_not_detached_by_its_close() -> None:
    hangups = HangupWatch()
    ran: list[str] = []

    async def run(raw: object) -> None:
        ran.append("task")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hangups.run)
        await _settle()
        opener = _opener(nursery, hangups)
        conn, theirs, seen = _adopted(opener)
        conn.hand_over(run)  # type: ignore[arg-type]
        conn.close()  # (the task's now: nothing)
        await _settle()
        assert ran == ["task"] and seen == [] and theirs.recv(10) == b""
        opener.close_all()
        assert seen == []
        nursery.cancel_scope.cancel()
