"""Request bodies with back-pressure.

Quart appends every received chunk to the request body as fast as the socket delivers, so a
200 MB upload read slower than it arrives would sit in memory. svc's body stops taking chunks
above ``HIGH_WATER`` until the view has consumed them; hypercorn's bounded app queue then stops
reading the socket, and the client is slowed down instead of the daemon growing.
"""

from __future__ import annotations

from typing import Any

import trio
from quart_trio.asgi import TrioASGIHTTPConnection
from quart_trio.wrappers.request import TrioBody, TrioRequest

HIGH_WATER = 4 << 20


class BoundedBody(TrioBody):
    def __init__(self, expected: int | None, max_length: int | None) -> None:
        super().__init__(expected, max_length)
        self._room = trio.Event()
        self._room.set()

    async def __anext__(self) -> bytes:
        data: bytes = await super().__anext__()
        self._room.set()
        return data

    async def wait_room(self) -> None:
        """Called by the receiver after each append: wait while the buffer is full."""
        while len(self._data) >= HIGH_WATER and not self._complete.is_set():
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
