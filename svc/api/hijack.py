"""Connection hijacking for attach and exec start, inside hypercorn.

ASGI cannot hand a view its socket, and a 101 sent through ASGI breaks h11 (stack notes, §2).
So svc subclasses hypercorn's ``H11Protocol`` (installed by rebinding one name before serving)
and gives every HTTP/1.x request a scope extension, ``svc.hijack``. A view does its normal Quart
work first (404s, 409s, reading the body) and then calls ``hijack(request)``:

1. the protocol writes the head itself: ``101 UPGRADED`` with ``Connection: Upgrade`` and
   ``Upgrade: tcp`` when the request asked for them, otherwise ``200 OK``; both with
   ``Content-Type: application/vnd.svc.raw-stream`` and no chunking; on a unix socket,
   nothing more is sent until the client has read that head (``RawStream.until_head_read``);
2. h11 is swapped for ``HijackedConnection``, which takes over any bytes already read after the
   request (stdin pipelined with the request is not lost) and never parses again;
3. the view gets a ``RawStream``: ``receive_some`` returns client bytes and ``b""`` once the
   client half-closes (stdin EOF), while ``send_all`` keeps working; a failed write raises
   ``trio.BrokenResourceError``.

The client's EOF is *not* turned into ``http.disconnect``, so Quart does not cancel the view on
a half-close. When the view returns, the socket is closed and Quart's own response is dropped.
Everything else (and websockets) is served by hypercorn unchanged.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h11
import hypercorn.protocol
import hypercorn.trio.tcp_server
import trio
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h11 import H11Protocol

from svc.errors import Unavailable

EXTENSION = "svc.hijack"
RAW_STREAM = "application/vnd.svc.raw-stream"
# Client bytes buffered before the socket stops being read (back-pressure to the client).
HIGH_WATER = 256 * 1024
RECEIVE_MAX = 64 * 1024
RECEIVE_BYTES = 1 << 20
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

    def receive_data(self, data: bytes) -> None:
        if data:
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


class RawStream(trio.abc.Stream):
    """The hijacked connection as a trio stream. One reader task and one writer task."""

    def __init__(self, protocol: HijackH11Protocol, initial: bytes, eof: bool) -> None:
        self._protocol = protocol
        self._conn = HijackedConnection(initial, eof, self._wake_reader)
        self._readable = trio.Event()
        self._writer: trio.lowlevel.Task | None = None
        self.peer_gone = False
        self._closed = False
        self.plain_socket: Any = None  # the trio socket, for direct writes; None under TLS

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
        sock = self.plain_socket
        if sock is None or sock.family != socket.AF_UNIX:
            return
        deadline = trio.current_time() + limit
        pause = 0.0002
        while _unread(sock.fileno()) > 0 and trio.current_time() < deadline:
            await trio.sleep(pause)
            pause = min(pause * 2, 0.005)

    def dup_fd(self) -> int | None:
        """A blocking duplicate of the connection's fd for a worker thread to write to
        directly (None under TLS). Nothing else writes once a view has taken over."""
        if self.plain_socket is None:
            return None
        fd = os.dup(self.plain_socket.fileno())
        os.set_blocking(fd, True)
        return fd

    def _wake_reader(self) -> None:
        self._readable.set()

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

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        """Mark the stream closed; the socket closes when the view returns."""
        self._closed = True
        self._wake_reader()
        await trio.lowlevel.checkpoint()


def _unread(fd: int) -> int:
    """Bytes sent on unix socket ``fd`` that the peer has not read yet (``SIOCOUTQ``)."""
    try:
        out = fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", out)[0])


def _wants_upgrade(headers: list[tuple[bytes, bytes]]) -> bool:
    connection = upgrade = ""
    for name, value in headers:
        low = name.lower()
        if low == b"connection":
            connection += "," + value.decode("latin1").lower()
        elif low == b"upgrade":
            upgrade = value.decode("latin1").strip().lower()
    tokens = {t.strip() for t in connection.split(",")}
    return "upgrade" in tokens and upgrade == "tcp"


def response_head(upgrade: bool) -> bytes:
    if upgrade:
        return (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: " + RAW_STREAM.encode()
                + b"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + RAW_STREAM.encode() + b"\r\n\r\n"


class _HijackTaskGroup:
    """Wraps the connection's task group to add the hijack extension to HTTP scopes."""

    def __init__(self, inner: Any, protocol: HijackH11Protocol) -> None:
        self._inner = inner
        self._protocol = protocol

    async def spawn_app(self, app: Any, config: Any, scope: dict[str, Any],
                        send: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        if scope.get("type") == "http":
            scope["extensions"][EXTENSION] = {"hijack": partial(self._protocol.hijack, scope)}
        result: Callable[..., Awaitable[None]] = await self._inner.spawn_app(
            app, config, scope, send)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class HijackH11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, able to hand a request's connection to its view."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task_group = _HijackTaskGroup(self.task_group, self)  # type: ignore[assignment]
        self.raw: RawStream | None = None

    async def handle(self, event: Event) -> None:
        if self.raw is not None and isinstance(event, Closed):
            self.raw._on_closed()  # EOF or a failed write: never http.disconnect
            return
        await super().handle(event)

    async def stream_send(self, event: StreamEvent) -> None:
        if self.raw is not None and not isinstance(event, StreamClosed):
            return  # the view's own response after a takeover is dropped
        await super().stream_send(event)

    async def _maybe_recycle(self) -> None:
        # quart-trio cancels the request nursery on http.disconnect while this runs; unshielded,
        # the socket of a "Connection: close" request is never closed (stack notes, §1).
        with trio.CancelScope(shield=True):
            await super()._maybe_recycle()

    async def hijack(self, scope: dict[str, Any], head: bytes | None = None) -> RawStream:
        conn = self.connection
        if self.raw is not None or not isinstance(conn, h11.Connection):
            raise Unavailable("this connection has already been taken over")
        if conn.their_state not in (h11.DONE, h11._state.MIGHT_SWITCH_PROTOCOL):
            raise Unavailable("the request body must be read before the connection is hijacked")
        data, closed = conn.trailing_data
        self.raw = RawStream(self, data, closed)
        self.raw.plain_socket = _plain_socket(self.send)
        self.connection = self.raw._conn  # type: ignore[assignment]
        if head is None:
            head = response_head(_wants_upgrade(scope["headers"]))
        await self.send(RawData(data=head))
        await self.can_read.set()
        return self.raw


def install() -> None:
    """Make hypercorn build HijackH11Protocol for HTTP/1.x connections (call before serving).

    Also lets hypercorn read up to 1 MiB per receive (its default is 64 KiB): image loads and
    build contexts then cost a sixteenth of the trips through h11 and the ASGI queue.
    """
    hypercorn.protocol.H11Protocol = HijackH11Protocol  # type: ignore[attr-defined]
    hypercorn.trio.tcp_server.MAX_RECV = RECEIVE_BYTES


def _plain_socket(send: Any) -> Any:
    """The connection's trio socket when it is not TLS (``send`` is TCPServer.protocol_send)."""
    stream = getattr(getattr(send, "__self__", None), "stream", None)
    return getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None


async def hijack(request: Any, head: bytes | None = None) -> RawStream:
    """Take over the current request's connection (after reading its body).

    ``head`` replaces the raw-stream response head (a view that streams an ordinary response
    itself, such as ``docker save``, writes a 200 with its own headers).

    With the raw-stream head, returns once the client has read it (at most a second later).

    Cancellation: a checkpoint. If cancelled before the head is written nothing was sent; after
    it, the connection is closed when the view returns.
    """
    await request.get_data()
    ext = request.scope.get("extensions", {}).get(EXTENSION)
    if ext is None:
        raise Unavailable("this connection cannot be hijacked (HTTP/1.1 is required)")
    raw: RawStream = await ext["hijack"](head)
    if head is None:
        await raw.until_head_read()
    return raw
