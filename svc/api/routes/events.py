"""GET /events: replay and live stream of engine events, shaped per API version."""

from __future__ import annotations

import logging
import os
from contextlib import aclosing
from functools import partial

import pydantic_core
import trio
from quart import Blueprint, Response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import MultiDict

from svc.api.barestream import BareStream
from svc.api.fastpath import Plain, Streamer, plain_alternative
from svc.api.hijack import hijack
from svc.api.params import Filters, parse_filters
from svc.api.rawstream import RawStream
from svc.api.streaming import LAST_CHUNK, chunked, direct_head
from svc.api.taskless import TasklessStream
from svc.api.versioning import Version, api_version
from svc.api.wiring import Wired
from svc.engine.backend import EventsBackend
from svc.engine.events import Event, Subscription
from svc.errors import InvalidParameter
from svc.models.events import StreamError
from svc.wire.timefmt import parse_timestamp_ns

log = logging.getLogger("svc.api.events")
bp = Blueprint("events", __name__)
_backend: Wired[EventsBackend] = Wired("events")


def register(app: QuartTrio, backend: EventsBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)

# An events stream's kernel send buffer (doubled by the kernel): a client that stops reading
# blocks the stream's writes after ~64 KiB (some 200 events), so the lag that cuts it off
# counts events it has not taken, not megabytes the kernel holds for it.
SEND_BUFFER = 32 * 1024
CUT_GRACE = 10.0  # how long a cut-off stream's blocked write may still finish

FILTERS_V122 = ("container", "event", "image", "label", "type", "volume", "network")


def allowed_filters(version: Version) -> tuple[str, ...]:
    if version >= (1, 22):
        return FILTERS_V122
    if version >= (1, 21):
        return ("event", "image", "container", "label")
    if version >= (1, 17):
        return ("event", "image", "container")
    return ("event", "image")


def wire_shape(version: Version) -> str:
    if version >= (1, 22):
        return "v122"
    return "v121" if version >= (1, 21) else "legacy"


def encode(ev: Event, shape: str) -> bytes:
    """The event's wire bytes in one shape, computed once per event and shape.

    Hot path: the dict is laid out exactly as ``EventMessage``/``LegacyEventMessage`` define
    the shape (tests/unit/test_event_wire.py checks that the models parse and re-emit these
    bytes unchanged) and serialized by pydantic-core directly, ~4x cheaper than building a
    model per event.
    """
    cached = ev.wire.get(shape)
    if cached is not None:
        return cached
    body: dict[str, object] = {}
    if shape == "v122":
        if ev.type in ("container", "image"):
            body["status"] = ev.action
            body["id"] = ev.actor_id
            if ev.type == "container" and "image" in ev.attributes:
                body["from"] = ev.attributes["image"]
        body.update(Type=ev.type, Action=ev.action,
                    Actor={"ID": ev.actor_id, "Attributes": ev.attributes},
                    type=ev.type, action=ev.action,
                    actor={"id": ev.actor_id, "attributes": ev.attributes},
                    scope="local", time=ev.time, timeNano=ev.time_nano)
    else:
        body.update(status=ev.action, id=ev.actor_id)
        if ev.type == "container" and "image" in ev.attributes:
            body["from"] = ev.attributes["image"]
        body["time"] = ev.time
        if shape == "v121":
            body["timeNano"] = ev.time_nano
    data = pydantic_core.to_json(body) + b"\n"
    ev.wire[shape] = data
    return data


def _arg(args: MultiDict[str, str], name: str) -> str | None:
    """``args.get(name)`` without werkzeug's cost for a missing name (it raises and catches a
    ``BadRequestKeyError``, a tenth of a stream's opening)."""
    return args.get(name) if name in args else None


def _time_param(args: MultiDict[str, str], name: str) -> int | None:
    raw = _arg(args, name)
    if raw is None or raw == "":
        return None
    try:
        return parse_timestamp_ns(raw)
    except ValueError as exc:
        raise InvalidParameter(f"invalid value for {name}: {exc}") from None


def _params(args: MultiDict[str, str], version: Version) -> tuple[Filters, int | None,
                                                                 int | None]:
    """The filters, ``since`` and ``until`` of a request (InvalidParameter naming a bad one)."""
    filters = parse_filters(_arg(args, "filters"), allowed_filters(version))
    since, until = _time_param(args, "since"), _time_param(args, "until")
    if version < (1, 22):
        filters["type"] = ["container", "image"]  # the only kinds the old shape can express
    return filters, since, until


class DirectChunks:
    """A subscriber's writer for the bus's fan-out (``svc.engine.fanout``): a batch as one
    chunk, written to the plain socket without waiting; what the socket does not take is
    kept for the subscriber's task (``rest``)."""

    def __init__(self, fd: int, shape: str) -> None:
        self._fd = fd
        self._shape = shape
        self.rest = b""

    def __call__(self, batch: list[Event]) -> bool:
        body = b"".join([encode(ev, self._shape) for ev in batch])
        data = b"%x\r\n%b\r\n" % (len(body), body)
        try:
            done = os.write(self._fd, data)  # the socket is non-blocking (trio's)
        except BlockingIOError:
            done = 0
        except OSError:  # the client went: its task finds out when it writes the rest
            done = 0
        self.rest = data[done:]
        return not self.rest


def _write_directly(sub: Subscription, raw: RawStream | BareStream,
                    shape: str) -> DirectChunks | None:
    """Let the fan-out write ``sub``'s events to a plain socket (its head is out)."""
    sock = raw.plain_socket
    if sock is None:
        return None
    writer = DirectChunks(sock.fileno(), shape)
    sub.direct = writer
    return writer


