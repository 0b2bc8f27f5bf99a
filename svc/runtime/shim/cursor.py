"""How far the daemon has read a shim's spool, and the unfinished last lines it holds
(``SpoolCursor``): one small file, rewritten in place with a single ``pwrite`` after each
write to the log (a daemon killed at any moment finds the last whole state: a kill ends a
process between system calls, never within one). Not fsynced: it is the daemon's death it
must survive, not the machine's (the log itself is not fsynced either).

Layout: u64 spool offset, u64 dropped bytes already told, u64 stdout's offset up to which
its bytes are in the log (or in the unfinished line), u64 stderr's, u32 stdout's unfinished
line's length, u32 stderr's, the two lines (little endian); then, from builds that record it,
the log's end after the last chunk logged (``SVLE``, the live file's inode, its size; or
``SVLN`` and zeros: none); trailing bytes of an older, longer state are ignored.

The log's end is what makes a chunk logged once across a kill: the log's write and the
cursor's are two system calls, and a kill between them (the thread may be preempted there)
left the chunk in the log while the cursor said it was not. The next daemon takes the log
back to the recorded end (``JsonLogWriter.take_back``) before it logs that chunk again.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

HEAD = struct.Struct("<QQQQII")
LOG_END = struct.Struct("<4sQQ")
LOG_END_MAGIC = b"SVLE"
NO_LOG_END = b"SVLN"  # (written too, so an older, longer state's bytes are never read as one)


@dataclass
class CursorState:
    offset: int = 0
    pending: tuple[bytes, bytes] = field(default=(b"", b""))
    dropped: int = 0  # of the shim's dropped bytes, how many the log was told of
    logged: tuple[int, int] = (0, 0)  # stdout's and stderr's offsets logged up to
    log_end: tuple[int, int] | None = None  # (inode, size) of the live log after it


class SpoolCursor:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._last = b""

    def read(self) -> CursorState:
        data = os.pread(self._fd, 1 << 20, 0)
        if len(data) < HEAD.size:
            return CursorState()
        offset, dropped, log_out, log_err, n_out, n_err = HEAD.unpack_from(data)
        if HEAD.size + n_out + n_err > len(data):  # (damaged from outside: the lines go)
            return CursorState(offset, dropped=dropped, logged=(log_out, log_err))
        end = HEAD.size + n_out + n_err
        out = data[HEAD.size : HEAD.size + n_out]
        err = data[HEAD.size + n_out : end]
        log_end = None
        if len(data) >= end + LOG_END.size:
            magic, ino, size = LOG_END.unpack_from(data, end)
            if magic in (LOG_END_MAGIC, NO_LOG_END):
                log_end = (ino, size) if magic == LOG_END_MAGIC else None
                end += LOG_END.size
        self._last = data[:end]
        return CursorState(offset, (out, err), dropped, (log_out, log_err), log_end)

    def write(self, state: CursorState) -> None:
        """Record ``state``; nothing is written when it has not changed."""
        out, err = state.pending
        data = HEAD.pack(state.offset, state.dropped, *state.logged, len(out), len(err)) \
            + out + err
        data += LOG_END.pack(LOG_END_MAGIC, *state.log_end) if state.log_end is not None \
            else LOG_END.pack(NO_LOG_END, 0, 0)
        if data != self._last:
            os.pwrite(self._fd, data, 0)
            self._last = data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
