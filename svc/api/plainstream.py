"""The protocol's side of plain routes (``svc.api.fastpath``): which requests may be answered
plainly, as h11 parsed them, and the stream that writes the answer.

A GET or HEAD without a body is asked about as it is. A POST is asked about when its whole
body came with its head (``posted``): an exec's create and start carry a few hundred bytes,
which a client writes along with the head, and whose plain views then spare each exec two
ASGI requests (about 1.3 ms of CPU each). A body still on its way, a chunked one, one
that waits for ``100 Continue`` or is larger than ``POSTED_MAX`` goes the full way.
"""

from __future__ import annotations

from typing import Any

import h11
import trio
from hypercorn.protocol.events import EndBody
from hypercorn.protocol.events import Event as StreamEvent

from svc.api.fastpath import PlainRoutes, Posted, Reply, Streamer
from svc.api.heads import wants_upgrade

POSTED_MAX = 64 * 1024  # a POST answered plainly (an exec's body is ~100-300 bytes)


def bodiless(headers: Any) -> bool:
    """No body and no upgrade (h11 gives header names in lower case)."""
    for name, value in headers:
        if name == b"transfer-encoding" or name == b"upgrade" \
                or (name == b"content-length" and value != b"0"):
            return False
    return True


def posted(headers: Any, buffered: bytes) -> Posted | None:
    """The body of a POST with these ``headers`` (h11's, in lower case) when all of it is in
    ``buffered`` (h11's unparsed bytes after the head: the body, and anything pipelined
    after it); None when it is not all there, or not a body of a known length within
    ``POSTED_MAX`` (h11 then reads it, and the request goes the full way)."""
    length = 0
    content_type = None
    for name, value in headers:
        if name == b"content-length":
            length = int(value)  # (h11 checked it)
        elif name == b"transfer-encoding" or name == b"expect":
            return None
        elif name == b"content-type":
            content_type = value.decode("latin-1")
    if length > POSTED_MAX or len(buffered) < length:
        return None
    return Posted(buffered[:length], content_type, wants_upgrade(headers))


def plain_reply(plain: PlainRoutes, request: h11.Request, buffered: bytes) -> Reply | None:
    """The plain answer to ``request`` (h11's, with ``buffered`` its unparsed bytes after
    the head), or None for the full way."""
    if request.method in (b"GET", b"HEAD") and bodiless(request.headers):
        return plain.answer(request.method, request.target)
    if request.method == b"POST":
        sent = posted(request.headers, buffered)
        if sent is not None:
            return plain.answer(b"POST", request.target, sent)
    return None


class PlainStream:
    """The stream of a request answered by a plain route: once h11 has seen the request's
    end, the answer is written and the connection serves its next request; or, for a
    plain stream, the connection is taken over and the stream runs in the connection's task
    group until it ends or the client goes (then the connection closes)."""

    def __init__(self, protocol: Any, method: bytes, reply: Reply) -> None:
        self._protocol = protocol
        self._method = method
        self._reply = reply

    async def handle(self, event: StreamEvent) -> None:
        if not isinstance(event, EndBody):
            return  # (no body comes; a StreamClosed needs nothing)
        p, reply = self._protocol, self._reply
        if reply.stream is not None:
            self.start(await p.hijack({"headers": []}, b""))
            return
        await p._send_h11_event(h11.Response(
            status_code=reply.status,
            headers=[*reply.headers, *p.config.response_headers("h11")]))
        if self._method != b"HEAD" and reply.body:
            await p._send_h11_event(h11.Data(data=reply.body))
        await p._send_h11_event(h11.EndOfMessage())
        await p._maybe_recycle()

    def start(self, raw: Any) -> None:
        """Run the plain stream on the taken-over connection ``raw``, in the connection's
        task group."""
        assert self._reply.stream is not None
        self._protocol.task_group.spawn(self._run, self._reply.stream, raw)

    async def _run(self, stream: Streamer, raw: Any) -> None:
        try:
            await stream.run(raw, self._reply.head)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went
        finally:
            with trio.CancelScope(shield=True):
                await raw.aclose()
                await self._protocol._maybe_recycle()  # the connection closes
