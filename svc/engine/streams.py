"""Bridges between trio and the blocking storage code that runs in worker threads.

``ThreadReader`` lets a worker thread read an async byte source (a request body) as a file;
``ThreadWriter`` lets it write a file-like stream that the trio side consumes from a bounded
channel (a response body). Both move data in chunks of about ``CHUNK`` bytes, so one thread
hand-off carries a megabyte rather than a packet.

Cancellation: the worker runs under ``trio.to_thread.run_sync`` from the host task; trio passes
the host's cancellation into ``trio.from_thread.run``, so a cancelled request makes the next
read or write in the thread raise ``trio.Cancelled`` and the thread unwinds.
"""

from __future__ import annotations

import io
import os
import select
from collections.abc import AsyncIterator

import trio

CHUNK = 1 << 20


class ThreadReader(io.RawIOBase):
    """A readable file for a worker thread over an async iterator of byte chunks."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""
        self._pos = 0
        self._eof = False
        self.consumed = 0

    def readable(self) -> bool:
        return True

    async def _gather(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while size < CHUNK:
            try:
                part = await self._chunks.__anext__()
            except StopAsyncIteration:
                break
            if part:
                parts.append(part)
                size += len(part)
        return b"".join(parts)

    def _fill(self) -> bool:
        if self._eof:
            return False
        data = trio.from_thread.run(self._gather)
        if not data:
            self._eof = True
            return False
        self._buf, self._pos = data, 0
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._pos >= len(self._buf) and not self._fill():
            return 0
        n = min(len(b), len(self._buf) - self._pos)
        with memoryview(self._buf) as view:
            b[:n] = view[self._pos : self._pos + n]
        self._pos += n
        self.consumed += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        """Whole received chunks are handed out as they are (no copy)."""
        if size is None or size < 0:
            return self.readall() or b""
        if self._pos >= len(self._buf) and not self._fill():
            return b""
        if self._pos == 0 and len(self._buf) <= size:
            data = self._buf
        else:
            data = self._buf[self._pos : self._pos + size]
        self._pos += len(data)
        self.consumed += len(data)
        return data

    def drain(self) -> None:
        """Read to the end (so the client's request is fully consumed)."""
        while self._fill():
            self.consumed += len(self._buf) - self._pos
            self._pos = len(self._buf)


class ThreadWriter(io.RawIOBase):
    """A writable file for a worker thread; chunks go to a trio memory channel."""

    def __init__(self, send: trio.MemorySendChannel[bytes]) -> None:
        self._send = send
        self._buf = bytearray()
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        n = len(b)
        self.written += n
        if n >= CHUNK // 4:  # big enough to travel alone: a bytes object is not copied
            self.flush()
            trio.from_thread.run(self._send.send, b if isinstance(b, bytes) else bytes(b))
            return n
        self._buf += b
        if len(self._buf) >= CHUNK:
            self.flush()
        return n

    def flush(self) -> None:
        if self._buf:
            data, self._buf = bytes(self._buf), bytearray()
            trio.from_thread.run(self._send.send, data)


class FdWriter(io.RawIOBase):
    """A writable file for a worker thread over a non-blocking socket fd it shares with trio.

    The fd stays non-blocking (the flag belongs to the shared open file), so a full socket is
    waited for with poll(2) here, checking every ``POLL_SECONDS`` whether the host task was
    cancelled. No ``fileno()`` is exposed: writers must not sendfile into a non-blocking fd.
    """

    POLL_SECONDS = 0.5

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        with memoryview(b) as view:
            done = 0
            while done < len(view):
                try:
                    done += os.write(self._fd, view[done:])
                except BlockingIOError:
                    while not self._poll.poll(self.POLL_SECONDS * 1000):
                        trio.from_thread.check_cancelled()
        self.written += done
        return done
