"""The protocol's side of plain routes (``svc.api.fastpath``): which requests may be answered
plainly, as h11 parsed them, and the streams that write the answer.

A GET or HEAD without a body is asked about as it is. A POST to a route with a plain form
for POSTs is kept (``PendingPost``) until its body has all come, and then asked about with
its body: an exec's create and start carry a few hundred bytes, and their plain views spare
each exec two ASGI requests (about 1.3 ms of CPU each). What the plain view leaves, and a
chunked body, one that waits for ``100 Continue`` or one larger than ``POSTED_MAX``, goes
the full way.
"""

from __future__ import annotations

import logging
from typing import Any

import h11
import trio
from hypercorn.protocol.events import Body, EndBody
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.h11 import STREAM_ID, H11Protocol

from svc.api.fastpath import PlainRoutes, Posted, Reply, Streamer
from svc.api.heads import wants_upgrade

log = logging.getLogger("svc.api")
POSTED_MAX = 64 * 1024  # a POST answered plainly (an exec's body is ~100-300 bytes)


def bodiless(headers: Any) -> bool:
    """No body and no upgrade (h11 gives header names in lower case)."""
    for name, value in headers:
        if name == b"transfer-encoding" or name == b"upgrade" \
                or (name == b"content-length" and value != b"0"):
            return False
    return True


def post_head(headers: Any) -> Posted | None:
    """What a POST with these ``headers`` (h11's, in lower case) tells its plain view, its
    body yet to come; None when the body is not of a known length within ``POSTED_MAX``, or
    its client waits for ``100 Continue`` (the full way then reads it)."""
    length = 0
    content_type = None
    for name, value in headers:
        if name == b"content-length":
            length = int(value)  # (h11 checked it)
        elif name == b"transfer-encoding" or name == b"expect":
            return None
        elif name == b"content-type":
            content_type = value.decode("latin-1")
    if length > POSTED_MAX:
        return None
    return Posted(b"", content_type, wants_upgrade(headers))


def plain_stream(protocol: Any, plain: PlainRoutes,
                 request: h11.Request) -> PlainStream | PendingPost | None:
    """The stream that serves ``request`` plainly (``protocol``'s, h11 having parsed its
    head), or None for the full way."""
    if request.method in (b"GET", b"HEAD") and bodiless(request.headers):
        reply = plain.answer(request.method, request.target)
        return None if reply is None else PlainStream(protocol, request.method, reply)
    if request.method == b"POST" and plain.takes_post(request.target):
        head = post_head(request.headers)
        if head is not None:
            return PendingPost(protocol, plain, request, head)
    return None


class PendingPost:
    """A POST to a route with a plain form, until its body has all come: then the plain view
    is asked, and either answers (a ``PlainStream`` takes the request on) or leaves it to
    the full way, where hypercorn's own stream is given the request and its body as if both
    had just come. A client that goes before its body's end leaves nothing done."""

    def __init__(self, protocol: Any, plain: PlainRoutes, request: h11.Request,
                 head: Posted) -> None:
        self._protocol = protocol
        self._plain = plain
        self._request = request
        self._head = head
        self._body = bytearray()

    async def handle(self, event: StreamEvent) -> None:
        if isinstance(event, Body):
            self._body += event.data  # (at most POSTED_MAX: its length was known)
        elif isinstance(event, EndBody):
            await self._decide(event)

    async def _decide(self, end: EndBody) -> None:
        p, request, body = self._protocol, self._request, bytes(self._body)
        self._head.body = body
        reply = self._plain.answer(b"POST", request.target, self._head)
        if reply is not None:
            p.stream = stream = PlainStream(p, b"POST", reply)
            p.keep_alive_requests += 1
            await stream.handle(end)
            return
        # hypercorn's own stream (not HijackH11Protocol's, which would keep it again)
        await H11Protocol._create_stream(p, request)
        if body:
            await p.stream.handle(Body(stream_id=STREAM_ID, data=body))
        await p.stream.handle(end)


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
        except Exception:  # a bug: this connection closes, never the server
            log.exception("a plain stream failed")
        finally:
            with trio.CancelScope(shield=True):
                await raw.aclose()
                await self._protocol._maybe_recycle()  # the connection closes
