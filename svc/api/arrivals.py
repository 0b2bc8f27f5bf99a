"""Connections accepted before their first bytes came: waited for together, with no task each.

A client sends its request right after it connects, and the accept loop reads it there
(``svc.api.accepting``). Under CPU contention the daemon often takes the connection before
the client has written: the accept's wake-up puts the event loop's thread (on its short
slice, ``svc.sched``) ahead of the client on the client's own core. Under two CPU burners two
accepts in three found nothing to read. Such a connection used to get its whole task at once
(hypercorn's connection, a first read armed with the head deadline, and for an events stream
a bare stream with a task of its own): twice the daemon's CPU of a stream opened at accept.

Here it waits in an epoll set of our own, as the hangup watch's sockets do, and one task
waits on that set's descriptor through trio. When its bytes come, the accept loop's own
``on_bytes`` takes it on exactly as if they had come at accept (offered to the taskless
opener, else served by a task from those bytes).

- While it waits it counts as open (``OPEN``), so the connection limit counts it.
- Its head is due ``limits.HEAD_TIMEOUT`` after the accept, kept by the connection clock;
  when that passes with nothing sent, the socket is closed without a word, as a connection's
  first read did before.
- ``close_all`` (the server stopping) closes the sockets still waiting: nothing was asked on
  them. Cancellation of ``run`` does the same.
"""

from __future__ import annotations

import logging
import socket

import trio

from svc.api import limits
from svc.api.accepting import OPEN, OnBytes, read_now
from svc.api.clock import ConnectionClock
from svc.api.epollset import EpollSet

log = logging.getLogger("svc.server")


class _Waiting:
    """One connection waiting for its first bytes (the clock's ``Timed``)."""

    __slots__ = ("sock", "accepted_at", "clock_slot", "_owner")

    def __init__(self, owner: Arrivals, sock: socket.socket, accepted_at: float) -> None:
        self._owner = owner
        self.sock = sock
        self.accepted_at = accepted_at
        self.clock_slot: int | None = None

    def deadline(self) -> float:
        return self.accepted_at + limits.HEAD_TIMEOUT

    def on_deadline(self) -> None:
        self._owner.drop(self)


class Arrivals:
    """The connections waiting for their first bytes, and the task that waits for them."""

    def __init__(self, clock: ConnectionClock) -> None:
        self._clock = clock
        self._waiting: dict[int, tuple[_Waiting, OnBytes]] = {}
        # (cancelled: nothing was asked on what still waits, so it is closed)
        self._set = EpollSet(self._ready, self.close_all)
        self.run = self._set.run  # (wait until cancelled)

    @property
    def running(self) -> bool:
        return self._set.running

    def __len__(self) -> int:
        return len(self._waiting)

    def wait(self, sock: socket.socket, on_bytes: OnBytes) -> bool:
        """Call ``on_bytes(sock, first, accepted_at)`` once the client of the accepted,
        non-blocking ``sock`` has sent something (``first``; ``b""``: it went), from the
        watch's task (no checkpoint). False, with nothing done, when the watch is not
        running: the caller serves ``sock`` itself."""
        if not self._set.running:
            return False
        entry = _Waiting(self, sock, trio.current_time())
        fd = sock.fileno()
        try:
            self._set.register(fd)
        except OSError:
            return False
        self._waiting[fd] = (entry, on_bytes)
        OPEN.value += 1
        self._clock.arm(entry, entry.deadline())
        return True

    def drop(self, entry: _Waiting) -> None:
        """Close ``entry``'s socket: its head is overdue, or the server is stopping."""
        found = self._waiting.get(entry.sock.fileno())
        if found is not None and found[0] is entry:
            self._take(entry.sock.fileno())
            entry.sock.close()

    def close_all(self) -> None:
        for entry, _ in list(self._waiting.values()):
            self.drop(entry)

    def _take(self, fd: int) -> tuple[_Waiting, OnBytes] | None:
        """Stop waiting for ``fd`` (still open); None if it was not waiting."""
        found = self._waiting.pop(fd, None)
        if found is None:
            return None
        OPEN.value -= 1
        self._clock.disarm(found[0])
        self._set.unregister(fd)
        return found

    def _ready(self, fd: int) -> None:
        found = self._waiting.get(fd)
        if found is None:
            return
        entry, on_bytes = found
        first = read_now(entry.sock)  # (b"": it went, or reset)
        if first is None:
            return  # (nothing after all: it stays)
        self._take(fd)
        try:
            on_bytes(entry.sock, first, entry.accepted_at)
        except Exception:  # a bug: this connection is lost, never the watch
            log.exception("taking on a connection's first bytes failed")
            entry.sock.close()
