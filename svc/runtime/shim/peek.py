"""A container's pipe read without taking its bytes until they are logged (``PeekedPipe``).

Under a shim, a daemon killed between reading a chunk and writing it to the log would lose
that chunk, and one killed between writing it and taking it out of the pipe would log it
twice. So the daemon copies what the pipe holds with ``tee(2)`` (into a private pipe it then
reads) and hands the copy on; once the copy is in the log, and the stream's offset after it
in the cursor, it moves those bytes out of the pipe with ``splice(2)`` into the stream's
journal, a pipe whose other end the shim reads and counts. The shim thus always knows each
stream's offset at the head of the pipe, and tells the next daemon, which compares it with its
cursor's and skips what it logged already. Nothing is lost whenever the kill comes (one
between the log's write and the cursor's, microseconds apart, logs a chunk twice), and
there is no round trip to the shim per chunk.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os

import trio

F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20
SPLICE_F_NONBLOCK = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.tee.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint]
_libc.tee.restype = ctypes.c_ssize_t


class PeekedPipe(trio.abc.ReceiveStream):
    """The read end ``fd`` of one output stream of a container held by a shim, and the write
    end ``journal`` of that stream's journal (the object owns both). ``head`` is the stream's
    offset at the head of the pipe (the shim's hello), ``logged`` the offset up to which the
    daemon's log already has it (its cursor): what lies between is moved out unread.

    ``receive_some`` returns a copy of what the pipe holds (b"" at its end); the caller calls
    ``consume()`` once that copy is logged (the next ``receive_some`` does, otherwise), and
    ``offset`` is then the stream's offset after it."""

    def __init__(self, fd: int, journal: int, head: int, logged: int) -> None:
        self._fd = fd
        self._journal = journal
        os.set_blocking(fd, False)
        os.set_blocking(journal, False)
        self._copy_r, self._copy_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # (else the default 64 KiB: smaller chunks)
            fcntl.fcntl(self._copy_w, F_SETPIPE_SZ, PIPE_SIZE)
        self.offset = max(head, logged)  # after the last byte handed out
        self._moved = head  # the offset at the pipe's head
        self._closed = False

    def fileno(self) -> int:
        return self._fd

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._closed:
            raise trio.ClosedResourceError
        while self.offset > self._moved:  # (a full journal: the shim reads it in a moment)
            self.consume()
            if self.offset > self._moved:
                await trio.lowlevel.wait_writable(self._journal)
        limit = max_bytes or PIPE_SIZE
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            n = _libc.tee(self._fd, self._copy_w, limit, SPLICE_F_NONBLOCK)
            if n < 0:
                err = ctypes.get_errno()
                if err in (errno.EAGAIN, errno.EINTR):
                    continue
                raise trio.BrokenResourceError(f"tee: {os.strerror(err)}")
            if n == 0:
                return b""  # no writer left, nothing held: the end
            self.offset += n
            return _read_exactly(self._copy_r, n)

    def consume(self) -> None:
        """Move what was handed out (it is logged now) into the journal; what the journal
        has no room for yet is moved by the next ``receive_some``."""
        while self.offset > self._moved:
            try:
                moved = os.splice(self._fd, self._journal, self.offset - self._moved,
                                  flags=SPLICE_F_NONBLOCK)
            except (BlockingIOError, InterruptedError):
                return
            if moved == 0:  # (the pipe holds less than was copied: not expected)
                raise trio.BrokenResourceError("the pipe lost what was copied from it")
            self._moved += moved

    def close(self) -> None:
        """Close without consuming: what is still in the pipe stays, for the shim."""
        if self._closed:
            return
        self._closed = True
        trio.lowlevel.notify_closing(self._fd)
        trio.lowlevel.notify_closing(self._journal)
        for fd in (self._fd, self._journal, self._copy_r, self._copy_w):
            os.close(fd)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


def _read_exactly(fd: int, n: int) -> bytes:
    """The ``n`` bytes ``tee`` put into the private pipe (all there: one read, or a few)."""
    data = os.read(fd, n)
    if len(data) == n:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        part = os.read(fd, n - got)
        parts.append(part)
        got += len(part)
    return b"".join(parts)
