"""Running a blocking function inside another process's network namespace, without forking.

pyroute2 reaches a namespace (``IPRoute(netns=...)``, ``netns.create_socket``) by forking a
helper child from the daemon. A fork of a threaded process copies whatever locks other threads
held at that instant and every descriptor (the root's lock among them): a child that blocks on
such a lock hangs forever and keeps the daemon's root locked after the daemon died. So svc
never forks without exec.

The network namespace is a per-thread attribute: ``setns(fd, CLONE_NEWNET)`` in one thread
moves only that thread. ``in_netns`` starts a new thread for the call, moves it, runs the
function there (a netlink or UDP socket made in it belongs to that namespace for good) and
lets the thread end: no thread of the daemon ever returns to its pool in a foreign namespace.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc: no library search

T = TypeVar("T")


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def in_netns(pid: int, fn: Callable[[], T]) -> T:
    """``fn()`` run in the network namespace of ``pid`` (blocking: call it from a worker
    thread).

    Raises:
        OSError: the namespace cannot be entered (``pid`` is gone, for one).
        Whatever ``fn`` raises.
    """
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _setns(fd)
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    try:
        thread = threading.Thread(target=run, name=f"netns-{pid}", daemon=True)
        thread.start()
        thread.join()
    finally:
        os.close(fd)
    if failure:
        raise failure[0]
    return result[0]
