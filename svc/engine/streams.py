"""Bridges between trio and the blocking storage code that runs in worker threads.

``prefetching`` gives a worker thread an async byte source (a request body) as a file that a
trio task fills ahead of the reader; ``reading`` does the same, or, for a source the thread
can read itself (``ThreadReadable``: a build context read from its socket), hands it that;
``ThreadWriter`` lets a thread write a file-like stream that the trio side consumes from a
bounded channel (a response body), in chunks of about ``CHUNK`` bytes, so one thread hand-off
carries a megabyte rather than a packet; ``FdWriter`` writes straight to a taken-over
connection; ``thread_iter`` drives a blocking iterator of chunks from worker threads, and
``ThreadChunks`` marks such an iterator inside an async stream of chunks, for a sender that can
drain it in one worker thread straight to its socket (``expand`` for one that cannot).

Cancellation: the worker runs under ``trio.to_thread.run_sync`` from the host task. A cancelled
request makes the thread's next read raise ``PumpAborted`` (``prefetching`` turns it back into
``trio.Cancelled``) and its next ``trio.from_thread`` call raise ``trio.Cancelled``.
"""

from __future__ import annotations

import io
import os
import select
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import trio

CHUNK = 1 << 20
PREFETCH = 8 << 20  # bytes a pump may queue ahead of its reader


class PumpAborted(Exception):
    """The trio task feeding a ``PrefetchReader`` was cancelled (the client went away)."""


class PrefetchReader(io.RawIOBase):
    """A readable file for a worker thread, filled ahead by a trio task running ``pump``.

    The thread takes chunks from a queue guarded by a ``threading.Condition``: no trio round
    trip per read, so unpacking never waits for the event loop while data is already here.
    The pump stops taking chunks once ``limit`` bytes are queued (back-pressure to the client)
    and is woken with ``run_sync_soon`` when the reader has made room.
    """

    def __init__(self, limit: int = PREFETCH) -> None:
        self._limit = limit
        self._cond = threading.Condition()
        self._chunks: deque[bytes] = deque()
        self._queued = 0
        self._eof = False
        self._error: BaseException | None = None
        self._aborted = False
        self._waiting = False  # the pump waits for room (guarded by _cond)
        self._room = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._buf = b""
        self._pos = 0
        self.consumed = 0

    def readable(self) -> bool:
        return True

    async def pump(self, chunks: AsyncIterator[bytes]) -> None:
        """Queue ``chunks`` for the reader until they end (trio side; one pump per reader)."""
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                while True:
                    with self._cond:
                        if self._queued < self._limit:
                            self._chunks.append(chunk)
                            self._queued += len(chunk)
                            self._cond.notify()
                            break
                        self._room = trio.Event()
                        self._waiting = True
                    await self._room.wait()
        except trio.Cancelled:
            self._finish(aborted=True)
            raise
        except Exception as exc:  # the body failed (too large, malformed): the reader raises it
            self._finish(error=exc)
        else:
            self._finish()

    def _finish(self, *, aborted: bool = False, error: BaseException | None = None) -> None:
        with self._cond:
            self._eof = True
            self._aborted = aborted
            self._error = error
            self._cond.notify()

    def _wake_pump(self) -> None:
        self._room.set()

    def _fill(self) -> bool:
        with self._cond:
            while not self._chunks:
                if self._aborted:
                    raise PumpAborted("the request was cancelled")
                if self._error is not None:
                    raise self._error
                if self._eof:
                    return False
                self._cond.wait()
            chunk = self._chunks.popleft()
            self._queued -= len(chunk)
            if self._waiting and self._queued < self._limit:
                self._waiting = False
                self._token.run_sync_soon(self._wake_pump)
        self._buf, self._pos = chunk, 0
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


@asynccontextmanager
async def prefetching(chunks: AsyncIterator[bytes],
                      limit: int = PREFETCH) -> AsyncIterator[PrefetchReader]:
    """A ``PrefetchReader`` over ``chunks``, pumped by a task while the block runs.

    Hand the reader to ``trio.to_thread.run_sync``. Cancellation: the pump is cancelled with
    the block's scope and makes the thread's next read raise ``PumpAborted``, which leaves the
    block as the ``trio.Cancelled`` it stands for. On leaving, an unfinished pump is cancelled
    (the rest of the body is left unread).
    """
    reader = PrefetchReader(limit)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader.pump, chunks)
        try:
            yield reader
        except PumpAborted:
            await trio.lowlevel.checkpoint()  # raises the Cancelled that aborted the pump
            raise
        finally:
            nursery.cancel_scope.cancel()


@runtime_checkable
class ThreadReadable(Protocol):
    """A byte source that a worker thread can read itself, without a trio task pumping it
    (``svc.api.rawbody``: a request body the thread reads from the socket)."""

    @property
    def thread_readable(self) -> bool: ...

    def thread_file(self) -> AbstractAsyncContextManager[Any]:
        """A file the block's worker thread reads; leaving the block makes a waiting read
        raise ``PumpAborted``."""
        ...


@asynccontextmanager
async def reading(chunks: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """A file for a worker thread over ``chunks``: read by the thread itself when the source
    allows it (``ThreadReadable``), else pumped by a trio task (``prefetching``).
    Cancellation as ``prefetching``'s."""
    if isinstance(chunks, ThreadReadable) and chunks.thread_readable:
        async with chunks.thread_file() as f:
            try:
                yield f
            except PumpAborted:
                await trio.lowlevel.checkpoint()  # raises the Cancelled that aborted it
                raise
        return
    async with prefetching(chunks) as reader:
        yield reader


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


async def thread_iter(it: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Drive a blocking iterator (file reads) in a worker thread, a chunk per hand-off; the
    iterator is closed at the end, also when cancelled."""
    done = object()
    try:
        while True:
            chunk = await trio.to_thread.run_sync(next, it, done)
            if chunk is done:
                return
            assert isinstance(chunk, bytes)
            yield chunk
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True, slots=True)
class ThreadChunks:
    """A stretch of a stream of chunks that a blocking iterator makes (a log's files read back,
    inside ``logs -f``). The sender drains it in one worker thread that writes to the socket
    itself (``api.streaming.send_chunks``): a hand-off per chunk through a loop busy with the
    live output cost a few ms each, and the follower fell behind. Whoever takes it closes
    ``it``."""

    it: Iterator[bytes]

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


async def expand(chunks: AsyncIterator[bytes | ThreadChunks]) -> AsyncIterator[bytes]:
    """``chunks`` with each ``ThreadChunks`` driven chunk by chunk (``thread_iter``), for a
    consumer that has no socket of its own to write to. Closing this closes ``chunks``."""
    async with aclosing(chunks):  # type: ignore[type-var]
        async for chunk in chunks:
            if isinstance(chunk, ThreadChunks):
                async with aclosing(thread_iter(chunk.it)) as pieces:  # type: ignore[type-var]
                    async for piece in pieces:
                        yield piece
            else:
                yield chunk
