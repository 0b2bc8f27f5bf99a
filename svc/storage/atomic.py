"""Crash-safe file replacement: write a temp file, fsync it, rename it over, fsync the directory.

After ``atomic_write`` returns, the new content survives a crash or SIGKILL; before it returns, a
reader sees either the old file or the new one, never a mix. A temp file left by a crash is named
``.<name>.tmp-*`` and is removed by ``remove_stale_temps``.

A step that changes several directories (``rmi``: the names, the image record, its config, its
layers and the trash) can hand them a ``DirSyncs``: each change then leaves its directory's fsync
to ``DirSyncs.flush`` at the end, which fsyncs them all at once, in parallel threads. Each fsync
of a directory is a synchronous write (a journal commit, or on ext4 without a journal the
directory's own blocks), and under CPU contention each wait for one costs ~3.5 ms more: the
process's wake-up waits for a busy core. Five in a row cost 18 ms under two CPU burners on
this machine, five at once 0.75 ms (0.6 and 0.86 ms idle).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from svc.sched import prefer_short_slice

TEMP_MARK = ".tmp-"
_counter = itertools.count()


_thread = threading.local()


def _waits_for_disk() -> None:
    """The calling thread is about to wait for the disk, with a request waiting for it: it
    asks (once) for the short slice of ``svc.sched``, so that its wake-up after the write
    does not wait for a busy core (each did, ~3.5 ms under two CPU burners)."""
    if not getattr(_thread, "short_slice", False):
        _thread.short_slice = True
        prefer_short_slice()


def fsync_dir(path: Path) -> None:
    _waits_for_disk()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_THREADS = 4
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="svc-dirsync")
        return _pool


class DirSyncs:
    """Directories whose fsync a multi-step change defers to its end (see the module's
    docstring). Not thread-safe: one per change, used by one thread."""

    def __init__(self) -> None:
        self._dirs: dict[Path, None] = {}

    def add(self, directory: Path) -> None:
        self._dirs.setdefault(directory)

    def flush(self) -> None:
        """fsync every directory added, all at once (the first in this thread, the others
        in a small shared pool), and forget them; returns when all are done. Nothing is
        durable before the end: the directories reach the disk in any order.

        Raises:
            OSError: the first fsync that failed (after all of them ended).
        """
        dirs, self._dirs = list(self._dirs), {}
        if not dirs:
            return
        others = [_sync_pool().submit(fsync_dir, d) for d in dirs[1:]]
        try:
            fsync_dir(dirs[0])
        finally:
            wait(others)
        for done in others:
            done.result()


def _sync_dir(directory: Path, syncs: DirSyncs | None) -> None:
    if syncs is None:
        fsync_dir(directory)
    else:
        syncs.add(directory)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True,
                 syncs: DirSyncs | None = None) -> None:
    """Replace ``path`` with ``data`` (blocking: call it from a worker thread).

    Readers see the old or the new content, never a mix. ``durable`` also fsyncs the file and
    its directory, so the new content survives a power loss; files regenerated on every use
    (a container's /etc/hosts, its OCI bundle) skip that. With ``syncs`` the file is still
    fsynced before the rename (a crash never finds it empty under its name), and the
    directory's fsync is left to ``syncs.flush()``: until then the rename may be lost.
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
            _waits_for_disk()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        _sync_dir(path.parent, syncs)


def atomic_remove(path: Path, syncs: DirSyncs | None = None) -> bool:
    """Remove ``path`` durably (with ``syncs``: once ``syncs.flush()`` returns); False when it
    did not exist."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    _sync_dir(path.parent, syncs)
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
