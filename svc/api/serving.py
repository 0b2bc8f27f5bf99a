"""The accept loop and the per-connection server svc runs hypercorn's protocol in.

hypercorn's ``worker_serve`` is replaced by ``serve`` for two reasons found in use:

- **A connection whose peer has gone must close.** hypercorn keeps an idle keep-alive
  connection's socket until its idle timer fires; svc never cuts idle connections (client
  pools break when a daemon does), so that timer never fired and every connection a client
  closed while idle (each ``docker version``) stayed open for ever. ``Connection`` has no
  timer task (``IdleFlag``): once the client's EOF (or a reset) is read and no request runs,
  the connection's task group ends and the socket is closed.
- **Running out of descriptors is survived.** trio's own accept loop logs a traceback ten
  times a second while ``accept`` fails with EMFILE and answers nothing. ``serve`` keeps one
  descriptor in reserve: with none left it lets the reserve go, accepts the waiting
  connection, answers ``503`` and closes it, takes the reserve back, and logs once that new
  connections are refused (and once when they are accepted again). Open connections go on.

``OPEN`` counts the connections whose sockets are open, from accept to close; the protocol
refuses one more than ``limits.max_connections()`` with 503 (``svc.api.hijack``).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

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

from svc.api.clock import ConnectionClock

log = logging.getLogger("svc.server")

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RETRY_SECONDS = 0.1  # while no descriptor can be had even for a refusal
REPORT_SECONDS = 10.0  # how often a long shortage is reported again
_REFUSAL_BODY = b"503 Service Unavailable: out of file descriptors\n"
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_REFUSAL_BODY)
           + _REFUSAL_BODY)


class _Count:
    """The connections open now (from accept to the socket's close)."""

    def __init__(self) -> None:
        self.value = 0
        self.connections: set[Connection] = set()


OPEN = _Count()


class ServerContext(WorkerContext):
    """hypercorn's worker context, with the clock of the server's connections."""

    def __init__(self) -> None:
        super().__init__(None)
        self.clock = ConnectionClock()


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
    _fd = -1  # a plain socket's descriptor (``_run_plain``), written directly when it can be

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.idle_flag = IdleFlag()
        self.idle_task = self.idle_flag  # type: ignore[assignment]  # (hypercorn's name)

    async def run(self) -> None:
        OPEN.value += 1
        OPEN.connections.add(self)
        try:
            if isinstance(self.stream, trio.SocketStream):
                await self._run_plain()
            else:
                await super().run()  # TLS: hypercorn's way, handshake first
        finally:
            OPEN.value -= 1
            OPEN.connections.discard(self)

    async def _run_plain(self) -> None:
        """hypercorn's ``run`` for a plain socket, without trying a TLS handshake first (it
        fails with AttributeError under a deadline of its own: 10 % of a connection's CPU)."""
        sock = self.stream.socket
        self._fd = sock.fileno()
        try:
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
                await self._read_data()
        except OSError:
            pass
        finally:
            await self._close()

    async def close_if_idle(self) -> None:
        """At shutdown: close the connection if it is between requests."""
        if self.idle_flag.idle and not self._peer_gone:
            with trio.CancelScope(shield=True):
                await self._initiate_server_close()

    async def _read_data(self) -> None:
        """hypercorn's read loop, without a cancel scope per read (svc sets no read timeout)."""
        try:
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
            if self._fd >= 0 and not self.send_lock.locked():
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
        await super().protocol_send(event)


class _Reserve:
    """One descriptor held back so that a connection can be refused when none are left."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.refused = 0
        self.short_since: float | None = None
        self._reported = 0.0
        self.take()

    def take(self) -> None:
        if self.fd is None:
            try:
                self.fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self.fd = None

    def release(self) -> bool:
        if self.fd is None:
            return False
        os.close(self.fd)
        self.fd = None
        return True

    def short(self, exc: OSError) -> None:
        now = trio.current_time()
        if self.short_since is None:
            self.short_since = self._reported = now
            log.error("out of file descriptors (%s, %d connections open): new connections "
                      "are refused with 503 until some close; open ones are served",
                      errno.errorcode.get(exc.errno or 0, exc), OPEN.value)
        elif now - self._reported >= REPORT_SECONDS:
            self._reported = now
            log.error("still out of file descriptors: %d connections refused so far, %d open",
                      self.refused, OPEN.value)

    def recovered(self) -> None:
        if self.short_since is not None:
            log.warning("file descriptors are available again: accepting connections (%d "
                        "refused in %.1f s)", self.refused, trio.current_time() - self.short_since)
            self.short_since = None
            self.refused = 0


def _raw_socket(listener: Any) -> Any:
    inner = getattr(listener, "transport_listener", listener)  # an SSLListener's own
    return inner.socket


async def _refuse_one(listener: Any, reserve: _Reserve, plain: bool) -> bool:
    """Accept one waiting connection on the reserve descriptor, answer 503 (plain sockets)
    and close it. False when there was no reserve to spend."""
    if not reserve.release():
        return False
    try:
        with trio.move_on_after(RETRY_SECONDS):
            conn, _ = await _raw_socket(listener).accept()
            with conn:
                if plain:
                    try:
                        await conn.send(REFUSAL)  # an empty send buffer: no wait
                        conn.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
            reserve.refused += 1
    except OSError:
        pass
    finally:
        reserve.take()
    return True


async def _accept_loop(listener: Any, handler: Callable[[Any], Awaitable[None]],
                       nursery: trio.Nursery, plain: bool) -> None:
    reserve = _Reserve()
    try:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    reserve.short(exc)
                    if not await _refuse_one(listener, reserve, plain):
                        await trio.sleep(RETRY_SECONDS)
                    continue
                reserve.recovered()
                reserve.take()
                nursery.start_soon(_run_handler, stream, handler)
    finally:
        reserve.release()


async def _run_handler(stream: Any, handler: Callable[[Any], Awaitable[None]]) -> None:
    try:
        await handler(stream)
    finally:
        sock = getattr(stream, "socket", None)
        if sock is None or sock.fileno() != -1:  # (the connection closed it, nearly always)
            await trio.aclose_forcefully(stream)


def _listeners(config: Config, sockets: Sockets) -> list[tuple[Any, bool]]:
    """The listeners of ``sockets``, each with whether it is plain (not TLS)."""
    listeners: list[tuple[Any, bool]] = []
    ssl_context = config.create_ssl_context()
    for sock in sockets.secure_sockets:
        assert ssl_context is not None  # secure sockets only with a certificate
        listeners.append((trio.SSLListener(
            trio.SocketListener(trio.socket.from_stdlib_socket(sock)),
            ssl_context, https_compatible=True), False))
    for sock in sockets.insecure_sockets:
        listeners.append((trio.SocketListener(trio.socket.from_stdlib_socket(sock)), True))
    return listeners


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
            async with trio.open_nursery() as server_nursery:
                listeners = _listeners(config, sockets)
                binds = [f"{scheme}://{repr_socket_addr(sock.family, sock.getsockname())}"
                         for scheme, socks in (("https", sockets.secure_sockets),
                                               ("http", sockets.insecure_sockets))
                         for sock in socks]
                handler = partial(Connection, app, config, context,
                                  ConnectionState(lifespan_state.copy()))
                task_status.started(binds)
                try:
                    async with trio.open_nursery() as accepting:
                        for listener, plain in listeners:
                            accepting.start_soon(_accept_loop, listener, handler,
                                                 server_nursery, plain)
                        await shutdown_trigger()
                        accepting.cancel_scope.cancel()
                finally:
                    await context.terminated.set()
                    for conn in list(OPEN.connections):
                        server_nursery.start_soon(conn.close_if_idle)
                    server_nursery.cancel_scope.deadline = trio.current_time() + \
                        config.graceful_timeout
            clock_nursery.cancel_scope.cancel()  # (no connection is left to keep time for)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()

