"""The clock and the refusals of an HTTP/1.1 connection, for ``svc.api.hijack``'s protocol.

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
    """Mixin of ``HijackH11Protocol``: the connection's clock and its refusals."""

    send: Callable[[Event], Awaitable[None]]
    guard: limits.HeadGuard
    raw: Any
    _refused_at: float | None
    _discard_since: float | None
    _watch_scope: trio.CancelScope
    _clock: trio.CancelScope

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
        self._rearm()

    async def _watch(self) -> None:
        """The connection's clock: refuses a head that is overdue (408, or a silent close for
        a new connection that never sent a byte) and ends a refused connection's linger.

        It sleeps under a cancel scope whose deadline ``_rearm`` moves as the connection's
        state changes: no task switch per request."""
        with self._watch_scope:
            while True:
                with trio.move_on_at(self._deadline()) as self._clock:
                    await trio.sleep_forever()
                if trio.current_time() >= self._deadline():  # (not moved on meanwhile)
                    await self._on_deadline()

    def _rearm(self) -> None:
        self._clock.deadline = self._deadline()

    def _deadline(self) -> float:
        if self._refused_at is not None:
            return self._refused_at + limits.LINGER_SECONDS
        if self._discard_since is not None:
            return self._discard_since + limits.LINGER_SECONDS
        if self.raw is None and self.guard.started is not None:
            return self.guard.started + limits.HEAD_TIMEOUT
        return math.inf

    async def _on_deadline(self) -> None:
        if self._refused_at is not None or self._discard_since is not None:
            await self.send(Closed())
            await trio.sleep_forever()  # until handle(Closed) cancels the watch
        if self.guard.size == 0:  # a connection that never sent a request
            await self.send(Closed())
            await trio.sleep_forever()
        await self._refuse(408)



def plain_socket(send: Any) -> Any:
    """The connection's trio socket when it is not TLS (``send`` is TCPServer.protocol_send)."""
    stream = getattr(getattr(send, "__self__", None), "stream", None)
    return getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
