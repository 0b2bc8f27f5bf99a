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

A container's own network namespace is made by svc before the runtime runs (``create_netns``,
as dockerd's libnetwork does): a new thread unshares one and bind-mounts it on a file, which
the OCI spec names. Its network is wired there while the bundle is written, so the runtime
can start the process at once (``runc run --detach``, no create/start pair), and the
process finds its interfaces up. ``delete_netns`` unmounts and removes the file; the
namespace itself goes when its last process does.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc: no library search

T = TypeVar("T")
NetnsRef = int | Path  # a process (its namespace) or a namespace file


def _ns_path(ns: NetnsRef) -> str:
    return os.fspath(ns) if isinstance(ns, Path) else f"/proc/{ns}/ns/net"


def open_netns(ns: NetnsRef) -> int:
    """A descriptor of the network namespace ``ns`` (the caller closes it)."""
    return os.open(_ns_path(ns), os.O_RDONLY | os.O_CLOEXEC)


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def create_netns(path: Path) -> None:
    """A new network namespace (only ``lo``, down) kept alive by a bind mount on ``path``, a
    file made here (blocking). Raises OSError, leaving no file behind."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    os.close(fd)
    failure: list[BaseException] = []

    def run() -> None:  # a thread of its own: it ends in the new namespace
        if _libc.unshare(CLONE_NEWNET) != 0:
            failure.append(_errno_error("unshare(CLONE_NEWNET)"))
        elif _libc.mount(b"/proc/thread-self/ns/net", os.fsencode(path), None, MS_BIND,
                         None) != 0:
            failure.append(_errno_error(f"bind-mounting the namespace on {path}"))

    thread = threading.Thread(target=run, name="netns-new", daemon=True)
    thread.start()
    thread.join()
    if failure:
        path.unlink(missing_ok=True)
        raise failure[0]


def delete_netns(path: Path) -> bool:
    """Unmount and remove a namespace file (blocking); False if there was none. The
    namespace lives on while a process is in it."""
    if not os.path.lexists(path):
        return False
    if _libc.umount2(os.fsencode(path), MNT_DETACH) != 0 and ctypes.get_errno() not in (
            errno.EINVAL, errno.ENOENT):  # EINVAL: not mounted (a crash before the mount)
        raise _errno_error(f"unmounting {path}")
    path.unlink(missing_ok=True)
    return True


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def in_netns(ns: NetnsRef, fn: Callable[[], T]) -> T:
    """``fn()`` run in the network namespace ``ns`` (of a process, or a namespace file;
    blocking: call it from a worker thread).

    Raises:
        OSError: the namespace cannot be entered (the process is gone, for one).
        Whatever ``fn`` raises.
    """
    fd = open_netns(ns)
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _setns(fd)
            result.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    try:
        thread = threading.Thread(target=run, name="netns", daemon=True)
        thread.start()
        thread.join()
    finally:
        os.close(fd)
    if failure:
        raise failure[0]
    return result[0]
