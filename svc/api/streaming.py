"""Streaming response bodies tied to the request's cancel scope.

``StreamBody`` wraps an async iterator of byte chunks together with a cleanup callable, so that
whatever the stream holds (a subscription, a channel) is released however the response ends:
normally, by a producer error, or by the client going away (quart-trio cancels the request
nursery within milliseconds of a disconnect, and that nursery is where the body is iterated).

Bulk streams (logs) skip hypercorn instead: the view takes the connection over, and
``send_chunks`` or ``send_chunks_from_thread`` write a chunked body straight to the socket.
Going through Quart, hypercorn and h11 costs more CPU than producing the bytes does.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, aclosing
from types import TracebackType

import trio
from quart.wrappers.response import ResponseBody

from svc.api.heads import response_head
from svc.api.rawstream import RawStream
from svc.engine.streams import FdWriter, thread_iter

log = logging.getLogger("svc.api.streaming")


class StreamBody(ResponseBody):
    def __init__(self, chunks: AsyncIterator[bytes], cleanup: Callable[[], None]) -> None:
        self._chunks = chunks
        # Runs once: on __aexit__, or when a response that was never sent is collected (the
        # request was cancelled between the view returning and the body being entered).
        self._cleanup = weakref.finalize(self, cleanup)

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._cleanup()


class ChannelBody(ResponseBody):
    """A response body produced by a ``trio.as_safe_channel`` generator.

    The generator (and the nursery inside it) starts when Quart begins sending the body and is
    closed when sending ends, inside the request's cancel scope: a disconnect cancels it.
    """

    def __init__(self, cm: AbstractAsyncContextManager[AsyncIterator[bytes]]) -> None:
        self._cm = cm

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return await self._cm.__aenter__()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self._cm.__aexit__(exc_type, exc, tb)


# -- bodies written straight to a taken-over connection ------------------------------------

LAST_CHUNK = b"0\r\n\r\n"


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (one copy: the whole chunk goes out in one write)."""
    return b"".join((b"%x\r\n" % len(data), data, b"\r\n"))


def direct_head(content_type: str) -> bytes:
    """The head of a chunked body that the view writes itself; the connection then closes."""
    return response_head("200 OK", [("Content-Type", content_type),
                                    ("Transfer-Encoding", "chunked"), ("Connection", "close")])


async def send_chunks(raw: RawStream, chunks: AsyncIterator[bytes]) -> None:
    """Send ``chunks`` chunked over ``raw`` until they end or the client goes.

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
                    if chunk:
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
    out = FdWriter(fd)

    def run() -> None:
        try:
            for chunk in chunks:
                if chunk:
                    out.write(chunked(chunk))
            out.write(LAST_CHUNK)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    try:
        await trio.to_thread.run_sync(run)
    except OSError as exc:
        log.info("a streamed response stopped: %s", exc)  # EPIPE: the client went away
    finally:
        os.close(fd)
