"""Crash-safe file replacement: write a temp file, fsync it, rename it over, fsync the directory.

After ``atomic_write`` returns, the new content survives a crash or SIGKILL; before it returns, a
reader sees either the old file or the new one, never a mix. A temp file left by a crash is named
``.<name>.tmp-*`` and is removed by ``remove_stale_temps``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path

TEMP_MARK = ".tmp-"
_counter = itertools.count()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (blocking: call it from a worker thread).

    Readers see the old or the new content, never a mix. ``durable`` also fsyncs the file and
    its directory, so the new content survives a power loss; files regenerated on every use
    (a container's /etc/hosts, its OCI bundle) skip that.
    """
    # Unique per call: concurrent writers of one record must not share a temp file.
    unique = f"{os.getpid()}-{threading.get_ident()}-{next(_counter)}"
    tmp = path.with_name(f".{path.name}{TEMP_MARK}{unique}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def atomic_remove(path: Path) -> bool:
    """Remove ``path`` durably; False when it did not exist."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete temp files a crashed writer left behind; returns what was removed."""
    removed = []
    for entry in directory.iterdir():
        if entry.name.startswith(".") and TEMP_MARK in entry.name:
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry)
    return removed
