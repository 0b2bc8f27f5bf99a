"""The deadline and the refusals of an HTTP/1.1 connection, for ``svc.api.hijack``'s protocol.

A connection whose request head is overdue is answered 408 (or closed without a word when it
never sent a byte); a refused connection (408, 413, 431, 503...) is answered outside h11 with
``Connection: close`` and lingers a moment, reading and dropping what its client still sends,
before it is closed.
"""

from __future__ import annotations

import contextlib
import math
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.events import Closed, Event, RawData

from svc.api import limits


class Refusals:
    """Mixin of ``HijackH11Protocol``: the connection's deadline and its refusals."""

    send: Callable[[Event], Awaitable[None]]
    guard: limits.HeadGuard
    raw: Any
    _refused_at: float | None
    _discard_since: float | None
    task_group: Any
    context: Any  # hypercorn's worker context, with svc's ``clock`` (``serving.ServerContext``)
    clock_slot: int | None = None  # where the clock has the connection filed

    async def _refuse(self, status: int) -> None:
        """Answer ``status`` with ``Connection: close`` outside h11, stop writing, and read
        and drop what the client still sends for a moment (closing at once with unread bytes
        would reset the connection before the client reads the answer)."""
        if self._refused_at is not None:
            return
        self._refused_at = trio.current_time()
        reason = limits.REASONS.get(status, "Error")
        body = f"{status} {reason}\n".encode()
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        await self.send(RawData(data=head + body))
        sock = plain_socket(self.send)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        self.rearm()

    _ended = False  # its task group has ended (``end``)

    def on_deadline(self) -> None:
        """The clock's call (``svc.api.clock``): act in the connection's task group."""
        if self._ended:
            return
        # RuntimeError: its task group is closing; AttributeError: it has closed (hypercorn's
        # drops its nursery) and the server has yet to say so. Either way it is going.
        with contextlib.suppress(RuntimeError, AttributeError):
            self.task_group.spawn(self._on_deadline)

    def rearm(self) -> None:
        """File the connection with the clock under its deadline as it is now."""
        if self._ended:
            return
        self.context.clock.arm(self, self.deadline())

    def end(self) -> None:
        """The connection's task group has ended (its server says so): nothing of it is due
        any more, and whatever would file it again later (a stream's cut-off after its
        close, say) files nothing."""
        self._ended = True
        self.context.clock.disarm(self)

    def deadline(self) -> float:
        """When the connection is due to be refused or closed (``inf``: not at all)."""
        if self._refused_at is not None:
            return self._refused_at + limits.LINGER_SECONDS
        if self._discard_since is not None:
            return self._discard_since + limits.LINGER_SECONDS
        if self.raw is not None:
            return float(self.raw.abort_at)
        if self.guard.started is not None:
            return self.guard.started + limits.HEAD_TIMEOUT
        return math.inf

    async def _on_deadline(self) -> None:
        """Refuse a head that is overdue (408, or a silent close for a new connection that
        never sent a byte); end a refused connection's linger."""
        if trio.current_time() < self.deadline():  # moved on since the clock looked
            self.rearm()
            return
        if self.raw is not None and self._refused_at is None and self._discard_since is None:
            self.raw.abort()  # (``RawStream.abort_after``)
            return
        if self._refused_at is not None or self._discard_since is not None \
                or self.guard.size == 0:  # (a connection that never sent a request)
            await self.send(Closed())
            return
        await self._refuse(408)


def plain_socket(send: Any) -> Any:
    """The connection's trio socket when it is not TLS (``send`` is TCPServer.protocol_send)."""
    stream = getattr(getattr(send, "__self__", None), "stream", None)
    return getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
