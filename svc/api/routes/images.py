"""Image endpoints: list, inspect, history, tag, remove, import, pull, load, save."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial
from typing import Any

import trio
from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api.hijack import raw_body
from svc.api.params import qbool, qfilters, qstr
from svc.api.progress import progress_lines
from svc.api.shaping import json_response
from svc.api.streaming import respond_chunked, respond_sized_from_thread
from svc.api.versioning import Version, api_version
from svc.api.wiring import Wired
from svc.engine.backend import ImagesBackend
from svc.engine.images import listing
from svc.engine.images.importer import ImportSpec, check_spec, import_image, sniff_archive
from svc.engine.images.load import load_images
from svc.engine.images.remove import remove_image
from svc.engine.images.save import plan_save, save_size, write_save
from svc.engine.images.service import NONE_DIGEST, NONE_TAG, Image, ImageService
from svc.engine.streams import ThreadWriter
from svc.errors import InvalidParameter, NotFound, unwrap
from svc.models.imageconfig import RunConfig
from svc.models.images import GraphDriver, HistoryEntry, ImageInspect, ImageSummary, RootFS
from svc.models.images import ProgressMessage as Msg
from svc.wire.authconfig import decode_auth_header

bp = Blueprint("images", __name__)
_backend: Wired[ImagesBackend] = Wired("images")


def register(app: QuartTrio, backend: ImagesBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)
log = logging.getLogger("svc.api.images")


def images() -> ImageService:
    return _backend.get().images


def summary(svc: ImageService, img: Image, version: Version,
            name_pattern: str | None = None) -> dict[str, Any]:
    """One list entry; with the old ``filter=`` only the tags it matches, as dockerd."""
    tags = svc.repo_tags(img.id)
    if name_pattern:
        tags = [t for t in tags if listing.name_matches(name_pattern, t)]
    body = ImageSummary(
        Id=img.id, ParentId=img.parent or "", RepoTags=tags or [NONE_TAG],
        RepoDigests=svc.repo_digests(img.id) or [NONE_DIGEST], Created=img.created_ns // 10**9,
        Size=img.size, VirtualSize=img.size, Labels=img.config.run.Labels,
    ).model_dump()
    if version < (1, 17):
        body.pop("Labels")
    return body


@bp.get("/images/json")
async def list_images() -> Response:
    svc = images()
    filters = qfilters(("dangling", "label"))
    pattern = qstr("filter")
    found = listing.summaries(svc, all_images=qbool("all"), filters=filters, name_pattern=pattern)
    version = api_version()
    return json_response([summary(svc, i, version, pattern) for i in found])


@bp.get("/images/<path:name>/json")
async def inspect(name: str) -> Response:
    svc = images()
    img = svc.resolve(name)
    cfg = img.config
    body = ImageInspect(
        Id=img.id, RepoTags=svc.repo_tags(img.id), RepoDigests=svc.repo_digests(img.id),
        Parent=img.parent or "", Comment=cfg.comment, Created=cfg.created,
        Container=cfg.container, ContainerConfig=_shown(cfg.container_config),
        DockerVersion=cfg.docker_version, Author=cfg.author, Config=_shown(cfg.config),
        Architecture=cfg.architecture, Os=cfg.os, Size=img.size, VirtualSize=img.size,
        GraphDriver=GraphDriver(Name="overlay2", Data=svc.graph_data(img)),
        RootFS=RootFS(Type="layers", Layers=cfg.diff_ids),
    ).model_dump()
    if api_version() < (1, 21):
        body.pop("RepoTags")
        body.pop("RepoDigests")
    return json_response(body)


def _shown(config: RunConfig | None) -> dict[str, Any]:
    """A configuration as inspect shows it: an image without one shows an empty one."""
    return (config or RunConfig()).doc()


@bp.get("/images/<path:name>/history")
async def history(name: str) -> Response:
    svc = images()
    entries = listing.history(svc, svc.resolve(name))
    return json_response([HistoryEntry(**e).model_dump() for e in entries])


@bp.post("/images/<path:name>/tag")
async def tag(name: str) -> Response:
    svc = images()
    repo = qstr("repo") or ""
    if not repo:
        raise InvalidParameter("repo is required: the repository to tag the image in")
    ref = svc.tag_reference(repo, None, default_tag=False)
    if ref.tag is not None or ref.digest is not None:
        raise InvalidParameter(f"invalid repository name {repo!r}: give the tag in the tag "
                               "parameter")
    ref = ref.with_tag(qstr("tag") or "latest")
    force = qbool("force") or api_version() >= (1, 22)  # 1.10+ always moves an existing tag
    async with svc.lock:
        image = svc.resolve(name)
        await svc.add_ref(image, ref, force=force)
    return Response(b"", status=201)


@bp.delete("/images/<path:name>")
async def delete(name: str) -> Response:
    report = await remove_image(images(), name, force=qbool("force"), noprune=qbool("noprune"))
    return json_response(report)


@bp.post("/images/create")
async def create() -> Response:
    from_image = qstr("fromImage")
    if from_image:
        return await _pull(from_image)
    src = qstr("fromSrc")
    if not src:
        raise InvalidParameter("fromSrc or fromImage is required")
    spec = ImportSpec(src=src, ref=_import_ref(images(), qstr("repo"), qstr("tag")),
                      changes=request.args.getlist("changes"), message=qstr("message") or "")
    check_spec(spec)
    body: AsyncIterator[bytes] = request.body
    if src == "-":
        body = await sniff_archive(request.body)  # garbage is a 400, before the stream
    lines = progress_lines(partial(import_image, images(), spec, body), "import",
                           lambda image: Msg(status=image.id).line())
    return await respond_chunked(lines, content_type="application/json", keep_alive=True)


async def _pull(from_image: str) -> Response:
    """Early failures (bad name, unknown repository or tag, no registry) are HTTP errors;
    the rest goes into the stream, which a disconnect cancels at once."""
    puller = _backend.get().puller
    credentials = decode_auth_header(request.headers.get("X-Registry-Auth"))
    job = await puller.prepare(from_image, qstr("tag"), credentials)
    try:
        return await respond_chunked(progress_lines(partial(puller.run, job), "pull"),
                                     content_type="application/json")
    finally:  # the stream may never have started (the client went at once)
        await job.aclose()


def _import_ref(svc: ImageService, repo: str | None, tag: str | None) -> Any:
    if not repo:
        if tag:
            raise InvalidParameter("tag given without repo")
        return None
    return svc.tag_reference(repo, tag)


@bp.post("/images/load")
async def load() -> Response:
    """A bad archive is answered as dockerd answers it: 200 and the error in the JSON
    stream (the SDK raises its ImageLoadError from that line); nothing is changed."""
    try:
        # (read from the socket by the loading thread itself: ``svc.api.rawbody``)
        lines = await load_images(images(), raw_body(request) or request.body)
    except Exception as exc:  # the load's nursery wraps what its tasks raise
        err = unwrap(exc)
        if not isinstance(err, InvalidParameter | NotFound):
            raise err from None
        return Response(Msg(error=str(err), errorDetail={"message": str(err)}).line(),
                        content_type="application/json")
    return Response(b"".join(Msg(stream=line + "\n").line() for line in lines),
                    content_type="application/json")


@bp.get("/images/<path:name>/get")
async def save_one(name: str) -> Response:
    return await _save([name])


@bp.get("/images/get")
async def save_many() -> Response:
    return await _save(request.args.getlist("names"))


async def _save(names: list[str]) -> Response:
    svc = images()
    items = await plan_save(svc, names)
    # The layers stay on disk until the tarball is written, even if the image is removed.
    chains = [c for item in items for c in item.image.chain]
    svc.pin(chains)
    mtime = int(time.time())
    try:
        size = await trio.to_thread.run_sync(save_size, items, svc.layers, mtime)
        # The tarball goes straight from a worker thread to the socket (no per-chunk trip
        # through the event loop), with its exact length announced up front.
        return await respond_sized_from_thread(
            partial(write_save, items, svc.layers, mtime=mtime), size,
            lambda: _save_stream(svc, items, mtime), content_type="application/x-tar")
    finally:
        with trio.CancelScope(shield=True):
            await svc.release_layers(chains)


@trio.as_safe_channel
async def _save_stream(svc: ImageService, items: list[Any],
                       mtime: int) -> AsyncGenerator[bytes, None]:
    """The tarball in ~1 MiB chunks from a worker thread (for TLS connections)."""
    send, recv = trio.open_memory_channel[bytes](4)

    async def work() -> None:
        async with send:
            writer = ThreadWriter(send)

            def run() -> None:
                write_save(items, svc.layers, writer, mtime=mtime)  # type: ignore[arg-type]
                writer.flush()

            await trio.to_thread.run_sync(run)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(work)
        async for chunk in recv:
            yield chunk
