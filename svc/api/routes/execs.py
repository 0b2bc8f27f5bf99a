"""Exec endpoints: create (under the container), start, resize, inspect."""

from __future__ import annotations

from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api import container_shapes as shapes
from svc.api.detachkeys import DEFAULT as DEFAULT_KEYS
from svc.api.detachkeys import parse_detach_keys
from svc.api.hijack import hijack
from svc.api.params import json_body, qint
from svc.api.shaping import json_response
from svc.api.versioning import api_version
from svc.api.wiring import Wired
from svc.engine.backend import ContainersBackend
from svc.engine.containers.service import ContainerService
from svc.errors import InvalidParameter
from svc.models.containers import CreateResponse
from svc.models.execs import ExecCreateBody, ExecInspect, ExecProcessConfig, ExecStartBody

bp = Blueprint("execs", __name__)
_backend: Wired[ContainersBackend] = Wired("execs")


def register(app: QuartTrio, backend: ContainersBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def containers() -> ContainerService:
    return _backend.get().containers


@bp.post("/containers/<ref>/exec")
async def create(ref: str) -> Response:
    svc = containers()
    c = svc.resolve(ref)
    body = await json_body(ExecCreateBody)
    assert body is not None
    keys = parse_detach_keys(body.DetachKeys or DEFAULT_KEYS)
    inst = svc.execs.create(c, cmd=list(body.Cmd or []), tty=body.Tty,
                            stdin=body.AttachStdin, stdout=body.AttachStdout,
                            stderr=body.AttachStderr, user=body.User,
                            privileged=body.Privileged, detach_keys=keys)
    return json_response(CreateResponse(Id=inst.id), status=201)


@bp.post("/exec/<exec_id>/start")
async def start(exec_id: str) -> Response:
    svc = containers()
    inst = svc.execs.get(exec_id)
    body = await json_body(ExecStartBody, required=False) or ExecStartBody()
    svc.execs.check_startable(inst)
    if body.Detach:
        await svc.execs.start(inst, None)
        return Response(b"", status=200)
    raw = await hijack(request)
    raw.grow_send_buffer()
    try:
        await svc.execs.start(inst, raw, raw_output=body.Tty)
    finally:
        await raw.aclose()
    return Response(b"")


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
                                         _backend.get().networks, api_version()),
    )
    return json_response(body.model_dump())
