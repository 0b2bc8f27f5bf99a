"""An exclusive lock on the daemon's root, so two daemons never share (and corrupt) one state."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class RootInUse(Exception):
    pass


class RootLock:
    """Held from ``acquire`` until ``release`` or process exit (the kernel drops flock locks)."""

    def __init__(self, root: Path) -> None:
        self.path = root / "svc.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RootInUse(f"another svcd is already using {self.path.parent}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
