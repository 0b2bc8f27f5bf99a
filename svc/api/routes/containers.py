"""Container endpoints: create, list, inspect, the lifecycle verbs, wait and logs."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

import trio
from quart import Blueprint, Response, request, websocket
from quart_trio import QuartTrio

from svc.api import container_shapes as shapes
from svc.api.afterresponse import after_response
from svc.api.detachkeys import DEFAULT as DEFAULT_KEYS
from svc.api.detachkeys import parse_detach_keys
from svc.api.hijack import hijack
from svc.api.params import json_body, parse_bool, qbool, qint, qstr
from svc.api.shaping import json_response
from svc.api.streaming import respond_chunked, respond_chunked_from_thread
from svc.api.versioning import api_version
from svc.api.wiring import Wired
from svc.engine.backend import ContainersBackend
from svc.engine.containers.container import Container
from svc.engine.containers.journal_logs import journal_stream
from svc.engine.containers.logs import follows, log_stream, read_log
from svc.engine.containers.service import ContainerService
from svc.engine.containers.shipping import READABLE
from svc.errors import InvalidParameter, NotFound
from svc.models.containers import (
    CreateBody,
    CreateResponse,
    HostConfigBody,
    TopResponse,
    UpdateBody,
    UpdateResponse,
    WaitResponse,
)
from svc.wire.timefmt import parse_timestamp_ns

log = logging.getLogger("svc.api")
bp = Blueprint("containers", __name__)
_backend: Wired[ContainersBackend] = Wired("containers")


def register(app: QuartTrio, backend: ContainersBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)
RAW_STREAM = "application/vnd.svc.raw-stream"


def containers() -> ContainerService:
    return _backend.get().containers


def _ctr(ref: str) -> Container:
    return containers().resolve(ref)


def no_content() -> Response:
    return Response(b"", status=204)


@bp.post("/containers/create")
async def create() -> Response:
    body = await json_body(CreateBody)
    assert body is not None
    c = await containers().create(body, qstr("name"))
    return json_response(CreateResponse(Id=c.id, Warnings=c.warnings), status=201)


@bp.post("/containers/<ref>/start")
async def start(ref: str) -> Response:
    c = _ctr(ref)
    raw = await request.get_data(as_text=False)
    assert isinstance(raw, bytes)
    if raw.strip() and raw.strip() != b"null":
        # HostConfig on start: only for clients before v1.24 (dockerd applies it then)
        hc = await json_body(HostConfigBody, required=False)
        if hc is not None and hc.model_dump(exclude_defaults=True):
            await containers().apply_start_host_config(c, hc)
    detach = qstr("detachKeys")
    if detach:
        parse_detach_keys(detach)
    await containers().start(c)
    return no_content()


@bp.post("/containers/<ref>/stop")
async def stop(ref: str) -> Response:
    c = _ctr(ref)
    await containers().stop(c, qint("t"))
    return no_content()


@bp.post("/containers/<ref>/restart")
async def restart(ref: str) -> Response:
    c = _ctr(ref)
    await containers().restart(c, qint("t"))
    return no_content()


@bp.post("/containers/<ref>/kill")
async def kill(ref: str) -> Response:
    c = _ctr(ref)
    await containers().kill(c, qstr("signal"))
    return no_content()


@bp.post("/containers/<ref>/pause")
async def pause(ref: str) -> Response:
    await containers().pause(_ctr(ref))
    return no_content()


@bp.post("/containers/<ref>/unpause")
async def unpause(ref: str) -> Response:
    await containers().unpause(_ctr(ref))
    return no_content()


@bp.post("/containers/<ref>/rename")
async def rename(ref: str) -> Response:
    c = _ctr(ref)
    await containers().rename(c, qstr("name") or "")
    return no_content()


@bp.delete("/containers/<ref>")
async def remove(ref: str) -> Response:
    c = _ctr(ref)
    svc = containers()
    # v: the container's anonymous volumes go too (named ones and binds never do)
    await svc.remove(c, force=qbool("force"), volumes=qbool("v"), announce=False)
    after_response(lambda: svc.removed(c))  # destroy follows the answer (see afterresponse)
    return no_content()


@bp.delete("/containers/<ref>/<alias>")
async def remove_link(ref: str, alias: str) -> Response:
    """``DELETE /containers/<linker>/<alias>?link=1``: the legacy link goes, both containers
    stay (docker-py's ``remove_container('b/alias', link=True)``)."""
    if not qbool("link"):
        raise NotFound(f"No such container: {ref}/{alias}")
    await containers().remove_link(_ctr(ref), alias)
    return no_content()


@bp.post("/containers/<ref>/attach")
async def attach(ref: str) -> Response:
    c = _ctr(ref)
    keys = parse_detach_keys(qstr("detachKeys") or DEFAULT_KEYS)
    logs, stream = qbool("logs"), qbool("stream")
    stdin, stdout, stderr = qbool("stdin"), qbool("stdout"), qbool("stderr")
    raw = await hijack(request)
    raw.grow_send_buffer()
    try:
        await containers().attach(c, raw, logs=logs, follow=stream, stdin=stdin,
                                  stdout=stdout, stderr=stderr, detach_keys=keys)
    finally:
        await raw.aclose()
    return Response(b"")


@bp.get("/containers/<ref>/stats")
async def stats(ref: str) -> Response:
    c = _ctr(ref)
    stream = qbool("stream", True)
    version = api_version()
    objects = containers().stats.stream(c, stream=stream)
    if not stream:  # one object: an ordinary response with a Content-Length
        async with aclosing(objects):  # type: ignore[type-var]
            async for doc in objects:
                return json_response(shapes.stats(doc, version))

    async def body() -> AsyncIterator[bytes]:
        async with aclosing(objects):  # type: ignore[type-var]
            async for doc in objects:
                yield json.dumps(shapes.stats(doc, version), separators=(",", ":")).encode() \
                    + b"\n"

    return await respond_chunked(body(), content_type="application/json")


@bp.websocket("/containers/<ref>/attach/ws")
async def attach_ws(ref: str) -> None:
    """Attach over a websocket (RFC 6455): stdin from the client's messages, the output as
    binary messages of raw bytes (not multiplexed, as dockerd sends them)."""
    c = _ctr(ref)
    keys = parse_detach_keys(_ws_arg("detachKeys") or DEFAULT_KEYS)
    await websocket.accept()
    stream = WebsocketStream()
    await containers().attach(c, stream, logs=_ws_flag("logs"), follow=_ws_flag("stream"),
                              stdin=_ws_flag("stdin"), stdout=_ws_flag("stdout"),
                              stderr=_ws_flag("stderr"), detach_keys=keys, raw_output=True)
    await websocket.close(1000)


def _ws_arg(name: str) -> str | None:
    return websocket.args.get(name)


def _ws_flag(name: str) -> bool:
    return parse_bool(name, websocket.args.get(name))


class WebsocketStream(trio.abc.Stream):
    """The current websocket as a byte stream for ``engine.attach.session``."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            msg = await websocket.receive()
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return b""
        return msg.encode() if isinstance(msg, str) else bytes(msg)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await websocket.send(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@bp.post("/containers/<ref>/update")
async def update(ref: str) -> Response:
    c = _ctr(ref)
    body = await json_body(UpdateBody)
    assert body is not None
    warnings = await containers().ops.update(c, body, restart_policy=api_version() >= (1, 23))
    return json_response(UpdateResponse(Warnings=warnings))


@bp.get("/containers/<ref>/top")
async def top(ref: str) -> Response:
    c = _ctr(ref)
    titles, rows = await containers().ops.top(c, qstr("ps_args") or "-ef")
    return json_response(TopResponse(Titles=titles, Processes=rows))


@bp.post("/containers/<ref>/resize")
async def resize(ref: str) -> Response:
    c = _ctr(ref)
    height, width = qint("h"), qint("w")
    if height is None or width is None:
        raise InvalidParameter("resize needs both h and w (characters)")
    await containers().ops.resize(c, height, width)
    return Response(b"", status=200, content_type="text/plain")


@bp.post("/containers/<ref>/wait")
async def wait(ref: str) -> Response:
    """The headers go out at once; the body when the container stops. A client that leaves
    cancels the wait (nothing else depends on it)."""
    c = _ctr(ref)
    svc = containers()
    after = c.exits  # the next exit from the request's arrival, even if the body starts later

    async def body() -> AsyncIterator[bytes]:
        code = await svc.wait_exit(c, after)
        yield WaitResponse(StatusCode=code).model_dump_json().encode() + b"\n"

    return await respond_chunked(body(), content_type="application/json", keep_alive=True)


# -- logs -----------------------------------------------------------------------------------


@bp.get("/containers/<ref>/logs")
async def logs(ref: str) -> Response:
    c = _ctr(ref)
    stdout, stderr = qbool("stdout"), qbool("stderr")
    if not (stdout or stderr):
        raise InvalidParameter("Bad parameters: you must choose at least one stream")
    if c.log_driver() not in READABLE:
        raise InvalidParameter("configured logging reader does not support reading (the "
                               f'container\'s log driver is "{c.log_driver()}"; json-file and '
                               "journald can be read back)")
    since_raw = qstr("since")
    try:
        since_ns = parse_timestamp_ns(since_raw) if since_raw and since_raw != "0" else 0
    except ValueError:
        raise InvalidParameter(f"invalid since value {since_raw!r}: Unix seconds") from None
    tail_raw = qstr("tail") or "all"
    if tail_raw == "all":
        tail = None
    else:
        try:
            tail = int(tail_raw)
        except ValueError:
            raise InvalidParameter(f"invalid tail value {tail_raw!r}: a number or all") \
                from None
        tail = None if tail < 0 else tail
    timestamps, follow = qbool("timestamps"), qbool("follow")
    if c.log_driver() == "journald":
        return await respond_chunked(
            journal_stream(c, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                           timestamps=timestamps, follow=follow), content_type=RAW_STREAM)
    if follows(c, follow):
        return await respond_chunked(
            log_stream(c, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                       timestamps=timestamps, follow=True), content_type=RAW_STREAM)
    return await respond_chunked_from_thread(
        read_log(c, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                 timestamps=timestamps), content_type=RAW_STREAM)


# -- filesystem -----------------------------------------------------------------------------
