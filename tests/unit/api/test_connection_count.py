"""A connection served by a task stops counting against the connection limit when its socket
closes, not when its task ends: the task goes on through checkpoints after the close (the read
loop's end, the protocol's ``Closed``), and a client that saw the close may already be opening
its next connection, which the limit must not refuse because of this one."""

from __future__ import annotations

import socket

import trio
from hypercorn.config import Config

from svc.api.accepting import OPEN
from svc.api.serving import Connection, ServerContext


async def test_a_connection_is_uncounted_by_the_time_its_socket_closes() -> None:
    ours, theirs = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    seen: list[int] = []
    close = stream.socket.close

    def closing() -> None:
        seen.append(OPEN.value)
        close()

    stream.socket.close = closing  # type: ignore[method-assign]
    before = OPEN.value
    conn = Connection(None, Config(), ServerContext(), {}, stream)
    theirs.close()  # (a client that went without a word: its first read is b"")
    with trio.fail_after(5):
        await conn.run()
    assert seen and seen[0] == before  # (uncounted already when the socket closed)
    assert OPEN.value == before  # (and once only)
    assert conn not in OPEN.connections
