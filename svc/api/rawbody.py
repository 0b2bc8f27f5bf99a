"""A build context or an image archive read straight from the socket, by the thread that
unpacks it.

A build context is tens of megabytes (an image archive, hundreds). Through hypercorn, h11
and Quart, every read of the socket (a unix socket gives about 200 KiB at a time: the
client's send buffer) costs a trip through the event loop, three task switches and two
copies before the unpacking thread sees it: the upload of 50 MB took twice as long as
``tar -c | tar -x``. So the protocol (``svc.api.hijack``) gives ``POST /build`` and
``POST /images/load`` requests with a body on a plain socket a
``RawBody`` instead: h11 parses the head only, the bytes after it are this body's, and once
the body has more to come than hypercorn already read, hypercorn's read loop waits
(``feed``) while the consumer reads the socket itself: a trio task with ``__anext__`` (the
look at the first bytes, ``svc.engine.builder.early``), then the unpacking thread through
``thread_file`` (``os.read``, a new bytes object per read, handed on without a copy; the GIL
is free while it waits). The HTTP/1.1 framing (``Content-Length`` or chunked) is decoded
here (``Dechunker``).

After the body (or when its consumer gives up), hypercorn reads again: a client that goes
away is seen as before and cancels the request. The connection is closed after the response
(h11 never saw the body end, so it cannot serve a next request on it).

Errors: a body cut short or badly framed raises ``BodyError``, a ``ContextError``: the build
reports and cleans up after it as after any refused context.
"""

from __future__ import annotations

import errno
import os
import re
import select
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from svc.engine.builder.context import ContextError
from svc.engine.streams import PumpAborted

READ = 1 << 20  # bytes asked of the socket at once
MAX_LINE = 4096  # a chunk-size or trailer line longer than this is refused
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class BodyError(ContextError):
    """The request body is cut short or its framing is broken (the context is refused)."""


class Dechunker:
    """HTTP/1.1 body framing, decoded incrementally: ``feed`` raw bytes, get payload bytes.

    ``length``: a ``Content-Length`` body of that many bytes; None: chunked
    (``<hex>[;ext]\\r\\n<data>\\r\\n``... ``0\\r\\n[trailers]\\r\\n``). ``done`` once the
    body has ended; bytes after it are not consumed (``feed`` returns how many it used).
    """

    def __init__(self, length: int | None) -> None:
        self.length = length
        self.done = length == 0
        self._left = length or 0  # payload bytes left in the body (length) or chunk
        self._line = bytearray()  # a size or trailer line being read (chunked)
        self._state = "size"  # size, data, data-end, trailer (chunked)
        self._error: BodyError | None = None  # found after payload that was handed out

    def feed(self, raw: memoryview, out: list[memoryview]) -> int:
        """Decode from ``raw``; payload pieces are appended to ``out`` (views of ``raw``).
        Returns how many bytes of ``raw`` were consumed."""
        if self.length is not None:
            n = min(self._left, len(raw))
            if n:
                out.append(raw[:n])
            self._left -= n
            self.done = self._left == 0
            return n
        pos = 0
        while pos < len(raw) and not self.done:
            if self._state == "data":
                n = min(self._left, len(raw) - pos)
                out.append(raw[pos:pos + n])
                pos += n
                self._left -= n
                if self._left == 0:
                    self._state = "data-end"
                continue
            end = _find_lf(raw, pos)
            if end < 0:
                self._line += raw[pos:]
                if len(self._line) > MAX_LINE:
                    raise BodyError("bad chunked request body: a line is too long")
                return len(raw)
            self._line += raw[pos:end]
            pos = end + 1
            line = bytes(self._line).rstrip(b"\r")
            self._line.clear()
            self._line_done(line)
        return pos

    def decode(self, raw: Any) -> bytes:
        """The payload in ``raw`` (bytes read), joined; what follows the body is dropped.
        A framing error after some payload is raised at the next call, once that payload
        has been handed out: however the bytes were cut into reads, the consumer gets every
        well-framed byte before the error."""
        self.raise_pending()
        pieces: list[memoryview] = []
        with memoryview(raw) as view:
            try:
                self.feed(view, pieces)
            except BodyError as exc:
                self._error = exc  # (raised again by every later call: nothing follows it)
                if not pieces:
                    raise
            if len(pieces) == 1 and type(raw) is bytes and len(pieces[0]) == len(raw):
                out = raw  # (all of it payload, and immutable: no copy)
            else:
                out = pieces[0].tobytes() if len(pieces) == 1 else b"".join(pieces)
            for p in pieces:
                p.release()
        return out

    def raise_pending(self) -> None:
        """Raise the framing error found after the payload last handed out, if any."""
        if self._error is not None:
            raise self._error

    def _line_done(self, line: bytes) -> None:
        if self._state == "data-end":
            if line:
                raise BodyError("bad chunked request body: no CRLF after a chunk's data")
            self._state = "size"
        elif self._state == "size":
            size = line.split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size):  # not int()'s "0x", "_", signs or spaces
                raise BodyError(f"bad chunked request body: chunk size {size[:20]!r}")
            self._left = int(size, 16)
            self._state = "data" if self._left else "trailer"
        elif not line:  # the blank line after the last chunk (and its trailers)
            self.done = True


