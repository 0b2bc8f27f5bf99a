"""Removing trees that a crash, a container or an attacker may have shaped.

``shutil.rmtree`` recurses once per directory level (a tree a few thousand levels deep, which
any container can make in its own files, raises ``RecursionError``) and raises on a path that
is a plain file. ``remove_tree`` walks with an explicit stack, holds one directory descriptor
at a time (so depth costs no descriptors), works relative to that descriptor (so no path ever
exceeds ``PATH_MAX``), never follows a symlink, and never descends into another filesystem
mounted below the tree (a mount's contents are not the tree's to delete).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


Pace = Callable[[], None] | None  # called after each entry removed (it may sleep or raise)


def _clear(fd: int, ignore_errors: bool, pace: Pace = None) -> list[str]:
    """Unlink every non-directory in the directory ``fd``; the names of its subdirectories."""
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
                    if pace is not None:
                        pace()
            except FileNotFoundError:
                continue
            except OSError:
                if not ignore_errors:
                    raise
    return subdirs


def _walk_and_remove(fd: int, dev: int, ignore_errors: bool, pace: Pace = None) -> int:
    """Empty the directory ``fd`` (depth first); returns the descriptor of the same
    directory once the walk is back at it (the caller closes it). The walk owns ``fd``: on
    an exception the descriptor it holds then (``fd`` or one below it) is closed here."""
    try:
        stack: list[tuple[str, list[str]]] = [("", _clear(fd, ignore_errors, pace))]
        while True:
            name, pending = stack[-1]
            if pending:
                sub = pending.pop()
                try:
                    child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                if os.fstat(child).st_dev != dev:
                    os.close(child)
                    if not ignore_errors:
                        raise OSError(errno.EBUSY, "a filesystem is mounted there", sub)
                    continue
                os.close(fd)
                fd = child
                stack.append((sub, _clear(fd, ignore_errors, pace)))
                continue
            stack.pop()
            if not stack:
                return fd
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                if not ignore_errors:
                    raise
            if pace is not None:
                pace()
    except BaseException:
        os.close(fd)
        raise


def remove_tree(path: Path | str | bytes, *, ignore_errors: bool = False,
                pace: Pace = None) -> None:
    """Remove ``path`` and everything below it; a missing path is not an error, a file or a
    symlink is unlinked (never followed). Blocking.

    Raises:
        OSError: something could not be removed (unless ``ignore_errors``); a filesystem
            mounted below ``path`` is left alone and makes the removal fail.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return
        fd = os.open(path, _DIR_FLAGS)
        os.close(_walk_and_remove(fd, os.fstat(fd).st_dev, ignore_errors, pace))
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
    except OSError:
        if not ignore_errors:
            raise
