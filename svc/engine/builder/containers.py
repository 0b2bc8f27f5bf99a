"""The steps that need a container: RUN runs its command in one (a real container on runc,
with the build's limits; output streamed as it comes), COPY and ADD put their sources into
one through the same chroot-confined extraction as ``PUT /containers/{id}/archive``. Each
container is committed into the step's image and removed afterwards (``rm``/``forcerm``).

A COPY laid out in place leaves its layer to be hashed and its image made in the background
(``Job.defer``); a RUN right after it runs on the staged layer meanwhile (its container made
from the COPY's parent image with that layer above it; the hashing begins once its command
runs), and names the COPY's image once it exists, before its own commit.

Cancellation: the container stays in ``job.temp``, which ``Job.discard`` empties (killing
a running command) when the build is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlparse

import trio

from svc.engine.builder import copylayer, imaging, sources
from svc.engine.builder.archives import archive_tar
from svc.engine.builder.fetch import fetch_to
from svc.engine.builder.job import Job, Pending
from svc.engine.builder.output import StepFailed, StreamText
from svc.engine.containers.container import Container
from svc.engine.images.service import Image
from svc.engine.streams import ThreadWriter
from svc.errors import SvcError
from svc.models.containers import CreateBody
from svc.models.imageconfig import RunConfig
from svc.storage.layers import StagedLayer
from svc.storage.securejoin import secure_join
from svc.svcfile.parser import Instruction
from svc.wire.stdcopy import STDERR

destination = sources.destination
URL_TIMEOUT = 60.0
MAX_URL_BYTES = 4 << 30


async def _create(job: Job, image: Image, cmd: list[str], env: list[str],
                  lowers: tuple[str, ...] = ()) -> Container:
    cfg = job.config
    body = CreateBody.model_validate({
        "Image": image.id, "Cmd": cmd, "Entrypoint": [], "Env": env,
        "User": cfg.User, "WorkingDir": cfg.WorkingDir,
        "HostConfig": job.spec.host_config.model_dump(by_alias=True)})
    c = await job.containers.create(body, None, lowers=lowers)
    job.temp.append(c)
    return c


async def _commit(job: Job, c: Container, probe: RunConfig) -> None:
    config = job.config.model_copy(update={"Image": probe.Image}, deep=True)

    def make(image: Image, diff_id: str) -> bytes:
        return imaging.step_config(image, config, probe, author=job.author,
                                   created_ns=time.time_ns(), diff_id=diff_id,
                                   container_id=c.id)

    image = await job.containers.fs.commit(c, repo_config=None, changes=[], comment="",
                                           author=job.author, pause=False, make_config=make)
    job.adopt(image)


# -- RUN ------------------------------------------------------------------------------------

async def run_step(job: Job, cmd: list[str]) -> None:
    if job.pending is not None and job.pending.done.is_set():
        await job.settle()
    pending = job.pending  # the image before is still being made: it cannot have a cache
    image = pending.parent if pending is not None else job.require_image("RUN")
    build_env = job.run_env()
    saved = [f"|{len(build_env)}", *build_env, *cmd] if build_env else cmd
    if pending is None and await job.probe(imaging.probe(job.config, saved, image.id)):
        return
    c = await _create(job, image, cmd, [*(job.config.Env or []), *build_env],
                      lowers=(pending.lower_dir,) if pending is not None else ())
    await job.out.line(f" ---> Running in {c.short_id}")
    try:
        code = await _run_streaming(job, c, pending)
    finally:
        if pending is not None:  # a failed step's container stays: on its real image too
            await pending.wait()
            if pending.image is not None:
                await job.containers.rebase(c, pending.image)
    if pending is not None:
        await job.settle()  # its error, if the image was not made
        image = job.require_image("RUN")
    if code != 0:
        raise StepFailed(f"The command '{' '.join(cmd)}' returned a non-zero code: {code}",
                         code)
    await _commit(job, c, imaging.probe(job.config, saved, image.id))


async def _run_streaming(job: Job, c: Container, pending: Pending | None) -> int:
    """Start ``c`` and pass its output on as it comes; its exit code, as soon as the process
    has ended (the commit goes on while the supervisor tears the container down). On a
    ``pending`` image's staged layer, the start (which mounts it) keeps that layer's commit
    from moving it meanwhile, and that image is made once the command runs."""
    attachment = c.hub.subscribe(stdout=True, stderr=True)
    text = {1: StreamText(), STDERR: StreamText()}
    exits = c.exits
    try:
        async with pending.mounting if pending is not None else contextlib.nullcontext():
            await job.containers.start(c)
        if pending is not None:
            pending.wanted.set()
        while (chunks := await attachment.take()) is not None:
            for stream, data in chunks:
                decoded = text[stream].feed(data)
                if stream == STDERR:
                    await job.out.stderr(decoded)
                else:
                    await job.out.stdout(decoded)
    finally:
        attachment.close()
    return await job.containers.wait_ended(c, exits)


# -- COPY / ADD -----------------------------------------------------------------------------

def _is_url(s: str) -> bool:
    return s.startswith(("http://", "https://"))


def _chown(inst: Instruction) -> tuple[int, int] | None:
    for flag in inst.flags:
        name, _, value = flag.removeprefix("--").partition("=")
        if name == "chown":
            user, _, group = value.partition(":")
            if not user.isdigit() or not (group or user).isdigit():
                raise StepFailed(f"{inst.cmd.upper()} --chown: only numeric uid[:gid] is "
                                 f"supported, not {value!r}")
            return int(user), int(group or user)
    return None


async def _download(job: Job, url: str, dest: str) -> sources.Source:
    """ADD <url>: the file lands in the build's directory, mode 0600 (as engines did)."""
    name = os.path.basename(urlparse(url).path.rstrip("/"))
    if dest.endswith("/") and not name:
        raise StepFailed(f"cannot determine a file name from the URL {url}: name the "
                         "destination file")
    folder = (job.ctx.work or job.ctx.root.parent) / "urls"
    await trio.to_thread.run_sync(partial(folder.mkdir, exist_ok=True))
    path = folder / f"{len(os.listdir(folder))}-{name or 'download'}"
    await fetch_to(url, path, limit=MAX_URL_BYTES, io_timeout=URL_TIMEOUT,
                   fail=lambda m: StepFailed(f"ADD failed: {m}"))
    os.chmod(path, 0o600)
    return sources.Source(name or "download", path, False)


