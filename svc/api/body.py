"""Request bodies with back-pressure and without copies.

Quart appends every received chunk to the request body as fast as the socket delivers, so a
200 MB upload read slower than it arrives would sit in memory. svc's body stops taking chunks
above ``HIGH_WATER`` until the view has consumed them; hypercorn's bounded app queue then stops
reading the socket, and the client is slowed down instead of the daemon growing. Chunks are
kept as received and handed out whole (Quart copies each into one growing buffer).

A view that awaits the whole body (a JSON document) consumes nothing until the end, so such a
read lifts the high-water mark and caps the body at ``WHOLE_MAX`` instead: beyond it the
request gets a 413 (it used to wait forever for room that never came).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import trio
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.exceptions import RequestEntityTooLarge

HIGH_WATER = 4 << 20
WHOLE_MAX = 4 << 20  # a body read whole (a JSON document): larger ones get a 413


class BoundedBody(TrioBody):
    def __init__(self, expected: int | None, max_length: int | None) -> None:
        super().__init__(expected, max_length)
        self._chunks: list[bytes] = []
        self._size = 0
        self._room = trio.Event()
        self._room.set()
        self._whole = False

    def append(self, data: bytes) -> None:
        if not data or self._must_raise is not None:
            return
        self._chunks.append(bytes(data))
        self._size += len(data)
        self._has_data.set()
        if self._max_content_length is not None and self._size > self._max_content_length:
            self._too_large()

    def _too_large(self) -> None:
        limit = self._max_content_length or 0
        self._must_raise = RequestEntityTooLarge(
            f"request body too large: a JSON body may be at most {limit >> 20} MiB")
        self.clear()
        self.set_complete()

    def clear(self) -> None:
        self._chunks.clear()
        self._size = 0

    def _take(self) -> bytes:
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self.clear()
        return data

    async def __anext__(self) -> bytes:
        if self._must_raise is not None:
            raise self._must_raise
        if not self._complete.is_set():
            await self._has_data.wait()
        if self._complete.is_set() and not self._size:
            raise StopAsyncIteration()
        data = self._take()
        self._has_data.clear()
        self._room.set()
        return data

    def __await__(self) -> Generator[Any, None, Any]:
        if self._must_raise is not None:
            raise self._must_raise
        if not self._whole:
            self._whole = True
            limit = WHOLE_MAX if self._max_content_length is None \
                else min(WHOLE_MAX, self._max_content_length)
            self._max_content_length = limit
            if self._size > limit:
                self._too_large()
            self._room.set()
        yield from self._complete.wait().__await__()
        if self._must_raise is not None:
            raise self._must_raise
        data = self._take()
        self._chunks.append(data)  # kept: get_data() may be awaited again
        self._size = len(data)
        return data

    async def wait_room(self) -> None:
        """Called by the receiver after each append: wait while the buffer is full."""
        while self._size >= HIGH_WATER and not self._complete.is_set() and not self._whole:
            self._room = trio.Event()
            await self._room.wait()


class BoundedRequest(TrioRequest):
    body_class = BoundedBody  # type: ignore[assignment]


class HTTPConnection(TrioASGIHTTPConnection):
    async def handle_messages(  # type: ignore[override]
            self, nursery: trio.Nursery, request: Any, receive: Any) -> None:
        body = request.body
        while True:
            message = await receive()
            if message["type"] == "http.request":
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    body.set_complete()
                elif isinstance(body, BoundedBody):
                    await body.wait_room()
            elif message["type"] == "http.disconnect":
                break
        nursery.cancel_scope.cancel()
