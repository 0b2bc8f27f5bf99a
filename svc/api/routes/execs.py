"""Exec endpoints: create (under the container), start, resize, inspect.

Create, a start that stays attached, and inspect have plain forms too (``svc.api.fastpath``):
``docker exec`` makes those three requests for every command, and through the full ASGI
stack each cost more CPU than the rest of the exec's work in the daemon. Each form runs the
same code as its Quart view, which still serves what the plain form leaves to it (a
chunked body, errors, a detached start).
"""

from __future__ import annotations

import logging

from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api import container_shapes as shapes
from svc.api.detachkeys import DEFAULT as DEFAULT_KEYS
from svc.api.detachkeys import parse_detach_keys
from svc.api.fastpath import Answer, Plain, Streamer, plain_alternative
from svc.api.heads import RAW_STREAM, raw_stream_head
from svc.api.hijack import hijack
from svc.api.params import parse_json_body, qint
from svc.api.rawstream import RawStream
from svc.api.shaping import json_bytes, json_response
from svc.api.versioning import Version, api_version
from svc.api.wiring import Wired
from svc.engine.backend import ContainersBackend
from svc.engine.containers.exec import ExecInstance
from svc.engine.containers.service import ContainerService
from svc.errors import InvalidParameter, SvcError
from svc.models.containers import CreateResponse
from svc.models.execs import ExecCreateBody, ExecInspect, ExecProcessConfig, ExecStartBody

log = logging.getLogger("svc.api")
bp = Blueprint("execs", __name__)
_backend: Wired[ContainersBackend] = Wired("execs")


def register(app: QuartTrio, backend: ContainersBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def containers() -> ContainerService:
    return _backend.get().containers


def _create(ref: str, raw: bytes, content_type: str | None) -> bytes:
    """Create the instance the body asks for; its answer's body."""
    svc = containers()
    c = svc.resolve(ref)
    body = parse_json_body(ExecCreateBody, raw, content_type)
    assert body is not None
    keys = parse_detach_keys(body.DetachKeys or DEFAULT_KEYS)
    inst = svc.execs.create(c, cmd=list(body.Cmd or []), tty=body.Tty,
                            stdin=body.AttachStdin, stdout=body.AttachStdout,
                            stderr=body.AttachStderr, user=body.User,
                            privileged=body.Privileged, detach_keys=keys)
    return json_bytes(CreateResponse(Id=inst.id))


@bp.post("/containers/<ref>/exec")
async def create(ref: str) -> Response:
    raw = await request.get_data(as_text=False)
    assert isinstance(raw, bytes)
    body = _create(ref, raw, request.headers.get("Content-Type"))
    return Response(body, status=201, content_type="application/json")


@plain_alternative(bp, "create", post=True)
def create_plain(req: Plain, ref: str) -> Answer:
    return Answer(_create(ref, req.body, req.content_type), status=201)


def _startable(exec_id: str, raw: bytes, content_type: str | None) \
        -> tuple[ExecInstance, ExecStartBody]:
    """The instance to start and the start's options; its 404, 400 and 409s."""
    svc = containers()
    inst = svc.execs.get(exec_id)
    body = parse_json_body(ExecStartBody, raw, content_type, required=False) \
        or ExecStartBody()
    svc.execs.check_startable(inst)
    return inst, body


async def _attached(inst: ExecInstance, raw: RawStream, tty: bool) -> None:
    """Run the instance with the taken-over connection as its attached client."""
    raw.grow_send_buffer()
    try:
        await containers().execs.start(inst, raw, raw_output=tty)
    finally:
        await raw.aclose()


@bp.post("/exec/<exec_id>/start")
async def start(exec_id: str) -> Response:
    data = await request.get_data(as_text=False)
    assert isinstance(data, bytes)
    inst, body = _startable(exec_id, data, request.headers.get("Content-Type"))
    if body.Detach:
        await containers().execs.start(inst, None)
        return Response(b"", status=200)
    await _attached(inst, await hijack(request), body.Tty)
    return Response(b"")


@plain_alternative(bp, "start", post=True)
def start_plain(req: Plain, exec_id: str) -> Streamer | None:
    """An attached start, its connection taken over by the protocol; a detached one goes
    the full way (its answer waits for the process to start)."""
    inst, body = _startable(exec_id, req.body, req.content_type)
    if body.Detach:
        return None

    async def run(raw: RawStream, head: bytes) -> None:
        raw.head = head  # (as ``hijack`` does: its writes wait until the client has read it)
        await raw.send_all(head)
        await raw.until_head_read()
        try:
            await _attached(inst, raw, body.Tty)
        except SvcError as exc:  # (started or stopped since: as after ``hijack``, it closes)
            log.info("exec %s: %s", inst.id, exc)

    return Streamer(run, content_type=RAW_STREAM, head=raw_stream_head(req.upgrade))


@bp.post("/exec/<exec_id>/resize")
async def resize(exec_id: str) -> Response:
    svc = containers()
    inst = svc.execs.get(exec_id)
    height, width = qint("h"), qint("w")
    if height is None or width is None:
        raise InvalidParameter("resize needs both h and w (characters)")
    await svc.execs.resize(inst, height, width)
    return Response(b"", status=201, content_type="text/plain")


@bp.get("/exec/<exec_id>/json")
async def inspect(exec_id: str) -> Response:
    return json_response(_inspect(exec_id, api_version()))


@plain_alternative(bp, "inspect")
def inspect_plain(req: Plain, exec_id: str) -> Answer:
    return Answer(json_bytes(_inspect(exec_id, req.version)))


def _inspect(exec_id: str, version: Version) -> dict[str, object]:
    svc = containers()
    inst = svc.execs.get(exec_id)
    body = ExecInspect(
        ID=inst.id, Running=inst.running, ExitCode=inst.exit_code,
        ProcessConfig=ExecProcessConfig(privileged=inst.privileged, user=inst.user,
                                        tty=inst.tty, entrypoint=inst.cmd[0],
                                        arguments=inst.cmd[1:]),
        OpenStdin=inst.attach_stdin, OpenStderr=inst.attach_stderr,
        OpenStdout=inst.attach_stdout, ContainerID=inst.container.id, Pid=inst.pid,
        Container=shapes.inspect(inst.container, _backend.get().images,
                                 _backend.get().networks, version),
    )
    return body.model_dump()
