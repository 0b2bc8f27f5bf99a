"""Helpers for the tests of the sockets waited on together (``svc.api.epollset``)."""

from __future__ import annotations

import socket

import trio


async def settle() -> None:
    """Let the watching task see what the test's peers just did."""
    for _ in range(20):
        await trio.sleep(0.01)


def pair() -> tuple[socket.socket, socket.socket]:
    """(ours, as the daemon holds an accepted connection: non-blocking; the client's)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs
