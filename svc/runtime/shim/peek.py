"""A container's pipe read without taking its bytes until they are kept (``PeekedPipe``).

Under a shim, a daemon killed between reading a chunk and writing it to the log would lose
that chunk: the shim drains only what is still in the pipe. So the daemon copies what the
pipe holds with ``tee(2)`` (into a private pipe it then reads), hands the copy on, and takes
the bytes out of the pipe (``consume``, a ``splice`` to /dev/null) only once they are written.
A daemon killed in between leaves them in the pipe, for the shim and the next daemon: at
worst a chunk is logged twice, never lost.
"""

from __future__ import annotations

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
    """The read end ``fd`` of a container's output pipe (the stream owns it).

    ``receive_some`` returns a copy of what the pipe holds (b"" at its end); the caller calls
    ``consume()`` once that copy is kept (the next ``receive_some`` consumes it otherwise:
    the bytes would come again)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._copy_r, self._copy_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.fcntl(self._copy_w, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # (the default 64 KiB: smaller chunks)
        self._devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        self._taken = 0  # bytes at the pipe's head handed out, not yet consumed
        self._closed = False

    def fileno(self) -> int:
        return self._fd

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._closed:
            raise trio.ClosedResourceError
        self.consume()
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
            self._taken = n
            return _read_exactly(self._copy_r, n)

    def consume(self) -> None:
        """Take the bytes last handed out from the pipe: they are kept elsewhere now."""
        while self._taken:
            try:
                self._taken -= os.splice(self._fd, self._devnull, self._taken)
            except InterruptedError:
                continue

    def close(self) -> None:
        """Close without consuming: what was handed out but not consumed stays in the pipe
        (the shim drains it)."""
        if self._closed:
            return
        self._closed = True
        trio.lowlevel.notify_closing(self._fd)
        for fd in (self._fd, self._copy_r, self._copy_w, self._devnull):
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
