"""A minimal inotify watch of one directory, readable from trio: the wake-up of a log tail
(``logtail``) when conmon appends to its log, replaces it, or writes the exit file."""

from __future__ import annotations

import ctypes
import os

import trio

IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

_libc = ctypes.CDLL(None, use_errno=True)


class DirWatch:
    """Wakes its waiter after anything is written, created or moved into ``directory``."""

    def __init__(self, directory: str) -> None:
        fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd = fd
        mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
        if _libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")

    def drain(self) -> None:
        """Forget the events so far (what changed is read from the files themselves)."""
        while self.fd >= 0:
            try:
                if not os.read(self.fd, 65536):
                    return
            except BlockingIOError:
                return

    async def wait(self) -> None:
        """Until something happened in the directory. Cancellation: the events so far are
        forgotten all the same; nothing is left behind."""
        try:
            await trio.lowlevel.wait_readable(self.fd)
        finally:
            self.drain()

    def close(self) -> None:
        if self.fd >= 0:
            trio.lowlevel.notify_closing(self.fd)
            os.close(self.fd)
            self.fd = -1
