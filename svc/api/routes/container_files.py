"""Container file endpoints: changes, export, archive (HEAD/GET/PUT), the deprecated copy,
and commit."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api.errors import json_errors
from svc.api.params import json_body, qbool, qstr
from svc.api.shaping import json_response
from svc.api.streaming import respond_chunked
from svc.api.wiring import Wired
from svc.engine.backend import ContainersBackend
from svc.engine.containers.container import Container
from svc.engine.containers.fs import path_stat_header
from svc.engine.containers.service import ContainerService
from svc.errors import InvalidParameter, PathNotFound
from svc.models.containers import ChangeEntry, CommitResponse, ContainerConfig, CopyBody

bp = Blueprint("container_files", __name__)
_backend: Wired[ContainersBackend] = Wired("container_files")


def register(app: QuartTrio, backend: ContainersBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def containers() -> ContainerService:
    return _backend.get().containers


def _ctr(ref: str) -> Container:
    return containers().resolve(ref)


@bp.get("/containers/<ref>/changes")
async def changes(ref: str) -> Response:
    c = _ctr(ref)
    found = [ChangeEntry.model_validate(x).model_dump() for x in await containers().fs.changes(c)]
    return json_response(found or None)  # none: null, as the engines' nil slice encoded


@bp.get("/containers/<ref>/export")
async def export(ref: str) -> Response:
    c = _ctr(ref)
    chunks = containers().fs.export(c)
    await chunks.__anext__()  # started: errors before this are the status code
    return await respond_chunked(chunks, content_type="application/octet-stream")


@bp.route("/containers/<ref>/archive", methods=["HEAD"])
@json_errors
async def archive_head(ref: str) -> Response:
    c = _ctr(ref)
    with _file_of(ref):
        info = await containers().fs.stat(c, _archive_path())
    return Response(b"", status=200, headers=_stat_headers(info))


@bp.get("/containers/<ref>/archive")
@json_errors
async def archive_get(ref: str) -> Response:
    c = _ctr(ref)
    with _file_of(ref):
        chunks, info = await _tar_of(c, _archive_path())
    return await respond_chunked(chunks, content_type="application/x-tar",
                                 headers=list(_stat_headers(info).items()))


@bp.put("/containers/<ref>/archive")
@json_errors
async def archive_put(ref: str) -> Response:
    c = _ctr(ref)
    path = _archive_path()
    with _file_of(ref):
        await containers().fs.put(c, path, request.body,
                                  no_overwrite_dir_non_dir=qbool("noOverwriteDirNonDir"))
    return Response(b"", status=200)


@bp.post("/containers/<ref>/copy")
async def copy(ref: str) -> Response:
    c = _ctr(ref)
    body = await json_body(CopyBody)
    assert body is not None
    if not body.Resource:
        raise InvalidParameter("Path cannot be empty")
    with _file_of(ref):
        chunks, _info = await _tar_of(c, body.Resource)
    return await respond_chunked(chunks, content_type="application/x-tar")


async def _tar_of(c: Container, path: str) -> tuple[AsyncIterator[bytes], dict[str, Any]]:
    """The tar's chunks and the path status (a missing path raises before any byte)."""
    stream = containers().fs.get(c, path)
    info = await stream.__anext__()
    assert isinstance(info, dict)
    return stream, info  # type: ignore[return-value]


@contextlib.contextmanager
def _file_of(ref: str) -> Iterator[None]:
    """A missing path is named with the container as the client named it, as dockerd does
    (``Could not find the file /x in container <ref>``)."""
    try:
        yield
    except PathNotFound as exc:
        raise exc.in_container(ref) from None


def _archive_path() -> str:
    path = qstr("path") or ""
    if not path:
        raise InvalidParameter("Path cannot be empty")
    return path


def _stat_headers(info: dict[str, Any]) -> dict[str, str]:
    encoded = path_stat_header(info)
    return {"X-Svc-Container-Path-Stat": encoded, "X-Docker-Container-Path-Stat": encoded}


@bp.post("/commit")
async def commit() -> Response:
    ref = qstr("container") or ""
    if not ref:
        raise InvalidParameter("commit needs the container parameter")
    c = _ctr(ref)
    body = await json_body(ContainerConfig, required=False)
    image = await containers().ops.commit(
        c, repo=qstr("repo") or "", tag=qstr("tag") or "", comment=qstr("comment") or "",
        author=qstr("author") or "", pause=qbool("pause", True),
        changes=request.args.getlist("changes"),
        config=body.model_dump(exclude_defaults=True) if body is not None else None)
    return json_response(CommitResponse(Id=image.id), status=201)
