"""Sockets waited on together: an epoll set of our own, and one task that waits on it.

A task per socket costs a trio task, its scope and a registration in trio's own epoll each
time it waits. Sockets that only need one callback when they become readable (a client that
went, a client's first bytes) are put in one epoll set instead, and one task waits on that
set's descriptor through trio; each ready socket's callback runs in that task, synchronously.
Used by ``svc.api.hangups`` and ``svc.api.arrivals``.
"""

from __future__ import annotations

import select

import trio


class EpollSet:
    """The set (while ``run`` runs) and its task; subclasses say what a ready socket means."""

    _epoll: select.epoll | None = None

    @property
    def running(self) -> bool:
        return self._epoll is not None

    async def run(self) -> None:
        """Wait until cancelled; then ``_ended`` (the set still open), and the set closes."""
        self._epoll = epoll = select.epoll()
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                for fd, _ in epoll.poll(0):
                    self._ready(fd)
        finally:
            self._ended()
            self._epoll = None
            epoll.close()

    def _ready(self, fd: int) -> None:
        """``fd`` is readable (or hung up): no checkpoint, and it must not raise."""
        raise NotImplementedError

    def _ended(self) -> None:
        """The task is ending (cancelled)."""
