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

import contextlib
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
    return _run_in(f"/proc/{pid}/ns/net", fn, str(pid))


NETNS_DIR = "/run/netns"
MS_BIND = 0x1000
MNT_DETACH = 0x2


def named_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def in_named(name: str, fn: Callable[[], T]) -> T:
    """``fn()`` run in the named network namespace ``name`` (``/run/netns/<name>``, as
    ``ip netns`` names them), as ``in_netns`` does for a process's."""
    return _run_in(named_path(name), fn, name)


def create_named(name: str) -> None:
    """A new, empty network namespace bound at ``/run/netns/<name>`` (as ``ip netns add``,
    without forking: a thread unshares its network namespace and bind-mounts it)."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    path = named_path(name)
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    os.close(fd)

    def bind() -> None:
        if _libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
        own = f"/proc/self/task/{threading.get_native_id()}/ns/net"
        if _libc.mount(own.encode(), path.encode(), None, MS_BIND, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"bind-mounting the namespace at {path}: {os.strerror(err)}")

    try:
        _in_new_thread(bind, f"netns-new-{name}")
    except BaseException:
        os.unlink(path)
        raise


def remove_named(name: str) -> None:
    """Unmount and remove ``/run/netns/<name>``: the namespace goes once nothing is in it."""
    path = named_path(name)
    _libc.umount2(path.encode(), MNT_DETACH)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _run_in(path: str, fn: Callable[[], T], label: str) -> T:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def entered() -> T:
        _setns(fd)
        return fn()

    try:
        return _in_new_thread(entered, f"netns-{label}")
    finally:
        os.close(fd)


def _in_new_thread(fn: Callable[[], T], label: str) -> T:
    """``fn()`` in a thread of its own that ends with it (what it does to its namespaces
    goes with it); its result or exception handed to the caller's thread."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=label, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]
