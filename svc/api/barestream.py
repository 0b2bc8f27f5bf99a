"""Plain streams served from a connection's first read, before any protocol object exists.

Opening an events stream through hypercorn cost the daemon about 0.6 ms of CPU: the
connection's task group, hypercorn's protocol wrapper, h11's connection, the head guard and a
second task for the stream. A client that opens fifty at once (compose, a dashboard) waited
for fifty of those in a row, where dockerd answers them in parallel on every core.

So a plain socket's connection (``svc.api.serving.Connection``) first reads what its client
sends (``first_bytes``, held to the head deadline by the connection clock). When that is
exactly one simple request head of a plain route that answers with a stream (``GET
/events``: ``PlainRoutes.quick``), the stream runs right there, in the connection's task, on a
``BareStream``: the socket written directly, and the client's going noticed by the server's
``HangupWatch`` instead of a read loop. Anything else (another request, a partial head, TLS,
a daemon shutting down or out of connections, plain routes switched off for debugging or
authorization) goes on through hypercorn with the bytes already read, exactly as before.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.api.clock import ConnectionClock
from svc.api.hangups import HangupWatch
from svc.api.rawstream import SocketWrites


class BareStream(SocketWrites):
    """A plain stream's connection that hypercorn never saw: the view writes it, nothing
    reads it (the ``HangupWatch`` reads the client's EOF), and the connection clock can
    abort it (``abort_after``), as it can a ``RawStream``."""

    def __init__(self, sock: Any, clock: ConnectionClock) -> None:
        self.plain_socket = sock
        self.peer_gone = False
        self._closed = False
        self._eof = False
        self._clock = clock
        self._on_gone: Callable[[], None] | None = None
        self._gone: trio.Event | None = None  # made for a reader (``receive_some``) only
        self.abort_at = math.inf
        self.clock_slot: int | None = None  # (the clock's bookkeeping)
        self.head = b""

    def abort_after(self, seconds: float) -> None:
        if self._closed:  # (a subscriber cut off after its stream ended: nothing to abort)
            return
        self.abort_at = trio.current_time() + seconds
        self._clock.arm(self, self.abort_at)

    def deadline(self) -> float:
        return self.abort_at

    def on_deadline(self) -> None:
        self.abort()

    @property
    def client_done(self) -> bool:
        return self._eof

    def when_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the client half-closes or goes (``on_hangup``)."""
        self._on_gone = callback
        if self._eof:
            self.on_hangup()

    def on_hangup(self) -> None:
        """The ``HangupWatch``'s call: the client has half-closed or gone."""
        self._eof = True
        if self._gone is not None:
            self._gone.set()
        if self._on_gone is not None:
            callback, self._on_gone = self._on_gone, None
            callback()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """``b""`` once the client has half-closed or gone: what it sends is dropped."""
        if not self._eof:
            if self._gone is None:
                self._gone = trio.Event()
            await self._gone.wait()
        await trio.lowlevel.checkpoint()
        return b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``; what the socket takes at once is written without a trip through
        the scheduler (a stream's head, an event), the rest as ``RawStream`` writes it."""
        if self._closed:
            raise trio.ClosedResourceError("the stream was closed")
        if self.peer_gone:
            raise trio.BrokenResourceError("the client closed the connection")
        try:
            done = os.write(self.plain_socket.fileno(), data)  # (non-blocking: trio's)
        except BlockingIOError:
            done = 0
        except OSError as exc:  # EPIPE, ECONNRESET: the client is gone
            self.peer_gone = True
            raise trio.BrokenResourceError("the client closed the connection") from exc
        if done < len(data):
            await self._send_direct(memoryview(data)[done:])

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Mark the stream closed; the connection closes the socket when the stream ends."""
        self._closed = True
        await trio.lowlevel.checkpoint()


class _FirstBytesDue:
    """The head deadline of a connection's first read (the clock's ``Timed``): when it
    passes, the socket's reading side is shut, so the read returns ``b""`` and the
    connection closes without a word, as for a client that never sends a request."""

    def __init__(self, sock: Any, due: float) -> None:
        self._sock = sock
        self._due = due
        self.clock_slot: int | None = None

    def deadline(self) -> float:
        return self._due

    def on_deadline(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)


async def first_bytes(stream: trio.SocketStream, clock: ConnectionClock, limit: float,
                      max_bytes: int) -> bytes:
    """What the client sends first (``b""``: it went, or sent nothing for ``limit`` s).
    Raises what ``receive_some`` raises. Cancellation: the deadline is taken off."""
    try:  # nearly always there already: read without a trip through the scheduler
        data = os.read(stream.socket.fileno(), max_bytes)
        if data:
            return data
    except BlockingIOError:
        pass
    except OSError:
        return b""  # (reset: gone)
    due = _FirstBytesDue(stream.socket, trio.current_time() + limit)
    clock.arm(due, due.deadline())
    try:
        return bytes(await stream.receive_some(max_bytes))
    finally:
        clock.disarm(due)


async def serve_bare(sock: Any, run: Callable[[BareStream], Awaitable[None]],
                     clock: ConnectionClock, hangups: HangupWatch) -> None:
    """Run a plain stream (``run``: a ``Streamer``'s, its head bound) on the socket ``sock``
    until it ends or the client goes. The caller closes the socket. Cancellation: the socket
    is no longer watched nor timed; the stream's own clean-up has run."""
    stream = BareStream(sock, clock)
    fd = sock.fileno()
    hangups.watch(fd, stream.on_hangup)
    try:
        await run(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went
    finally:
        hangups.forget(fd)
        clock.disarm(stream)
        stream._closed = True