async def _keys(job: Job, found: list[sources.Source]) -> list[str]:
    """The cache keys of the sources, hashed in parallel worker threads."""
    keys = [""] * len(found)
    limiter = trio.CapacityLimiter(4)

    async def one(i: int, src: sources.Source) -> None:
        keys[i] = await trio.to_thread.run_sync(sources.source_key, job.ctx, src,
                                                limiter=limiter)

    async with trio.open_nursery() as nursery:
        for i, src in enumerate(found):
            nursery.start_soon(one, i, src)
    return keys


@dataclass(frozen=True)
class _OwedKey:
    """The content key of a step's sources, computed with its image (``_commit_staged``)
    rather than before the step: ``name(key)`` is the step's command with it."""

    found: list[sources.Source]
    name: Callable[[str], list[str]]


async def copy_step(job: Job, inst: Instruction, args: list[str]) -> None:
    cmd = inst.cmd.upper()
    if len(args) < 2:
        raise StepFailed(f"{cmd} requires at least two arguments")
    owner = _chown(inst)
    image = job.require_image(cmd)
    await job.arrived.wait()
    srcs, dest = args[:-1], args[-1]
    dest_abs = destination(dest, job.config.WorkingDir or "/")
    found, downloaded = await _gather(job, cmd, srcs, dest)
    if len(found) > 1 and not dest.endswith("/"):
        raise StepFailed(f"When using {cmd} with more than one source file, the destination "
                         "must be a directory and end with a /")
    chown = f"--chown={owner[0]}:{owner[1]} " if owner else ""

    def name(key: str) -> list[str]:
        return imaging.nop(f"{cmd} {chown}{key} in {dest}")

    archives = [s for s in found if cmd == "ADD" and not s.is_dir and s.path not in downloaded
                and await trio.to_thread.run_sync(sources.is_archive, s.path)]
    # Once no cache is asked, the key decides nothing here: it only names the step in its
    # image, and is computed with it (a large file of a nocache build's context was not
    # hashed as it came). The container goes when the step ends; until then (or, if the
    # step fails, for good) its command names the sources as the instruction does.
    owed = _OwedKey(found, name) if job.cache_busted and job.spec.rm and not archives \
        else None
    key = " ".join(srcs) if owed is not None else sources.combined_key(await _keys(job, found))
    probe = imaging.probe(job.config, name(key), image.id)
    if await job.probe(probe):
        return
    c = await _create(job, image, probe.Cmd or [], list(job.config.Env or []))
    plain = [s for s in found if s not in archives]
    if not archives:
        await _copy_in_place(job, c, cmd, plain, dest_abs, owner, probe, owed)
        return
    dest_is_dir = bool(archives) or await _is_dir(job, c, dest_abs)
    members = sources.plan(plain, dest_abs, dest_is_dir)
    if members:
        await _put(job, c, "/", partial(sources.write_tar, members, owner=owner))
    for archive in archives:
        if not await _is_dir(job, c, dest_abs):
            await _put(job, c, "/", partial(_dir_tar, dest_abs))
        await _put(job, c, dest_abs, partial(archive_tar, archive.path, owner=owner,
                                             disk=c.upper_dir))
    await _commit(job, c, probe)


