"""The accept loop: connections taken from the listening sockets, each served by a task.

**Many at once.** A plain (not TLS) listener accepts every connection waiting in a row
(``ACCEPT_BATCH`` at most) once it is readable, instead of paying trio's checkpoint for each
accept: a client that opens fifty event streams at once gets them all in one round.

**First bytes at accept.** A plain connection's first bytes are read as it is accepted (a
client sends its request right after connecting). A live events stream asked for there is
opened without any task (``svc.api.taskless``); every other connection's task starts from
the bytes read. A connection whose bytes have not come yet waits for them with no task
(``svc.api.arrivals``), and goes on the same way when they come.

**Running out of descriptors is survived.** trio's own accept loop logs a traceback ten times
a second while ``accept`` fails with EMFILE and answers nothing. Here one descriptor is kept in
reserve: with none left the loop lets the reserve go, accepts the waiting connection, answers
``503`` and closes it, takes the reserve back, and logs once that new connections are refused
(and once when they are accepted again). Open connections go on.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio
from hypercorn.config import Config, Sockets

if TYPE_CHECKING:
    from svc.api.serving import Connection

log = logging.getLogger("svc.server")


class _Count:
    """The connections open now (from accept to the socket's close)."""

    def __init__(self) -> None:
        self.value = 0
        self.connections: set[Connection] = set()


OPEN = _Count()

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RETRY_SECONDS = 0.1  # while no descriptor can be had even for a refusal
# accept's errors that concern only the connection being taken (trio's SocketListener skips
# the same): a client that reset its connection before it was accepted must not stop the loop
IGNORABLE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ECONNABORTED", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN", "ENONET", "EHOSTUNREACH",
    "EOPNOTSUPP", "ENETUNREACH", "ENOSR", "ESOCKTNOSUPPORT", "EPROTONOSUPPORT", "ETIMEDOUT",
    "ECONNRESET", "EPERM") if hasattr(errno, name))
ACCEPT_BATCH = 64  # connections accepted in a row before others get the loop
FIRST_READ = 64 * 1024  # a connection's first read, at accept (a request head fits)
REPORT_SECONDS = 10.0  # how often a long shortage is reported again
_REFUSAL_BODY = b"503 Service Unavailable: out of file descriptors\n"
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_REFUSAL_BODY)
           + _REFUSAL_BODY)


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


async def _accept_one(listener: Any) -> list[Any]:
    return [await listener.accept()]


async def _accept_waiting(raw: socket.socket) -> list[socket.socket]:
    """The connections waiting on the plain listening socket ``raw`` (non-blocking, trio's),
    once there is one: accepted in a row, without trio's checkpoint per accept, and made
    non-blocking. Raises ``OSError`` only when not one could be accepted."""
    await trio.lowlevel.wait_readable(raw)
    out: list[socket.socket] = []
    for _ in range(ACCEPT_BATCH):  # (skipped connections count: the loop always ends)
        try:
            conn, _ = raw.accept()
        except BlockingIOError:
            break
        except OSError as exc:
            if exc.errno in IGNORABLE_ERRNOS:
                continue  # (that connection went before it was taken: take the next)
            if out:
                break  # (these are served; the next round raises it again)
            raise
        conn.setblocking(False)
        out.append(conn)
    return out


# handler(stream, first bytes or None if none came yet, when it was accepted if it waited)
Handler = Callable[[Any, "bytes | None", "float | None"], Awaitable[None]]
Offer = Callable[[socket.socket, bytes], bool]
OnBytes = Callable[[socket.socket, bytes, "float | None"], None]  # (socket, first, accepted at)
Park = Callable[[socket.socket, OnBytes], bool]  # ``Arrivals.wait``


async def accept_loop(listener: Any, handler: Handler, nursery: trio.Nursery,
                      raw: socket.socket | None, offer: Offer | None = None,
                      park: Park | None = None) -> None:
    """Accept connections on ``listener`` (``raw``: its socket, when it is plain) and serve
    each with ``handler(stream, first, accepted_at)`` in ``nursery``, until cancelled.

    A plain connection's first bytes are read at once and ``offer``ed first: a connection it
    takes needs no task (``svc.api.taskless``). One whose bytes have not come yet is
    ``park``ed until they come (``svc.api.arrivals``), then taken on the same way; without a
    ``park`` (or when it refuses) its task starts at once with ``first`` None."""
    plain = raw is not None
    reserve = _Reserve()

    def on_bytes(sock: socket.socket, first: bytes | None, accepted_at: float | None) -> None:
        if first == b"":  # the client went without asking anything: nothing to answer
            sock.close()
            return
        if first and offer is not None and offer(sock, first):
            return
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        nursery.start_soon(_run_handler, stream, handler, first, accepted_at)

    try:
        async with listener:
            while True:
                try:
                    if raw is None:
                        streams = await _accept_one(listener)
                    else:
                        socks = await _accept_waiting(raw)
                except OSError as exc:
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    reserve.short(exc)
                    if not await _refuse_one(listener, reserve, plain):
                        await trio.sleep(RETRY_SECONDS)
                    continue
                reserve.recovered()
                reserve.take()
                if raw is None:
                    for stream in streams:
                        nursery.start_soon(_run_handler, stream, handler, None, None)
                    continue
                for sock in socks:
                    first = read_now(sock)
                    if first is None and park is not None and park(sock, on_bytes):
                        continue
                    on_bytes(sock, first, None)
    finally:
        reserve.release()


def read_now(sock: socket.socket) -> bytes | None:
    """What the client of the non-blocking socket ``sock`` has sent so far: None when
    nothing yet, ``b""`` when it has gone (its EOF, or a reset)."""
    try:
        return os.read(sock.fileno(), FIRST_READ)
    except BlockingIOError:
        return None
    except OSError:
        return b""


async def _run_handler(stream: Any, handler: Handler, first: bytes | None,
                       accepted_at: float | None) -> None:
    try:
        await handler(stream, first, accepted_at)
    finally:
        sock = getattr(stream, "socket", None)
        if sock is None or sock.fileno() != -1:  # (the connection closed it, nearly always)
            await trio.aclose_forcefully(stream)


def listeners_of(config: Config, sockets: Sockets) -> list[tuple[Any, socket.socket | None]]:
    """The listeners of ``sockets``, each with its socket when it is plain (not TLS)."""
    listeners: list[tuple[Any, socket.socket | None]] = []
    ssl_context = config.create_ssl_context()
    for sock in sockets.secure_sockets:
        assert ssl_context is not None  # secure sockets only with a certificate
        listeners.append((trio.SSLListener(
            trio.SocketListener(trio.socket.from_stdlib_socket(sock)),
            ssl_context, https_compatible=True), None))
    for sock in sockets.insecure_sockets:
        # (trio's socket wraps ``sock`` itself, and has made it non-blocking)
        listeners.append((trio.SocketListener(trio.socket.from_stdlib_socket(sock)), sock))
    return listeners
