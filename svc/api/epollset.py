"""Sockets waited on together: an epoll set of our own, and one task that waits on it.

A task per socket costs a trio task, its scope and a registration in trio's own epoll each
time it waits. Sockets that only need one callback when they become readable (a client that
went, a client's first bytes) are put in one epoll set instead, and one task waits on that
set's descriptor through trio; each ready socket's callback runs in that task, synchronously.
Used by ``svc.api.hangups`` and ``svc.api.arrivals``.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable

import trio

_EVENTS = select.EPOLLIN | select.EPOLLRDHUP


class EpollSet:
    """The set (while ``run`` runs) and its task. ``on_ready(fd)``: ``fd`` is readable or
    hung up (no checkpoint; it must not raise). ``on_end()``: the task is ending, the set
    still open."""

    def __init__(self, on_ready: Callable[[int], None], on_end: Callable[[], None]) -> None:
        self._on_ready = on_ready
        self._on_end = on_end
        self._epoll: select.epoll | None = None

    @property
    def running(self) -> bool:
        return self._epoll is not None

    def register(self, fd: int) -> None:
        """Watch the socket ``fd``. RuntimeError: the set's task is not running; OSError:
        epoll refused it."""
        if self._epoll is None:
            raise RuntimeError("the epoll set's task is not running")
        self._epoll.register(fd, _EVENTS)

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd`` (still open); nothing if it was not watched."""
        if self._epoll is not None:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)

    async def run(self) -> None:
        """Wait until cancelled; then ``on_end``, and the set closes."""
        self._epoll = epoll = select.epoll()
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                for fd, _ in epoll.poll(0):
                    self._on_ready(fd)
        finally:
            self._on_end()
            self._epoll = None
            epoll.close()
