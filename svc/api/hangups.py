"""One task that notices, for many connections at once, when their clients go.

An events stream's client sends nothing after its request, so its EOF means it has gone (as
dockerd's close notification reads it). A connection served by hypercorn learns this from its
own read loop: a task per connection, with the protocol objects around it. A bare stream
(``svc.api.barestream``) has no read loop: its socket is registered here instead, in an epoll
set of our own, and one task waits on that set's descriptor through trio. When a client
closes (or resets, or sends anything, which is read and dropped until the end), the
connection's callback runs in this task, synchronously.

Cancellation (the server's end): nothing is called any more; the sockets are their owners'
to close, and the epoll set is closed with the watch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from svc.api.epollset import EpollSet

# What a client that should send nothing may send anyway, per wakeup, before it is read again.
DROP_BYTES = 64 * 1024


class HangupWatch:
    """The sockets whose clients' going is watched, and the task that watches them."""

    def __init__(self) -> None:
        self._watched: dict[int, Callable[[], None]] = {}
        self._set = EpollSet(self._ready, self._watched.clear)
        self.run = self._set.run  # (watch until cancelled)

    @property
    def running(self) -> bool:
        return self._set.running

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, fd: int, on_gone: Callable[[], None]) -> None:
        """Call ``on_gone`` once the client of the socket ``fd`` (non-blocking) has
        half-closed or gone (no checkpoint). ``forget`` it before the socket is closed.
        RuntimeError: the watch is not running."""
        if not self._set.running:
            raise RuntimeError("the hangup watch is not running")
        self._watched[fd] = on_gone
        self._set.register(fd)

    def forget(self, fd: int) -> None:
        """Stop watching the socket ``fd`` (still open)."""
        if self._watched.pop(fd, None) is not None:
            self._set.unregister(fd)

    def _ready(self, fd: int) -> None:
        on_gone = self._watched.get(fd)
        if on_gone is None:
            return
        try:
            if os.read(fd, DROP_BYTES):  # (a socket made non-blocking by trio)
                return  # bytes, dropped (the set is level-triggered: more come next round)
        except BlockingIOError:
            return
        except OSError:
            pass  # reset: gone all the same
        self.forget(fd)
        on_gone()
