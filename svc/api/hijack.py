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

``POST /build`` with a body on a plain socket gets its body from the socket instead of from
h11 (``svc.api.rawbody``, the extension's ``body``): h11 parses the head only; the response
goes out through h11 as usual, with ``Connection: close``.

Everything else (and websockets) is served by hypercorn unchanged.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import h11
import hypercorn.protocol
import hypercorn.trio.tcp_server
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.events import Response, StreamClosed
from hypercorn.protocol.h11 import H11Protocol

from svc.api import accepting, limits, serving
from svc.api.fastpath import PHRASES, PlainRoutes
from svc.api.heads import raw_stream_head, wants_upgrade
from svc.api.plainstream import PlainStream, plain_stream
from svc.api.rawbody import RawBody
from svc.api.rawstream import RawStream
from svc.api.refusals import Refusals, plain_socket
from svc.errors import Unavailable

EXTENSION = "svc.hijack"
RECEIVE_BYTES = 1 << 20
# the requests whose body is read from the socket by their view (``RawBody``)
RAW_BODY_TARGET = re.compile(rb"(/v[0-9]+(\.[0-9]+)*)?/(build|images/load)(\?.*)?")


class _HijackTaskGroup:
    """Wraps the connection's task group to add the hijack extension to HTTP scopes."""

    def __init__(self, inner: Any, protocol: HijackH11Protocol) -> None:
        self._inner = inner
        self._protocol = protocol

    async def spawn_app(self, app: Any, config: Any, scope: dict[str, Any],
                        send: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        if scope.get("type") == "http":
            scope["extensions"][EXTENSION] = {"hijack": partial(self._protocol.hijack, scope),
                                              "body": self._protocol.raw_body,
                                              "connection": self._protocol}
        elif scope.get("type") == "websocket":  # (its peer, for authorization: svc.api.authz)
            scope["extensions"][EXTENSION] = {"connection": self._protocol}
        result: Callable[..., Awaitable[None]] = await self._inner.spawn_app(
            app, config, scope, send)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _has_length(headers: Any) -> bool:
    return any(name == b"content-length" for name, _ in headers)


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _BodyTaken(Exception):
    """h11 stops at a request's head: its body is the view's (``RawBody``)."""


class HijackH11Protocol(Refusals, H11Protocol):
    """hypercorn's HTTP/1.1 protocol, able to hand a request's connection to its view, and
    holding request heads to ``svc.api.limits``."""

    max_connections = 1 << 30  # set by install()
    plain: PlainRoutes | None = None  # set by install()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task_group = _HijackTaskGroup(self.task_group, self)
        self.raw: RawStream | None = None
        self.raw_body: RawBody | None = None
        self.guard = limits.HeadGuard()
        self._refused_at: float | None = None
        self._discard_since: float | None = None  # an unread body being dropped
        self._drained = 0
        self._held_head = b""  # a response head waiting for its body (``_send_h11_event``)

    async def initiate(self) -> None:
        if accepting.OPEN.value > HijackH11Protocol.max_connections:  # this one is counted
            await self._refuse(503)
            await self.send(Closed())
            return
        opened = getattr(getattr(self.send, "__self__", None), "opened_at", None)
        self.guard.open(trio.current_time() if opened is None else opened)
        self.rearm()

    async def handle(self, event: Event) -> None:
        if isinstance(event, Closed):
            self.context.clock.disarm(self)
        if self._discard_since is not None and isinstance(event, RawData):
            await self._discard(event.data)
            return
        if self._refused_at is not None:  # the rest of a refused request is dropped
            if isinstance(event, RawData):
                self._drained += len(event.data)
                if not event.data or self._drained > limits.LINGER_BYTES:
                    await self.send(Closed())
            return
        if self.raw is not None and isinstance(event, Closed):
            self.raw._on_closed()  # EOF or a failed write: never http.disconnect
            return
        if self.raw_body is not None and isinstance(event, RawData):
            # the body's: waits while the view reads the socket itself; after the body,
            # bytes are dropped (the connection closes after the response)
            await self.raw_body.feed(event.data)
            return
        if self.raw_body is not None and isinstance(event, Closed):
            self.raw_body.release()
        conn = self.connection
        if isinstance(event, RawData) and isinstance(conn, h11.Connection) \
                and conn.their_state is h11.IDLE:
            status = self.guard.on_data(event.data, trio.current_time())
            self.rearm()
            if status is not None:
                await self._refuse(status)
                return
            if self.guard.complete and await self._quick(event.data, conn):
                return
        try:
            await super().handle(event)
        except _Refused as refused:
            await self._refuse(refused.status)
            return
        except _BodyTaken:
            # The head is done: its timeout must not cut the body's upload short (a load of
            # gigabytes takes minutes). Nothing is due while the view reads the body.
            self.guard.head_done()
            self.rearm()
            return
        conn = self.connection
        parsed = not isinstance(conn, h11.Connection) or conn.their_state is not h11.IDLE
        if parsed and self.guard.started is not None:
            self.guard.head_done()
            self.rearm()

    async def _quick(self, data: bytes, conn: h11.Connection) -> bool:
        """Answer a simple request of a plain route without h11 (``PlainRoutes.quick``); h11
        stays idle for the next request. False: h11 takes it as usual."""
        plain = HijackH11Protocol.plain
        if plain is None or conn.our_state is not h11.IDLE or conn.trailing_data[0] \
                or self.context.terminated.is_set():
            return False
        date = self.config.response_headers("h11")[0][1]
        reply = plain.quick(data, date)
        if reply is None:
            return False
        self.guard.head_done()
        self.rearm()
        if reply.stream is not None:  # taken over at once: h11 never saw the request
            await self.send(Updated(idle=False))
            PlainStream(self, b"GET", reply).start(await self.hijack({"headers": []}, b""))
            return True
        await self.send(RawData(data=reply.wire))
        return True

    async def _create_stream(self, request: h11.Request) -> None:
        plain = HijackH11Protocol.plain
        if plain is not None and isinstance(self.connection, h11.Connection):
            stream = plain_stream(self, plain, request)
            if stream is not None:
                # (answered, and h11 idle again, before ``handle`` could see the head end)
                self.guard.head_done()
                self.rearm()
                self.stream = stream  # type: ignore[assignment]
                self.keep_alive_requests += isinstance(stream, PlainStream)  # (or when served)
                return
        body = self._raw_body_for(request)
        self.raw_body = body
        await super()._create_stream(request)
        if body is not None:
            if self.connection.they_are_waiting_for_100_continue:
                await self._send_h11_event(h11.InformationalResponse(
                    status_code=100, headers=self.config.response_headers("h11")))
            raise _BodyTaken

    def _raw_body_for(self, request: h11.Request) -> RawBody | None:
        """A ``RawBody`` for a ``POST /build`` or ``/images/load`` with a body on a plain
        socket, else None."""
        if request.method != b"POST" or not RAW_BODY_TARGET.fullmatch(request.target):
            return None
        sock = plain_socket(self.send)
        conn = self.connection
        if sock is None or not isinstance(conn, h11.Connection):
            return None
        length: int | None = 0
        for name, value in request.headers:
            if name == b"transfer-encoding" and value.lower() == b"chunked":
                length = None
            elif name == b"content-length" and length is not None:
                length = int(value)  # h11 checked it
        if length == 0:
            return None
        data, closed = conn.trailing_data
        return RawBody(length, bytes(data), sock, eof=closed)

    async def _check_protocol(self, event: h11.Request) -> None:
        # No HTTP/2 here (hijacking is HTTP/1.1): the prior-knowledge preface gets a 505, an
        # h2c upgrade is ignored and the request served as HTTP/1.1.
        if event.method == b"PRI" and event.target == b"*":
            raise _Refused(505)

    async def stream_send(self, event: StreamEvent) -> None:
        if self.raw is not None and not isinstance(event, StreamClosed):
            return  # the view's own response after a takeover is dropped
        if self.raw_body is not None and self.raw_body.touched \
                and isinstance(event, Response) and event.status_code >= 200:
            # h11 never saw the body read by the view: no next request on this connection
            event = Response(stream_id=event.stream_id, status_code=event.status_code,
                             headers=[*event.headers, (b"connection", b"close")])
        await super().stream_send(event)

    async def _send_h11_event(self, event: Any) -> None:
        """Status lines carry their reason phrase (``HTTP/1.1 404 Not Found``), as dockerd's
        do; hypercorn sends none, and some clients print or match it."""
        if isinstance(event, h11.Response | h11.InformationalResponse) and not event.reason:
            with contextlib.suppress(ValueError):
                event = type(event)(status_code=event.status_code, headers=event.headers,
                                    http_version=event.http_version,
                                    reason=PHRASES.get(event.status_code, b""))
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            if self.connection.their_state != h11.ERROR:
                raise
            return
        if data is None:
            return
        if isinstance(event, h11.Response) and _has_length(event.headers):
            # A head with a Content-Length goes out with its body's first bytes: one write
            # per answer instead of two (a stream's head, without one, is never held).
            self._held_head = data
            return
        if self._held_head:
            data, self._held_head = self._held_head + data, b""
        if data:
            await self.send(RawData(data=data))

    async def _maybe_recycle(self) -> None:
        # quart-trio cancels the request nursery on http.disconnect while this runs; unshielded,
        # the socket of a "Connection: close" request is never closed (stack notes, §1).
        with trio.CancelScope(shield=True):
            if self.raw is not None:  # the hijacking view is done: the connection closes
                self.context.clock.disarm(self)
            body, self.raw_body = self.raw_body, None
            if body is not None:
                unread = body.take_back()
                if unread is None:  # h11 never saw the body the view read: the end
                    body.release()
                    await super()._maybe_recycle()
                    return
                if unread and isinstance(self.connection, h11.Connection):
                    self.connection.receive_data(unread)  # h11 reads the body after all
            conn = self.connection
            if isinstance(conn, h11.Connection) and conn.our_state is h11.DONE \
                    and conn.their_state is h11.SEND_BODY and not self.context.terminated.is_set():
                # Answered before the body was read (a 404, a 413): read the rest and drop
                # it, then serve the next request on this connection, as Go's server does
                # (closing with bytes unread would reset the connection under the answer).
                await self._close_stream()
                self._discard_since = trio.current_time()
                self.rearm()
                if body is not None:  # the read loop goes on, into the discarding
                    body.release()
                await self._discard(b"")
                return
            if body is not None:
                body.release()
            await super()._maybe_recycle()

    async def _discard(self, data: bytes) -> None:
        """Feed the rest of an unread request body to h11 and drop it; once it has all come,
        the connection serves its next request (too much, or too slow: it is closed)."""
        conn = self.connection
        assert isinstance(conn, h11.Connection)
        if data:
            conn.receive_data(data)
            self._drained += len(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                await self.send(Closed())
                return
            if event is h11.NEED_DATA:
                if self._drained > limits.LINGER_BYTES:
                    await self.send(Closed())
                return
            if isinstance(event, (h11.ConnectionClosed, h11.EndOfMessage)) or event is h11.PAUSED:
                break
        self._discard_since = None
        self._drained = 0
        self.rearm()
        if conn.their_state is not h11.DONE:
            await self.send(Closed())
            return
        conn.start_next_cycle()
        await self.can_read.set()
        await self.send(Updated(idle=True))
        with contextlib.suppress(_BodyTaken):
            await self._handle_events()  # a request that came along with the body's end

    async def hijack(self, scope: dict[str, Any], head: bytes | None = None) -> RawStream:
        conn = self.connection
        if self.raw is not None or not isinstance(conn, h11.Connection):
            raise Unavailable("this connection has already been taken over")
        # MUST_CLOSE: the request said "Connection: close" (its body is read all the same);
        # IDLE: a plain stream taken over before h11 parsed its request (``_quick``)
        if conn.their_state not in (h11.DONE, h11.MUST_CLOSE, h11._state.MIGHT_SWITCH_PROTOCOL,
                                    h11.IDLE):
            raise Unavailable("the request body must be read before the connection is hijacked")
        data, closed = conn.trailing_data
        self.raw = RawStream(self, data, closed)
        self.raw.plain_socket = plain_socket(self.send)
        self.connection = self.raw._conn  # type: ignore[assignment]
        if head is None:
            head = raw_stream_head(wants_upgrade(scope["headers"]))
        self.raw.head = head
        await self.send(RawData(data=head))
        await self.can_read.set()
        return self.raw


def install(plain: PlainRoutes | None = None) -> None:
    """Make hypercorn build HijackH11Protocol for HTTP/1.x connections (call before serving),
    answering ``plain``'s routes directly (``svc.api.fastpath``; None: every request goes
    through the app).

    Also lets hypercorn read up to 1 MiB per receive (its default is 64 KiB): image loads and
    build contexts then cost a sixteenth of the trips through h11 and the ASGI queue.
    """
    hypercorn.protocol.H11Protocol = HijackH11Protocol  # type: ignore[attr-defined]
    hypercorn.trio.tcp_server.MAX_RECV = RECEIVE_BYTES
    HijackH11Protocol.max_connections = serving.Connection.max_connections = \
        limits.max_connections()
    HijackH11Protocol.plain = serving.Connection.plain = plain


def raw_body(request: Any) -> RawBody | None:
    """The request's body as the socket gives it, when the protocol kept it from h11
    (``POST /build`` on a plain socket: ``svc.api.rawbody``); else None."""
    ext = request.scope.get("extensions", {}).get(EXTENSION)
    return ext.get("body") if ext else None


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