async def _copy_in_place(job: Job, c: Container, cmd: str, plain: list[sources.Source],
                         dest_abs: str, owner: tuple[int, int] | None,
                         probe: RunConfig, owed: _OwedKey | None) -> None:
    """The step's layer laid out directly in the layer store (``copylayer``), the image's
    root (``c``'s, never started) mounted read-only for the look-ups of where things go.
    ``owed``: the sources' key is computed with the image."""
    store = job.images.layers
    async with job.containers.fs.image_view(c) as root:
        dest_is_dir = await trio.to_thread.run_sync(_dir_in, root, dest_abs)
        members = sources.plan(plain, dest_abs, dest_is_dir)
        placement = copylayer.Placement(Path("/"), root, owner or (0, 0), job.ctx.given, cmd)

        def fill(diff: Path) -> None:
            placement.diff = os.fspath(diff)
            for host, name in members:
                placement.place(host, name)

        parent = job.require_image(cmd)
        config = job.config.model_copy(update={"Image": probe.Image}, deep=True)
        try:
            staged = await trio.to_thread.run_sync(store.stage_tree, fill)
        except OSError as exc:
            raise StepFailed(f"{cmd} failed: {exc}") from None
        await job.defer(parent, staged, partial(_commit_staged, job, cmd, c.id, staged,
                                                config, probe, job.author, owed))


async def _commit_staged(job: Job, cmd: str, container_id: str, staged: StagedLayer,
                         config: RunConfig, probe: RunConfig, author: str,
                         owed: _OwedKey | None, pending: Pending) -> Image:
    """The staged layer described (its diff id: one read of its files), put into the store
    on top of ``pending.parent``, and the step's image made of it, named by its sources'
    key (computed first when ``owed``); in the background while the next step runs.
    Cancellation: a layer committed but not yet used by an image is released (removed when
    nothing else holds it); the staged dir goes with ``Job.drop_staged``."""
    store = job.images.layers
    parent = pending.parent
    if owed is not None:
        try:
            key = sources.combined_key(await _keys(job, owed.found))
        except OSError as exc:
            raise StepFailed(f"{cmd} failed: {exc}") from None
        probe = probe.model_copy(update={"Cmd": owed.name(key)})
    try:
        await trio.to_thread.run_sync(store.describe, staged)
    except OSError as exc:
        raise StepFailed(f"{cmd} failed: {exc}") from None
    async with pending.mounting, job.images.layer_lock:
        top = parent.chain[-1] if parent.chain else None
        layer = await trio.to_thread.run_sync(store.commit, staged, top)
        job.images.pins[layer.chain_id] += 1
    try:
        doc = imaging.step_config(parent, config, probe, author=author,
                                  created_ns=time.time_ns(), diff_id=layer.diff_id,
                                  container_id=container_id)
        async with job.images.lock:
            new = await job.images.commit_image(doc, [*parent.chain, layer.chain_id],
                                                parent.id)
            job.made.append(new)
    finally:
        await job.images.release_layers([layer.chain_id])
    return new


async def _gather(job: Job, cmd: str, srcs: list[str],
                  dest: str) -> tuple[list[sources.Source], set[Path]]:
    """The sources the arguments name (URLs downloaded for ADD), and the downloaded ones."""
    found: list[sources.Source] = []
    downloaded: set[Path] = set()
    for s in srcs:
        if _is_url(s):
            if cmd == "COPY":
                raise StepFailed("Source can't be a URL for COPY")
            got = await _download(job, s, dest)
            downloaded.add(got.path)
            found.append(got)
            continue
        try:
            found += await trio.to_thread.run_sync(sources.resolve, job.ctx, s, cmd)
        except SvcError as exc:
            raise StepFailed(str(exc)) from None
    return found, downloaded


async def _is_dir(job: Job, c: Container, path: str) -> bool:
    """Whether ``path`` is a directory in ``c`` (symlinks resolved inside its root). Read on
    the mounted root from the host: the container was never started, so nothing in it can
    change the answer; a helper process would cost more than the whole check."""
    async with job.containers.fs.root(c):
        return await trio.to_thread.run_sync(_dir_in, c.rootfs, path)


def _dir_in(rootfs: Path, path: str) -> bool:
    try:
        found = secure_join(rootfs, path)
    except (OSError, SvcError):
        return False
    return found.is_dir()


def _dir_tar(path: str, out: BinaryIO) -> None:
    import tarfile

    with tarfile.open(fileobj=out, mode="w|") as tar:
        info = tarfile.TarInfo(path.strip("/"))
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
        tar.addfile(info)


async def _put(job: Job, c: Container, path: str,
               produce: Callable[[BinaryIO], None]) -> None:
    """Extract what ``produce`` writes (in a worker thread) at ``path`` in ``c``."""
    send, recv = trio.open_memory_channel[bytes](4)

    def write_all() -> None:
        writer = ThreadWriter(send)
        produce(writer)  # type: ignore[arg-type]
        writer.flush()

    async def producer() -> None:
        async with send:
            # the extraction may stop reading: its own error says why
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await trio.to_thread.run_sync(write_all)

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in recv:
            yield chunk

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        async with recv:
            try:
                await job.containers.fs.put(c, path, chunks(), no_overwrite_dir_non_dir=False,
                                            volumes=False)  # a VOLUME's files: in the layer
            except SvcError as exc:
                raise StepFailed(f"{exc}") from None
