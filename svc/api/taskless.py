"""Plain streams opened in the accept loop, with no task behind them until one must wait.

A client that opens fifty event streams at once (compose, a dashboard) waited for fifty
openings in a row on the one event loop: for each a connection task, hypercorn's connection
object, the bare stream and its generators, and a task parked on the subscription for as
long as the stream lasts. dockerd opens them in parallel on every core.

**At accept.** The accept loop (``svc.api.accepting``) reads a plain connection's first bytes
at once: a client sends its request right after connecting, so they are nearly always there.
``Opener.offer`` looks at them: when they are exactly one simple request head of a plain
stream route whose view can open without waiting (``Streamer.adopt``: ``GET /events``
without ``since`` or ``until``), the view opens the stream right there. It
subscribes, writes the head, and leaves the socket to the bus's fan-out, which writes its
events (``svc.engine.fanout``), and to the ``HangupWatch``, which notices the client's going
and closes it. No task is started. Anything else is served by a connection task as before,
from the bytes already read.

**When it must wait** (the client stopped reading and a write was cut short, or the
subscription ended and its last words must go out), the stream is handed over
(``TasklessStream.hand_over``): a task in the server's nursery goes on with it as a bare
stream (``svc.api.barestream``), exactly as if it had served it from the start.

**Counting and shutdown.** An adopted connection counts in ``OPEN`` from adoption to close,
as a task's connection does. At the daemon's shutdown the bus ends every stream, so each is
handed over and ends with its last chunk, as the others do; ``Opener.close_all`` closes what
is still adopted when the server stops without that.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.api.accepting import OPEN
from svc.api.barestream import BareStream, serve_bare
from svc.api.clock import ConnectionClock
from svc.api.fastpath import PlainRoutes
from svc.api.hangups import HangupWatch
from svc.api.rawstream import shrink_send_buffer

log = logging.getLogger("svc.server")

_ADOPTED, _HANDED_OVER, _CLOSED = range(3)


class TasklessStream:
    """An adopted plain stream's connection: its socket (non-blocking) written directly,
    watched for the client's going, handed to a task when it must wait."""

    def __init__(self, sock: socket.socket, opener: Opener) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self._opener = opener
        self._state = _ADOPTED
        self._detach: Callable[[], None] | None = None

    def shrink_send_buffer(self, size: int) -> None:
        """As ``SocketWrites.shrink_send_buffer``: writes block after kilobytes."""
        shrink_send_buffer(self.sock, size)

    def write(self, data: bytes) -> int:
        """Write what the socket takes now, without waiting: how many bytes it took; -1
        when the client has gone."""
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0
        except OSError:  # EPIPE, ECONNRESET
            return -1

    def when_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the client half-closes or goes, while no task has the
        stream (``hand_over`` stops it)."""
        self._opener.hangups.watch(self.fd, callback)

    def on_close(self, detach: Callable[[], None]) -> None:
        """Call ``detach`` when the connection is closed while adopted, before its socket
        is: whatever writes to the descriptor must let go of it first (its number is
        another file's once it is closed). Not called after a hand-over."""
        self._detach = detach

    def close(self) -> None:
        """Close the adopted connection (the stream is over; no task has it)."""
        if self._state != _ADOPTED:
            return
        self._state = _CLOSED
        detach, self._detach = self._detach, None
        if detach is not None:
            detach()
        self._opener.release(self)
        self._opener.hangups.forget(self.fd)
        self.sock.close()

    def hand_over(self, run: Callable[[BareStream], Awaitable[None]]) -> None:
        """Go on with the stream in a task of its own: ``run`` on a ``BareStream`` of this
        connection, which is closed when ``run`` returns. Synchronous (the fan-out and the
        bus call it); the task starts at the loop's next turn."""
        if self._state != _ADOPTED:
            return
        self._state = _HANDED_OVER
        detach, self._detach = self._detach, None  # (the task lets go of it itself)
        self._opener.hangups.forget(self.fd)  # (the bare stream watches it from here on)
        try:
            self._opener.nursery.start_soon(self._serve, run)
        except RuntimeError:  # the server has stopped: nothing can go on
            self._state, self._detach = _ADOPTED, detach
            self.close()

    async def _serve(self, run: Callable[[BareStream], Awaitable[None]]) -> None:
        opener = self._opener
        sock = trio.socket.from_stdlib_socket(self.sock)
        try:
            await serve_bare(sock, run, opener.clock, opener.hangups)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            sock.close()  # (trio's: it may have waited on the socket)
            self._state = _CLOSED
            opener.release(self)


class Opener:
    """Offers each new plain connection's first bytes to the plain stream routes (see the
    module); keeps the count of the connections it adopted."""

    def __init__(self, plain: PlainRoutes, clock: ConnectionClock, hangups: HangupWatch,
                 stopping: Callable[[], bool], nursery: trio.Nursery,
                 max_connections: int) -> None:
        self._plain = plain
        self.clock = clock
        self.hangups = hangups
        self._stopping = stopping
        self.nursery = nursery
        self._max = max_connections
        self._open: set[TasklessStream] = set()  # adopted or handed over, not yet closed

    def offer(self, sock: socket.socket, data: bytes) -> bool:
        """Open the plain stream ``data`` asks for on ``sock`` without a task, if it is one
        that can be: True when the connection was taken (it is the stream's from here on),
        False when it is to be served as usual (nothing was written to it)."""
        if OPEN.value >= self._max or self._stopping() or not self.hangups.running:
            return False  # (a task refuses what is over the limit, with 503)
        reply = self._plain.stream(data)
        if reply is None or reply.stream is None or reply.stream.adopt is None:
            return False
        conn = TasklessStream(sock, self)
        self._open.add(conn)
        OPEN.value += 1
        try:
            if reply.stream.adopt(conn, reply.head):
                return True
        except Exception:  # a bug: this connection is lost, never the accept loop
            log.exception("opening a stream in the accept loop failed")
            conn.close()
            return True
        self.release(conn)
        return False

    def release(self, conn: TasklessStream) -> None:
        """``conn`` is closed (or was not taken after all)."""
        if conn in self._open:
            self._open.discard(conn)
            OPEN.value -= 1

    def close_all(self) -> None:
        """Close the connections still adopted (the server has stopped)."""
        for conn in list(self._open):
            conn.close()


def stream_opener(plain: PlainRoutes | None, context: Any, nursery: trio.Nursery,
                  max_connections: int) -> Opener | None:
    """The opener of a server whose context has a clock, a hangup watch and hypercorn's
    ``terminated`` flag; None when plain routes are off (every request through the app)."""
    if plain is None:
        return None
    return Opener(plain, context.clock, context.hangups, context.terminated.is_set, nursery,
                  max_connections)
