"""The server: the per-connection server svc runs hypercorn's protocol in, and ``serve``.

hypercorn's ``worker_serve`` is replaced by ``serve`` for two reasons found in use:

- **A connection whose peer has gone must close.** hypercorn keeps an idle keep-alive
  connection's socket until its idle timer fires; svc never cuts idle connections (client
  pools break when a daemon does), so that timer never fired and every connection a client
  closed while idle (each ``docker version``) stayed open for ever. ``Connection`` has no
  timer task (``IdleFlag``): once the client's EOF (or a reset) is read and no request runs,
  the connection's task group ends and the socket is closed.
- **Running out of descriptors is survived** (``svc.api.accepting``).

A plain socket's connection serves a plain stream (``GET /events``) asked for by its first
bytes itself, without hypercorn's protocol (``svc.api.barestream``).

``OPEN`` counts the connections whose sockets are open, from accept to close; the protocol
refuses one more than ``limits.max_connections()`` with 503 (``svc.api.hijack``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio
from hypercorn.config import Config, Sockets
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.trio import tcp_server
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import repr_socket_addr

from svc.api import limits
from svc.api.accepting import OPEN, accept_loop, listeners_of
from svc.api.arrivals import Arrivals
from svc.api.barestream import first_bytes, serve_bare
from svc.api.clock import ConnectionClock
from svc.api.fastpath import PlainRoutes, Reply
from svc.api.hangups import HangupWatch
from svc.api.taskless import stream_opener

log = logging.getLogger("svc.server")


class ServerContext(WorkerContext):
    """hypercorn's worker context, with the clock of the server's connections."""

    def __init__(self) -> None:
        super().__init__(None)
        self.clock = ConnectionClock()
        self.hangups = HangupWatch()
        self.arrivals = Arrivals(self.clock)


class IdleFlag:
    """What hypercorn's idle timer does for svc, without a task per connection or request.

    svc never cuts idle connections, so hypercorn's timer (a task started anew after every
    response and cancelled at every request) only ever closed an idle connection when the
    server shuts down. Here ``restart`` and ``stop`` only mark the connection idle or busy,
    and ``serve`` closes the connections that are idle when it shuts down
    (``Connection.close_if_idle``); one answering a request then closes itself once it has
    answered (hypercorn's recycle sees the shutdown).
    """

    idle = False

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        self.idle = True

    async def stop(self) -> None:
        self.idle = False


class Connection(TCPServer):
    """hypercorn's TCPServer, counted, closed once its peer has gone, and without a timer
    task (``IdleFlag``)."""

    _peer_gone = False
    _counted = False  # in ``OPEN`` (from ``run``'s start until the socket's close)
    _fd = -1  # a plain socket's descriptor (``_run_plain``), written directly when it can be
    opened_at: float | None = None  # (a plain socket's: its head is due HEAD_TIMEOUT after)
    _first_read = False  # waiting for the client's first bytes (``first_bytes``)
    first: bytes | None = None  # a plain socket's first bytes, read at accept (if any came)
    accepted_at: float | None = None  # when it was accepted, if its first bytes were waited for
    plain: PlainRoutes | None = None  # set by ``svc.api.hijack.install``
    max_connections = 1 << 30  # (likewise)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.idle_flag = IdleFlag()
        self.idle_task = self.idle_flag  # type: ignore[assignment]  # (hypercorn's name)

    async def run(self) -> None:
        OPEN.value += 1
        OPEN.connections.add(self)
        self._counted = True
        try:
            if isinstance(self.stream, trio.SocketStream):
                await self._run_plain()
            else:
                await super().run()  # TLS: hypercorn's way, handshake first
        finally:
            self._uncount()
            self._end_protocol()

    def _uncount(self) -> None:
        """No longer count this connection as open (once)."""
        if self._counted:
            self._counted = False
            OPEN.value -= 1
            OPEN.connections.discard(self)

    async def _close(self) -> None:
        """hypercorn's close, with the connection no longer counted from the moment its
        socket closes: the task goes on through checkpoints after that (the read loop's end,
        the protocol's ``Closed``), and a client that saw its connection close may already
        be opening the next one, which the limit must not refuse for it."""
        with contextlib.suppress(trio.BrokenResourceError, AttributeError,
                                 trio.BusyResourceError, trio.ClosedResourceError):
            await self.stream.send_eof()  # (raises when gone already, or on TLS)
        if isinstance(self.stream, trio.SocketStream):
            self._uncount()  # (its socket closes in aclose before its first checkpoint)
        await self.stream.aclose()  # (TLS: counted until its close_notify has gone)
        self._uncount()

    def _end_protocol(self) -> None:
        """Tell the protocol its task group has ended (``Refusals.end``): the connection's
        clock must not fire for it any more, whatever filed it last."""
        protocol = getattr(getattr(self, "protocol", None), "protocol", None)
        end = getattr(protocol, "end", None)
        if end is not None:
            end()

    async def _run_plain(self) -> None:
        """hypercorn's ``run`` for a plain socket, without trying a TLS handshake first (it
        fails with AttributeError under a deadline of its own: 10 % of a connection's CPU)."""
        stream = cast(trio.SocketStream, self.stream)
        context = cast(ServerContext, self.context)
        sock = stream.socket
        self._fd = sock.fileno()
        self.opened_at = self.accepted_at if self.accepted_at is not None \
            else trio.current_time()
        try:
            first = self.first
            if first is None:  # (nothing had come when it was accepted)
                self._first_read = True
                try:
                    first = await first_bytes(stream, context.clock, limits.HEAD_TIMEOUT,
                                              tcp_server.MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    first = b""
                finally:
                    self._first_read = False
            bare = self._bare_stream(first)
            if bare is not None:  # (``svc.api.barestream``)
                streamer, head = bare.stream, bare.head
                assert streamer is not None
                await serve_bare(sock, lambda raw: streamer.run(raw, head), context.clock,
                                 context.hangups)
                return
            family = sock.family
            client = server = None
            if family in (socket.AF_INET, socket.AF_INET6):
                client = sock.getpeername()[:2]
                server = sock.getsockname()[:2]
            async with TaskGroup() as task_group:
                self._task_group = task_group
                self.protocol = ProtocolWrapper(
                    self.app, self.config, self.context, task_group,
                    ConnectionState(self.state), False, client, server, self.protocol_send,
                    "http/1.1")
                await self.protocol.initiate()
                self.idle_flag.idle = True
                await self._read_data(first)
        except OSError:
            pass
        finally:
            self._end_protocol()  # (before the close's checkpoints, where the clock may run)
            await self._close()

    def _bare_stream(self, data: bytes) -> Reply | None:
        """The plain stream ``data`` asks for, to be served bare; None: hypercorn serves
        the connection (from ``data`` on)."""
        plain = Connection.plain
        context = cast(ServerContext, self.context)
        if plain is None or not data or OPEN.value > Connection.max_connections \
                or context.terminated.is_set() or not context.hangups.running:
            return None
        return plain.stream(data)

    async def close_if_idle(self) -> None:
        """At shutdown: close the connection if it is between requests (or before its
        first: its first read ends as if the client had gone)."""
        if self._first_read:
            with contextlib.suppress(OSError):
                self.stream.socket.shutdown(socket.SHUT_RD)
            return
        if self.idle_flag.idle and not self._peer_gone:
            with trio.CancelScope(shield=True):
                await self._initiate_server_close()

    async def _read_data(self, first: bytes | None = None) -> None:
        """hypercorn's read loop, without a cancel scope per read (svc sets no read timeout),
        from the ``first`` bytes read if any (``b""``: the client went)."""
        try:
            if first is not None:
                await self.protocol.handle(RawData(first))
                if not first:
                    await self.protocol.handle(Closed())
                    return
            while True:
                try:
                    data = await self.stream.receive_some(tcp_server.MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
                await self.protocol.handle(RawData(bytes(data)))
                if not data:
                    break
            await self.protocol.handle(Closed())
        finally:
            # Nothing more can arrive: an idle connection has nothing left to wait for. A
            # request still running (a hijacked stream whose client half-closed) keeps the
            # task group, and so the socket, until it ends.
            self._peer_gone = True

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Updated):
            self.idle_flag.idle = event.idle
            return
        if isinstance(event, RawData):
            if not event.data:
                return  # (an end of message that needs no bytes: a Content-Length body's)
            if self._fd >= 0 and not self.send_lock.locked() \
                    and self.stream.socket.fileno() == self._fd:  # (-1 once it is closed)
                # The socket takes the whole answer at once, nearly always: write it without
                # the lock, the shielded scope and trio's send (a third of a small answer's CPU).
                data = event.data
                try:
                    done = os.write(self._fd, data)
                except BlockingIOError:
                    done = 0
                except OSError:  # (the way below finds out and reports it as hypercorn does)
                    done = 0
                if done == len(data):
                    return
                event = RawData(data=data[done:], address=event.address)
            try:
                await super().protocol_send(event)
            except trio.BusyResourceError:
                # Another task is closing the connection (hypercorn's ``_close`` holds the
                # stream's sender in ``send_eof`` across a checkpoint, outside the send lock):
                # these bytes are for a connection that is going. (A client that went in the
                # middle of its request's body: the view's answer closes the connection while
                # the read loop answers the broken request.)
                await self.protocol.handle(Closed())
            return
        await super().protocol_send(event)


async def serve(app: AppWrapper, config: Config, *, sockets: Sockets,
                shutdown_trigger: Callable[[], Awaitable[Any]],
                task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``sockets`` until ``shutdown_trigger`` returns; then let in-flight
    requests finish for ``config.graceful_timeout`` seconds and cancel the rest."""
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = ServerContext()
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as clock_nursery:
            clock_nursery.start_soon(context.clock.run)
            clock_nursery.start_soon(context.hangups.run)
            clock_nursery.start_soon(context.arrivals.run)
            async with trio.open_nursery() as server_nursery:
                listeners = listeners_of(config, sockets)
                binds = [f"{scheme}://{repr_socket_addr(sock.family, sock.getsockname())}"
                         for scheme, socks in (("https", sockets.secure_sockets),
                                               ("http", sockets.insecure_sockets))
                         for sock in socks]
                state = ConnectionState(lifespan_state.copy())

                async def handler(stream: Any, first: bytes | None,
                                  accepted_at: float | None) -> None:
                    conn = Connection(app, config, context, state, stream)
                    conn.first = first
                    conn.accepted_at = accepted_at
                    await conn.run()

                opener = stream_opener(Connection.plain, context, server_nursery,
                                       Connection.max_connections)
                task_status.started(binds)
                try:
                    async with trio.open_nursery() as accepting:
                        for listener, raw in listeners:
                            accepting.start_soon(accept_loop, listener, handler,
                                                 server_nursery, raw,
                                                 None if opener is None else opener.offer,
                                                 context.arrivals.wait)
                        await shutdown_trigger()
                        accepting.cancel_scope.cancel()
                finally:
                    await context.terminated.set()
                    context.arrivals.close_all()  # (nothing was asked on them)
                    for conn in list(OPEN.connections):
                        server_nursery.start_soon(conn.close_if_idle)
                    server_nursery.cancel_scope.deadline = trio.current_time() + \
                        config.graceful_timeout
            if opener is not None:
                opener.close_all()
            clock_nursery.cancel_scope.cancel()  # (no connection is left to keep time for)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()

