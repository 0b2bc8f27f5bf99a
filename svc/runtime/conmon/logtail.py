"""Following conmon's log from a cursor: what a container wrote reaches the daemon through the
file conmon keeps, so that lines written while the daemon is away are read when it is back,
and none is read twice.

The cursor is (inode, offset) just after the last line taken. conmon replaces the file when it
reaches ``--log-size-max`` (a new inode renamed over the path): the tail finishes the old file
first, then starts the new one at 0. A cursor whose inode is no longer the file's means the
file was replaced while nobody read it: what it held beyond the cursor is lost, and the tail
says so (``lost``). What has been read is punched out of the file (``FALLOC_FL_PUNCH_HOLE``),
so that the file takes disk space only for what the daemon has not read yet.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import trio

from svc.runtime.conmon.inotify import DirWatch
from svc.runtime.conmon.k8sfile import Record, parse_runs
from svc.runtime.holes import punch_hole

log = logging.getLogger("svc.runtime.conmon")

READ_BYTES = 256 * 1024
PUNCH_EVERY = 1 << 20
IDLE_WAIT = 1.0  # a wake-up even without an inotify event (a missed one costs this much)
COALESCE_NS = 2_000_000  # records read this close together are one chunk (``Batch.chunks``)


@dataclass(frozen=True)
class Cursor:
    inode: int
    offset: int


@dataclass
class Batch:
    """Records read in one step from the file ``inode``; ``ends[i]`` is the offset just
    after ``records[i]`` (a cursor placed there resumes after it)."""

    inode: int
    records: list[Record] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def cursor_after(self, i: int) -> Cursor:
        return Cursor(self.inode, self.ends[i])

    def chunks(self, window_ns: int = COALESCE_NS) -> Iterator[Chunk]:
        """The records joined into chunks: consecutive records of one stream that conmon
        read within ``window_ns`` of the first, stamped with the last one's time (when the
        last of it was read, as the daemon stamps what it reads from a pipe in one go).
        conmon reads 8 KiB at a time; the daemon's log writer and the attached clients then
        take a few large chunks instead of many small ones."""
        records, n, i = self.records, len(self.records), 0
        while i < n:
            first = records[i]
            j = i + 1
            while (j < n and records[j].stream == first.stream
                   and records[j].ts_ns - first.ts_ns <= window_ns):
                j += 1
            data = first.data if j == i + 1 else b"".join(r.data for r in records[i:j])
            yield Chunk(first.stream, data, records[j - 1].ts_ns, j - 1)
            i = j


@dataclass(frozen=True, slots=True)
class Chunk:
    """Records of one stream joined (``Batch.chunks``); ``last``: the index of the last."""

    stream: str
    data: bytes
    ts_ns: int
    last: int


class CursorFile:
    """A cursor kept in a 16-byte file, rewritten in place by one ``pwrite``: a daemon killed
    at any moment leaves either the old cursor or the new one (the page cache outlives the
    process; a machine that goes down takes the containers with it)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def read(self) -> Cursor | None:
        data = os.pread(self._fd, 16, 0)
        if len(data) != 16:
            return None
        inode, offset = struct.unpack("<QQ", data)
        return Cursor(inode, offset) if inode else None

    def write(self, cursor: Cursor) -> None:
        os.pwrite(self._fd, struct.pack("<QQ", cursor.inode, cursor.offset), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class LogTail:
    """Reads ``path`` (conmon's log) from ``cursor`` (None: from the start of the file)."""

    def __init__(self, path: str, cursor: Cursor | None = None) -> None:
        self.path = path
        self.lost = False  # the file was replaced beyond the cursor while nobody read it
        self._fd = -1
        self._inode = 0
        self._offset = 0  # just after the last complete line taken
        self._partial = b""  # bytes read after it (a line conmon has not finished writing)
        self._punched = 0
        self._watch = DirWatch(os.path.dirname(path))
        self._waiting: trio.CancelScope | None = None
        self._open(cursor)

    @property
    def cursor(self) -> Cursor:
        return Cursor(self._inode, self._offset)

    def _open(self, cursor: Cursor | None) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:  # conmon has not made it yet
            return
        self._fd, self._inode = fd, os.fstat(fd).st_ino
        self._offset = self._punched = 0
        self._partial = b""
        if cursor is not None:
            if cursor.inode == self._inode:
                self._offset = self._punched = cursor.offset
            else:
                self.lost = True
        os.lseek(fd, self._offset, os.SEEK_SET)

    def _replaced(self) -> bool:
        """Whether the path now names another file than the one being read."""
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return False

    def read_available(self) -> Batch:
        """The complete lines written since the last call (at most about ``READ_BYTES``);
        an empty batch at the end of what is there now. Switches to a replacing file once
        the replaced one has been read to its end."""
        if self._fd < 0:
            self._open(None)
            if self._fd < 0:
                return Batch(0)
        data = os.read(self._fd, READ_BYTES)
        if not data:
            if self._replaced():
                if os.read(self._fd, 1):  # written just before the switch: read it first
                    os.lseek(self._fd, -1, os.SEEK_CUR)
                    return self.read_available()
                if self._partial:
                    log.warning("%s: an unfinished line at the end of a replaced log: %r",
                                self.path, self._partial[:60])
                os.close(self._fd)
                self._fd = -1
                self._open(None)
                return self.read_available()
            return Batch(self._inode)
        buf = self._partial + data
        end = buf.rfind(b"\n") + 1
        self._partial = buf[end:]
        records, ends, bad = parse_runs(buf[:end])  # (buf starts at the old offset)
        if bad:
            log.warning("%s: %d line(s) that are not conmon's skipped", self.path, bad)
        batch = Batch(self._inode, records, [self._offset + e for e in ends])
        self._offset += end
        if self._offset - self._punched >= PUNCH_EVERY:
            self._punch()
        return batch

    def _punch(self) -> None:
        upto = self._offset & ~0xFFF
        if upto <= self._punched:
            return
        if punch_hole(self._fd, self._punched, upto - self._punched):
            self._punched = upto
        else:  # a file system without holes: the file keeps its blocks
            self._punched = 1 << 62

    async def follow(self, gone: trio.Event) -> AsyncIterator[Batch]:
        """Batches of records as conmon writes them, until ``gone`` says conmon has ended
        and everything it wrote has been read. Cancellation: the cursor stays just after
        the last batch yielded."""
        while True:
            batch = self.read_available()
            if batch.records:
                yield batch
                continue
            if gone.is_set():  # all of it is in the file now: read it to its end
                while (batch := self.read_available()).records:
                    yield batch
                return
            await self._wait(gone)

    async def _wait(self, gone: trio.Event) -> None:
        """Until conmon writes, or ends (``wake``), at most ``IDLE_WAIT``. One cancel scope
        and no task of its own: a busy container wakes this thousands of times a second."""
        if gone.is_set():
            return
        with trio.move_on_after(IDLE_WAIT) as self._waiting:
            await self._watch.wait()
        self._waiting = None

    def wake(self) -> None:
        """End a wait in ``follow`` now (whoever set its ``gone`` calls this)."""
        if self._waiting is not None:
            self._waiting.cancel()

    def close(self) -> None:
        self._watch.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
