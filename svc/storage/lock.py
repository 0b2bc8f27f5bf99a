"""An exclusive lock on the daemon's root, so two daemons never share (and corrupt) one state.

A POSIX record lock (``fcntl(F_SETLK)``), not ``flock``: a record lock belongs to the process,
is never inherited by a child and dies with the process, whereas an ``flock`` lives as long as
any descriptor of the open file does, so a forked child that inherited it would keep the root
locked after the daemon died and every restart would be refused.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path


class RootInUse(Exception):
    pass


class RootLock:
    """Held from ``acquire`` until ``release`` or the process's exit."""

    def __init__(self, root: Path) -> None:
        self.path = root / "svc.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise RootInUse(f"another svcd is already using {self.path.parent}") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
