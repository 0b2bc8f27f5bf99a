"""The hijacked connection: h11's stand-in after the takeover, and the trio stream a view
reads and writes (see ``svc.api.hijack``)."""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11
import trio
from hypercorn.events import RawData

from svc.api.peerread import until_read

if TYPE_CHECKING:
    from svc.api.hijack import HijackH11Protocol

# Client bytes buffered before the socket stops being read (back-pressure to the client).
HIGH_WATER = 256 * 1024
RECEIVE_MAX = 64 * 1024
# How long a raw stream's first bytes wait for the client to read the response head.
HEAD_READ_WAIT = 1.0


class HijackedConnection:
    """Stands in for ``h11.Connection`` after the takeover: buffers raw bytes, parses nothing."""

    our_state = None  # not h11.DONE: hypercorn closes instead of recycling the connection
    their_state = None
    they_are_waiting_for_100_continue = False
    trailing_data = (b"", False)

    def __init__(self, initial: bytes, eof: bool, wake: Callable[[], None]) -> None:
        self.buffer = bytearray(initial)
        self.eof = eof
        self._wake = wake
        self.dropping = False  # no reader: what the client sends is dropped (``when_gone``)

    def receive_data(self, data: bytes) -> None:
        if data:
            if not self.dropping:
                self.buffer.extend(data)
        else:
            self.eof = True
        self._wake()

    def next_event(self) -> Any:
        return h11.PAUSED if len(self.buffer) >= HIGH_WATER else h11.NEED_DATA

    def send(self, event: Any) -> bytes:
        return b""  # nothing h11 would frame may reach the wire after the takeover

    def start_next_cycle(self) -> None:
        pass