def _find_lf(raw: memoryview, start: int) -> int:
    """The index of the next LF in ``raw`` from ``start`` (looked for within a line's
    length), or -1."""
    found = bytes(raw[start:start + MAX_LINE + 2]).find(b"\n")
    return -1 if found < 0 else start + found


class RawBody:
    """One request's body (see the module's doc). The protocol feeds what hypercorn read;
    one consumer at a time reads it, first as a trio async iterator, then (optionally) from a
    worker thread."""

    def __init__(self, length: int | None, initial: bytes, sock: Any, *,
                 eof: bool = False) -> None:
        self._dechunker = Dechunker(length)
        self._sock = sock  # the connection's trio socket (plain, not TLS)
        self._raw = bytearray(initial)  # bytes read, not yet decoded
        self._initial = len(initial)  # of which came with the head (h11 still holds them)
        self.touched = False  # a consumer has read from it
        self._eof = eof
        self._parked = False  # hypercorn's read loop waits in ``feed``: the socket is ours
        self._lock = threading.Lock()  # guards _raw, _eof, _parked, against the thread
        self._fed = threading.Condition(self._lock)
        self._changed = trio.Event()
        self._released = trio.Event()  # the body is done with (read, or given up)
        self._token = trio.lowlevel.current_trio_token()

    # -- the protocol's side ------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._released.is_set()

    async def feed(self, data: bytes) -> None:
        """What hypercorn's read loop read while the body is ours; an empty ``data`` is the
        client's EOF. Waits until the body is done with: meanwhile the consumer reads the
        socket itself."""
        if self._released.is_set():
            return
        with self._lock:
            if data:
                self._raw += data
            else:
                self._eof = True
            self._parked = bool(data)
            self._fed.notify_all()
        self._changed.set()
        if data:
            await self._released.wait()

    def release(self) -> None:
        """The body is done with: read to its end, given up by its consumer, or its request
        is over (answered, or its connection closed). hypercorn reads again; whatever is
        left of the body is dropped."""
        self._released.set()
        self._changed.set()

    def take_back(self) -> bytes | None:
        """For a body no consumer read (its request was answered first): the bytes fed
        after the head's (h11 holds those), so that h11 can read the body after all and the
        connection serve its next request; None once a consumer has read some."""
        if self.touched:
            return None
        with self._lock:
            return bytes(self._raw[self._initial:])

    # -- trio consumer ------------------------------------------------------------------

    thread_readable = True  # ``svc.engine.streams.ThreadReadable``

    def __aiter__(self) -> RawBody:
        return self

    async def __anext__(self) -> bytes:
        self.touched = True
        while True:
            if self._dechunker.done:
                self.release()
                raise StopAsyncIteration
            self._dechunker.raise_pending()
            with self._lock:
                raw, self._raw = self._raw, bytearray()
                parked, eof = self._parked, self._eof
            if raw:
                out = self._decode(raw)
                if out:
                    return out
                continue
            if eof:
                self.release()
                raise BodyError("the request body ended early")
            if parked:
                data = await self._sock.recv(READ)
                with self._lock:
                    if data:
                        self._raw += data
                    else:
                        self._eof = True
                continue
            self._changed = trio.Event()
            await self._changed.wait()

    def _decode(self, raw: bytearray) -> bytes:
        out = self._dechunker.decode(raw)
        if self._dechunker.done:
            self.release()
        return out

    # -- thread consumer ----------------------------------------------------------------

    @asynccontextmanager
    async def thread_file(self) -> AsyncIterator[_ThreadFile]:
        """A file the block's worker thread reads the rest of the body from (the socket read
        in that thread). A cancellation of the block wakes a waiting read, which raises
        ``PumpAborted`` (as ``prefetching``'s reader does); leaving the block gives the body
        up unless it is done."""
        self.touched = True
        wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        f = _ThreadFile(self, wake_r)

        def wake() -> None:
            if not f.aborted:
                f.aborted = True
                os.write(wake_w, b"x")
                with self._lock:
                    self._fed.notify_all()

        async def watch() -> None:  # the block's cancellation reaches the thread
            try:
                await trio.sleep_forever()
            finally:
                wake()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                try:
                    yield f
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            wake()
            self.release()
            os.close(wake_w)
            f.close_fds()