@bp.get("/events")
async def events() -> Response:
    version = api_version()
    filters, since, until = _params(request.args, version)
    # Subscribe before the headers go out: nothing published from here on is missed.
    sub = _backend.get().events.subscribe(filters, since_ns=since, until_ns=until)
    try:
        raw = await hijack(request, head=direct_head("application/json"))
        try:
            await _stream(sub, raw, version)
        finally:
            await raw.aclose()
        return Response(b"")
    finally:
        sub.close()  # also when the stream never started


@plain_alternative(bp, "events", stream=True)
def events_plain(req: Plain) -> Streamer:
    """The same stream, opened by the protocol (``svc.api.fastpath``): a client that opens
    many streams at once pays for no ASGI request each."""
    filters, since, until = _params(req.args, req.version)

    async def run(raw: RawStream, head: bytes) -> None:
        sub = _backend.get().events.subscribe(filters, since_ns=since, until_ns=until)
        try:
            await raw.send_all(head)  # subscribed first: nothing published after is missed
            await _stream(sub, raw, req.version)
        finally:
            sub.close()

    if since is not None or until is not None:
        return Streamer(run)  # (a replay, an end: its task writes them)
    return Streamer(run, adopt=partial(_adopt, filters=filters, version=req.version))


def _adopt(conn: TasklessStream, head: bytes, *, filters: Filters, version: Version) -> bool:
    """Open a live stream with no task (``svc.api.taskless``): subscribe, write the head,
    and leave the socket to the bus's fan-out while the client keeps up. The client's going
    closes it; a write cut short or the subscription's end hands it to a task
    (``_resume``). False (nothing done) when the bus cannot hold it."""
    bus = _backend.get().events
    if bus.closed or not bus.fanout.running:
        return False
    conn.shrink_send_buffer(SEND_BUFFER)
    sub = bus.subscribe(filters)
    done = conn.write(head)  # subscribed first: nothing published after is missed
    if done < 0:  # the client has gone already
        sub.close()
        conn.close()
        return True
    writer = DirectChunks(conn.fd, wire_shape(version))
    writer.rest = head[done:]  # (a new socket takes a head whole: nearly always empty)
    sub.direct = writer
    resume = partial(conn.hand_over, partial(_resume, sub, writer, version))
    if writer.rest:
        resume()
        return True

    def detach() -> None:  # (closed: by the client's going, or by the server's end)
        bus.fanout.forget(sub)  # (no hand-over: nothing is left to write)
        sub.close()

    conn.on_close(detach)
    conn.when_gone(conn.close)
    bus.fanout.adopt(sub, resume)
    return True


async def _resume(sub: Subscription, writer: DirectChunks, version: Version,
                  raw: BareStream) -> None:
    """An adopted stream's task, from where the fan-out left it (``writer.rest`` first)."""
    try:
        await _stream(sub, raw, version, writer)
    finally:
        sub.close()


async def _stream(sub: Subscription, raw: RawStream | BareStream, version: Version,
                  writer: DirectChunks | None = None) -> None:
    """``sub``'s events over ``raw`` (its head is out), chunked, until they end or the client
    goes; on a plain socket the bus's fan-out writes them while the client keeps up
    (``writer``: an adopted stream's, set up already). The caller closes ``sub``.

    No task reads the client or keeps time: its EOF (it sends nothing after its request, so
    that means it has gone, as dockerd's close notification reads it) ends the subscription,
    and a write that waits on it fails; a subscriber cut off while its client reads nothing
    has its connection shut ``CUT_GRACE`` later by the connection's clock."""
    shape = wire_shape(version)
    if writer is None:
        raw.shrink_send_buffer(SEND_BUFFER)
        writer = _write_directly(sub, raw, shape)

    def gone() -> None:
        sub.close()
        if sub.sending:  # waiting on a client that will not read: fail the write
            raw.abort()

    raw.when_gone(gone)
    # The write it waits in may still finish (with the reason after it) if the client reads
    # within the grace. Cut off, it is no longer on the bus: it holds one batch and the
    # socket's small buffer, nothing that grows.
    sub.on_cut = partial(raw.abort_after, CUT_GRACE)
    try:
        await _send(sub, raw, shape, writer)
    except trio.BrokenResourceError:
        log.info("an event stream stopped: the client went away")


async def _send(sub: Subscription, raw: RawStream | BareStream, shape: str,
                writer: DirectChunks | None) -> None:
    # Batches are written as one chunk each: per-event writes cost ~10x the CPU (stack notes §4).
    # (closed here, not by the garbage collector: trio would start a task to finalize it)
    async with aclosing(sub.batches()) as batches:
        # (before the first batch: what a write made before this task left, ``_resume``)
        batch: list[Event] | None = []
        while batch is not None:
            if raw.client_done:
                return
            sub.sending = True  # until the client has taken it (the socket has room again)
            if writer is not None and writer.rest:  # what a direct write left
                rest, writer.rest = writer.rest, b""
                await raw.send_all(rest)
            if batch:
                body = b"".join([encode(ev, shape) for ev in batch])
                await raw.send_parts([b"%x\r\n" % len(body), body, b"\r\n"])
            sub.sending = False
            batch = await anext(batches, None)
    if raw.client_done:
        return
    if sub.error:
        await raw.send_all(chunked(
            StreamError(error=sub.error, errorDetail={"message": sub.error}).wire()))
    await raw.send_all(LAST_CHUNK)
