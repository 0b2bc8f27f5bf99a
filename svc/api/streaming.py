"""The one way a view streams a response body: ``respond_chunked`` (and its variants for a
blocking source and for a body of known length).

The body is written straight to the connection, chunked, and the connection closes after it:
going through Quart, hypercorn and h11 costs more CPU per chunk than producing the bytes does
(logs, events, archives). The client sends nothing after its request, so its EOF means it has
gone: that cancels the producer at once, even while it waits for output that may never come.
Two kinds of view keep the connection instead, with ``respond_chunked(..., keep_alive=True)``,
which sends the same chunks through Quart, where a disconnect cancels the request's scope: one
still reading its request body while it answers (an import streams its upload) cannot take the
connection over, and a short answer that clients follow with another request on the same
connection (wait: docker-py's pool and raw keep-alive clients) must not close it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from types import TracebackType
from typing import Any, BinaryIO, cast

import trio
from quart import Response, request
from quart.wrappers.response import ResponseBody

from svc.api.heads import response_head
from svc.api.hijack import hijack
from svc.api.rawstream import RawStream
from svc.engine.streams import FdWriter, ThreadChunks, expand, thread_iter

log = logging.getLogger("svc.api.streaming")

# An async iterator of chunks, or an async context manager giving one (a
# ``trio.as_safe_channel`` generator): closed however the response ends.
BodyChunks = AsyncIterator[bytes] | AbstractAsyncContextManager[AsyncIterator[bytes]]
# A view's chunks may include ``ThreadChunks``: drained by a worker thread on a taken-over
# connection, chunk by chunk otherwise (``expand``).
Chunks = BodyChunks | AsyncIterator[bytes | ThreadChunks]


class _RequestScopedBody(ResponseBody):
    """A body Quart sends, keeping the connection (import, wait: see the module). Entered
    when Quart begins sending, closed when sending ends, inside the request's cancel scope:
    a disconnect cancels it."""

    def __init__(self, chunks: BodyChunks) -> None:
        self._chunks = chunks
        self._cm: AbstractAsyncContextManager[AsyncIterator[bytes]] | None = None

    async def __aenter__(self) -> AsyncIterator[bytes]:
        if isinstance(self._chunks, AbstractAsyncContextManager):
            self._cm = self._chunks
            return await self._cm.__aenter__()
        return self._chunks

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._cm is not None:
            await self._cm.__aexit__(exc_type, exc, tb)
            return
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()


# -- bodies written straight to a taken-over connection ------------------------------------

LAST_CHUNK = b"0\r\n\r\n"


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (one copy: the whole chunk goes out in one write)."""
    return b"".join((b"%x\r\n" % len(data), data, b"\r\n"))


def direct_head(content_type: str, headers: Sequence[tuple[str, str]] = (), *,
                length: int | None = None) -> bytes:
    """The head of a body that the view writes itself (chunked unless its ``length`` is
    known); the connection then closes."""
    framing = ("Content-Length", str(length)) if length is not None \
        else ("Transfer-Encoding", "chunked")
    return response_head("200 OK", [("Content-Type", content_type), *headers, framing,
                                    ("Connection", "close")])


async def send_chunks(raw: RawStream, chunks: AsyncIterator[bytes | ThreadChunks]) -> None:
    """Send ``chunks`` chunked over ``raw`` until they end or the client goes; a
    ``ThreadChunks`` is drained by one worker thread (:func:`_send_from_thread`).

    The client sends nothing after its request, so its EOF means it has gone (as dockerd's
    close notification reads it): that cancels the producer, even while it waits for output
    that may never come (``logs -f`` of a quiet container). Cancellation closes ``chunks``.
    """
    async with trio.open_nursery() as nursery:

        async def client_gone() -> None:
            while await raw.receive_some():
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(client_gone)
        try:
            async with aclosing(chunks):  # type: ignore[type-var]
                async for chunk in chunks:
                    if isinstance(chunk, ThreadChunks):
                        await _send_from_thread(raw, chunk)
                    elif chunk:
                        await raw.send_parts([b"%x\r\n" % len(chunk), chunk, b"\r\n"])
            await raw.send_all(LAST_CHUNK)
        except trio.BrokenResourceError:
            log.info("a streamed response stopped: the client went away")
        nursery.cancel_scope.cancel()


async def send_chunks_from_thread(raw: RawStream, chunks: Iterator[bytes]) -> None:
    """Like :func:`send_chunks` for a blocking source: one worker thread reads ``chunks`` and
    writes them to the socket itself, so no chunk makes a trip through the event loop (TLS
    connections fall back to :func:`send_chunks`). A client that goes makes the next write
    fail, which ends the thread; ``chunks`` is closed either way."""
    fd = raw.dup_fd()
    if fd is None:
        await send_chunks(raw, thread_iter(chunks))
        return
    try:
        await trio.to_thread.run_sync(_write_chunked, FdWriter(fd), chunks, True)
    except OSError as exc:
        log.info("a streamed response stopped: %s", exc)  # EPIPE: the client went away
    finally:
        os.close(fd)