def shrink_send_buffer(sock: Any, size: int) -> None:
    """Ask for a kernel send buffer of ``size`` (doubled by the kernel) on ``sock``; a socket
    that refuses keeps its own."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


class SocketWrites(trio.abc.Stream):
    """Writes straight to a taken-over plain socket: after the takeover nothing else writes
    to it. ``plain_socket`` is the trio socket (None: the subclass's ``send_all`` only)."""

    plain_socket: Any = None
    peer_gone = False
    _closed = False

    def shrink_send_buffer(self, size: int) -> None:
        """A small kernel send buffer (the kernel doubles ``size``) for a stream whose
        producer must see when the client stops reading (events): a write then blocks after
        kilobytes, not megabytes, and memory held for a stuck client stays small."""
        sock = self._transport_socket()
        if sock is not None:
            shrink_send_buffer(sock, size)

    def abort(self) -> None:
        """Shut the connection down from outside the writer: a write blocked on a client that
        does not read fails at once (``BrokenResourceError``), under TLS too. Synchronous,
        so that code with no task of its own (the event bus) can call it."""
        self.peer_gone = True
        sock = self._transport_socket()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _transport_socket(self) -> Any:
        """The socket under the stream (a TLS stream's too), or None."""
        return self.plain_socket

    async def send_parts(self, parts: list[bytes]) -> None:
        """Send ``parts`` as if joined, without joining them on a plain socket (one
        ``sendmsg`` gathers them); ``trio.BrokenResourceError`` once the client is gone."""
        sock = self.plain_socket
        if sock is None or self._closed or self.peer_gone:
            await self.send_all(b"".join(parts))
            return
        try:
            done = await sock.sendmsg(parts)
        except OSError as exc:
            self.peer_gone = True
            raise trio.BrokenResourceError("the client closed the connection") from exc
        total = sum(map(len, parts))
        if done < total:  # a partial write: the rest goes out the ordinary way
            await self._send_direct(memoryview(b"".join(parts))[done:])

    async def _send_direct(self, data: bytes | bytearray | memoryview) -> None:
        """Write straight to the socket (no copy, no trip through hypercorn's protocol):
        after the takeover nothing else writes to it. Partial writes are continued."""
        sock = self.plain_socket
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                try:
                    done += await sock.send(view[done:])
                except OSError as exc:  # EPIPE, ECONNRESET: the client is gone
                    self.peer_gone = True
                    raise trio.BrokenResourceError("the client closed the connection") \
                        from exc


class RawStream(SocketWrites):
    """The hijacked connection as a trio stream. One reader task and one writer task."""

    def __init__(self, protocol: HijackH11Protocol, initial: bytes, eof: bool) -> None:
        self._protocol = protocol
        self._conn = HijackedConnection(initial, eof, self._wake_reader)
        self._readable = trio.Event()
        self._writer: trio.lowlevel.Task | None = None
        self.peer_gone = False
        self._closed = False
        self.plain_socket: Any = None  # the trio socket, for direct writes; None under TLS
        self._on_gone: Callable[[], None] | None = None
        self.abort_at = math.inf  # when the connection's clock aborts it (``abort_after``)
        self.head = b""  # the response head written at the takeover

    def grow_send_buffer(self, size: int = 4 << 20) -> None:
        """A larger kernel send buffer for a bulk stream (attach, exec, logs): each wakeup of
        the client then moves megabytes instead of ~200 KiB. Needs CAP_NET_ADMIN beyond
        net.core.wmem_max; without it the kernel's limit stays."""
        sock = self.plain_socket
        if sock is None:
            return
        for opt in (getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, opt, size)
                return
            except OSError:
                continue

    def abort_after(self, seconds: float) -> None:
        """``abort`` the connection ``seconds`` from now, unless the view is done by then
        (the connection's clock, ``svc.api.clock``, keeps the time: no task waits)."""
        self.abort_at = trio.current_time() + seconds
        self._protocol.rearm()

    @property
    def client_done(self) -> bool:
        """The client has half-closed or gone (``when_gone``)."""
        return self._conn.eof

    def _transport_socket(self) -> Any:
        if self.plain_socket is not None:
            return self.plain_socket
        stream = getattr(getattr(self._protocol.send, "__self__", None), "stream", None)
        stream = getattr(stream, "transport_stream", stream)  # under an SSLStream
        return getattr(stream, "socket", None)

    async def until_head_read(self, limit: float = HEAD_READ_WAIT) -> None:
        """Wait, at most ``limit`` seconds, until the client has read what was sent so far
        (the response head); a no-op except on a plain unix socket.

        docker-py parses the head through a buffered reader and then reads the raw socket
        (``exec_start``, ``attach``): output that reached the client along with the head sits
        in that buffer and is lost. dockerd has the same race, which its slower process start
        mostly hides; here an exec's ``echo`` could win it. A unix socket tells how much of
        what was sent is still unread (``SIOCOUTQ``); TCP tells only what is unacknowledged,
        so nothing waits there. Cancellation: nothing is left behind.
        """
        await until_read(self.plain_socket, limit)

    def dup_fd(self, *, blocking: bool = True) -> int | None:
        """A duplicate of the connection's fd for a worker thread to write to directly (None
        under TLS). ``blocking`` makes the connection blocking for good (the flag belongs to
        the open file both share): only for a thread that writes the rest of the body,
        nothing else writing or reading once a view has taken over. Without it, the loop may
        write again after the thread (``FdWriter`` polls a full socket)."""
        if self.plain_socket is None:
            return None
        fd = os.dup(self.plain_socket.fileno())
        if blocking:
            os.set_blocking(fd, True)
        return fd

    def when_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the client half-closes or goes, with no task reading: for a
        stream whose client sends nothing after its request (events); what it sends anyway
        is dropped. (As dockerd's close notification reads the client's EOF.)"""
        self._conn.dropping = True
        self._conn.buffer.clear()
        self._on_gone = callback
        if self._conn.eof:
            self._wake_reader()

    def _wake_reader(self) -> None:
        self._readable.set()
        if self._on_gone is not None and self._conn.eof:
            callback, self._on_gone = self._on_gone, None
            callback()

    def _on_closed(self) -> None:
        """hypercorn reports Closed: from our own failed write (peer gone) or the read side."""
        if self._writer is not None and trio.lowlevel.current_task() is self._writer:
            self.peer_gone = True
        self._conn.eof = True
        self._wake_reader()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Client bytes; ``b""`` once the client has half-closed (or gone)."""
        conn = self._conn
        while not conn.buffer and not conn.eof:
            if self._closed:
                raise trio.ClosedResourceError("the hijacked stream was closed")
            self._readable = trio.Event()
            await self._readable.wait()
        await trio.lowlevel.checkpoint_if_cancelled()
        if not conn.buffer:
            return b""
        n = max_bytes or RECEIVE_MAX
        chunk = bytes(conn.buffer[:n])
        del conn.buffer[:n]
        if len(conn.buffer) < HIGH_WATER:
            await self._protocol.can_read.set()
        return chunk

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Write to the client; ``trio.BrokenResourceError`` once the client is gone."""
        if self._closed:
            raise trio.ClosedResourceError("the hijacked stream was closed")
        if self.peer_gone:
            raise trio.BrokenResourceError("the client closed the connection")
        if self.plain_socket is not None:
            await self._send_direct(data)
            return
        self._writer = trio.lowlevel.current_task()
        try:
            await self._protocol.send(RawData(data=bytes(data)))
        finally:
            self._writer = None
        if self.peer_gone:
            raise trio.BrokenResourceError("the client closed the connection")

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Mark the stream closed; the socket closes when the view returns."""
        self._closed = True
        self._wake_reader()
        await trio.lowlevel.checkpoint()


