"""Streaming response bodies tied to the request's cancel scope.

``StreamBody`` wraps an async iterator of byte chunks together with a cleanup callable, so that
whatever the stream holds (a subscription, a channel) is released however the response ends:
normally, by a producer error, or by the client going away (quart-trio cancels the request
nursery within milliseconds of a disconnect, and that nursery is where the body is iterated).
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType

from quart.wrappers.response import ResponseBody


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
