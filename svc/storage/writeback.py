"""Starting the write-out of a file's dirty pages early, without waiting for it.

Unmounting an overlay syncs its whole upper file system (overlayfs's ``sync_fs``), and a
container's teardown unmounts one: whatever is still dirty on that file system is written
out then, on the path of the request that waits for the teardown. A build context of tens of
MB, just received, is exactly that. ``start_writeback`` hands the pages to the disk as they
are written (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: queued, not waited for), so that by
the time of an unmount there is little left. It changes when data reaches the disk, never
what is on it, and promises no durability.
"""

from __future__ import annotations

import ctypes

SYNC_FILE_RANGE_WRITE = 2
_libc = ctypes.CDLL(None, use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _sync_file_range.restype = ctypes.c_int


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Queue the write-out of ``nbytes`` at ``offset`` of ``fd`` (0: to the end); best
    effort: a file system or libc without it is left to the kernel's own write-back."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)