class _ThreadFile:
    """The body as a file for one worker thread (``RawBody.thread_file``)."""

    def __init__(self, body: RawBody, wake: int) -> None:
        self._body = body
        self._wake = wake
        self._fd = body._sock.fileno()
        self._out = b""
        self._pos = 0
        self.aborted = False
        self._poller: select.poll | None = None  # (made at the first wait)

    def close_fds(self) -> None:
        os.close(self._wake)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (any size: what is at hand, as a socket gives it); b"" at
        the body's end."""
        if self._pos >= len(self._out) and not self._fill():
            return b""
        if size < 0 or (self._pos == 0 and len(self._out) <= size):
            data = self._out[self._pos:] if self._pos else self._out
            self._pos = len(self._out)
            return data
        data = self._out[self._pos:self._pos + size]
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def _fill(self) -> bool:
        """The next decoded payload; False at the body's end."""
        body = self._body
        while True:
            if body._dechunker.done:
                self._done()
                return False
            body._dechunker.raise_pending()
            with body._lock:
                while not (body._raw or body._eof or body._parked or self.aborted):
                    body._fed.wait()
                raw, body._raw = body._raw, bytearray()
                parked, eof = body._parked, body._eof
            if self.aborted:
                raise PumpAborted("the build was cancelled")
            if raw:
                self._out = self._body._dechunker.decode(raw)
                self._pos = 0
                if self._out:
                    return True
                continue
            if eof:
                raise BodyError("the request body ended early")
            assert parked
            data = self._recv()
            if not data:
                with body._lock:
                    body._eof = True
                continue
            self._out = self._body._dechunker.decode(data)
            self._pos = 0
            if self._out:
                return True

    def _recv(self) -> bytes:
        """One read of the socket (waiting for it, or for the wake pipe); b"" at its end.
        The read is tried first: while a client sends a large body, the bytes are nearly
        always there. Each read is a new bytes object, so that a body's payload goes on
        without being copied (``Dechunker.decode``, then the readers of a load)."""
        while True:
            try:
                return os.read(self._fd, READ)
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno in (errno.ECONNRESET, errno.EPIPE):
                    return b""
                raise
            if self._poller is None:
                self._poller = select.poll()
                self._poller.register(self._fd, select.POLLIN | select.POLLHUP | select.POLLERR)
                self._poller.register(self._wake, select.POLLIN)
            for fd, _ in self._poller.poll():
                if fd == self._wake:
                    raise PumpAborted("the build was cancelled")

    def _done(self) -> None:
        self._body._token.run_sync_soon(self._body.release)

