"""Giving back the disk space of a file's read part without changing its offsets
(``FALLOC_FL_PUNCH_HOLE``): a monitor's log or spool is read from the front while it is
written at the end, and takes disk space only for what the daemon has not read."""

from __future__ import annotations

import ctypes

FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_libc.fallocate.restype = ctypes.c_int


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the blocks of ``length`` bytes from ``offset``; False where the file system has
    no holes (the file keeps its blocks)."""
    result: int = _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                                  length)
    return result == 0
