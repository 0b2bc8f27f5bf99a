"""Whether a client has read what was sent to it: a unix socket tells how many of the bytes
sent on it the peer has not read yet (``SIOCOUTQ``). TCP tells only what is unacknowledged,
which says nothing about the client's reads, so nothing waits there."""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
from typing import Any

import trio


def unread(fd: int) -> int:
    """Bytes sent on unix socket ``fd`` that the peer has not read yet (0 if unknown, or if
    the socket is closed: ``fd`` -1, as the connection closes it while this waits)."""
    if fd < 0:
        return 0
    try:
        out = fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", out)[0])


async def until_read(sock: Any, limit: float) -> None:
    """Wait, at most ``limit`` seconds, until the peer of trio socket ``sock`` has read all
    that was sent on it; a no-op unless ``sock`` is a unix socket. Polls from 0.2 ms up to
    5 ms. Cancellation: nothing is left behind."""
    if sock is None or sock.family != socket.AF_UNIX:
        return
    deadline = trio.current_time() + limit
    pause = 0.0002
    while unread(sock.fileno()) > 0 and trio.current_time() < deadline:
        await trio.sleep(pause)
        pause = min(pause * 2, 0.005)