async def _send_from_thread(raw: RawStream, chunks: ThreadChunks) -> None:
    """A stretch of a stream drained in one worker thread, written straight to the socket
    (chunk by chunk through the loop on TLS); ``trio.BrokenResourceError`` once the client is
    gone. The iterator is closed either way."""
    fd = raw.dup_fd(blocking=False)  # the loop writes on after it
    try:
        if fd is None:
            async with aclosing(thread_iter(chunks.it)) as pieces:  # type: ignore[type-var]
                async for piece in pieces:
                    if piece:
                        await raw.send_parts([b"%x\r\n" % len(piece), piece, b"\r\n"])
        else:
            await trio.to_thread.run_sync(_write_chunked, FdWriter(fd), chunks.it, False)
    except OSError as exc:  # EPIPE, ECONNRESET
        raw.peer_gone = True
        raise trio.BrokenResourceError("the client closed the connection") from exc
    finally:
        if fd is not None:
            os.close(fd)
        chunks.close()  # also when the thread never started (cancelled first)


def _write_chunked(out: FdWriter, chunks: Iterator[bytes], last: bool) -> None:
    """Blocking: ``chunks`` written as HTTP chunks (and the last chunk, with ``last``);
    ``chunks`` is closed whatever happens."""
    try:
        for chunk in chunks:
            if chunk:
                out.write(chunked(chunk))
        if last:
            out.write(LAST_CHUNK)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


# -- the views' entry points ------------------------------------------------------------------

async def respond_chunked(chunks: Chunks, *, content_type: str,
                          headers: Sequence[tuple[str, str]] = (),
                          keep_alive: bool = False) -> Response:
    """Answer the current request with ``chunks`` as a chunked 200 (see the module).

    Errors the view wants as a status code must be raised before this is called: from here
    on the head is out. Cancellation (the client gone, the daemon stopping) closes
    ``chunks`` and the connection."""
    if keep_alive:
        body = chunks if isinstance(chunks, AbstractAsyncContextManager) else expand(chunks)
        return Response(_RequestScopedBody(body), status=200, content_type=content_type,
                        headers=dict(headers))
    try:
        raw = await hijack(request, head=direct_head(content_type, headers))
    except BaseException:
        await _close(chunks)
        raise
    try:
        await stream_over(raw, chunks)
    finally:
        await raw.aclose()
    return Response(b"")


async def stream_over(raw: RawStream, chunks: Chunks, *, send_buffer: int | None = None) -> None:
    """Send ``chunks`` chunked over a taken-over connection whose head is out (see
    ``respond_chunked``; the events stream calls this itself). ``send_buffer`` sets a small
    kernel send buffer instead of the large one bulk streams get."""
    if send_buffer is None:
        raw.grow_send_buffer()
    else:
        raw.shrink_send_buffer(send_buffer)
    if isinstance(chunks, AbstractAsyncContextManager):
        async with chunks as iterator:
            await send_chunks(raw, iterator)
    else:
        await send_chunks(raw, chunks)


async def respond_chunked_from_thread(chunks: Iterator[bytes], *, content_type: str) -> Response:
    """``respond_chunked`` for a blocking source, read and written by one worker thread."""
    try:
        raw = await hijack(request, head=direct_head(content_type))
    except BaseException:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
        raise
    raw.grow_send_buffer()
    try:
        await send_chunks_from_thread(raw, chunks)
    finally:
        await raw.aclose()
    return Response(b"")


async def respond_sized_from_thread(write: Callable[[BinaryIO], None], length: int,
                                    fallback: Callable[[], BodyChunks], *,
                                    content_type: str) -> Response:
    """A body of known ``length`` that ``write`` produces into a file object from a worker
    thread, straight to the socket; on a TLS connection, ``fallback()``'s chunks instead.
    A client that goes makes the next write fail, which ends the worker."""
    raw = await hijack(request, head=direct_head(content_type, length=length))
    fd = raw.dup_fd()
    try:
        if fd is not None:
            await trio.to_thread.run_sync(write, cast(BinaryIO, FdWriter(fd)))
        else:
            source = fallback()
            if isinstance(source, AbstractAsyncContextManager):
                async with source as iterator:
                    async for chunk in iterator:
                        await raw.send_all(chunk)
            else:
                async for chunk in source:
                    await raw.send_all(chunk)
    except (OSError, trio.BrokenResourceError) as exc:
        log.info("a streamed response stopped: %s", exc)  # the client went away
    finally:
        if fd is not None:
            os.close(fd)
        await raw.aclose()
    return Response(b"")


async def _close(chunks: Chunks) -> None:
    if isinstance(chunks, AbstractAsyncContextManager):
        return  # never entered: nothing started
    aclose: Any = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
