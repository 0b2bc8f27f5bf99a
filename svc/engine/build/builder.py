"""``POST /build``: a context in, an image out (the legacy builder of API 1.22/1.23).

:meth:`Builder.prepare` checks what can be refused before the response starts (tag names,
the limits) with an HTTP error. :meth:`Builder.build` then, reporting into the stream:
unpacks the context as it arrives (``context``), reads and parses the instructions file
(``Svcfile``, else ``Dockerfile``, or the one named), applies the ignore file, runs the
steps (``steps``), refuses build args no ARG consumed (proxy variables excepted), and names
the image with every tag. Failures go into the stream, a failed RUN with its exit code.

Builds run side by side and never hold a lock across a step, so a build blocks no other
request. Cancellation (the client went away): the running step's container is killed,
intermediate containers and the images this build made are removed, the context directory
goes; the daemon is ready for the next build at once.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from svc.build.parser import Instruction, Svcfile, parse
from svc.engine.build import context as ctxmod
from svc.engine.build import remote
from svc.engine.build.job import BuildSpec, Job
from svc.engine.build.output import Message, Output, StepFailed
from svc.engine.build.steps import dispatch
from svc.engine.containers.service import ContainerService
from svc.engine.images.pull import Puller
from svc.engine.images.service import ImageService
from svc.engine.streams import prefetching
from svc.errors import InvalidParameter
from svc.wire.reference import Reference

log = logging.getLogger("svc.engine.build")
UNCLAIMED_SECONDS = 600.0


@dataclass(frozen=True)
class Received:
    """A context unpacked and its instructions parsed, ready to build."""

    spec: BuildSpec
    work: Path
    ctx: ctxmod.Context
    svcfile: Svcfile


class Builder:
    """Builds images from contexts, with the containers and images services."""

    def __init__(self, root: Path, images: ImageService, containers: ContainerService,
                 puller: Puller) -> None:
        self.dir = root / "builds"
        self.images = images
        self.containers = containers
        self.puller = puller
        # Contexts received whose build has not begun: a client gone between the two leaves
        # one behind, removed by the next receive once it is ``UNCLAIMED_SECONDS`` old.
        self.unclaimed: dict[Path, float] = {}

    def open(self) -> None:
        """Blocking, before serving: contexts a crash left behind go."""
        if self.dir.exists():
            for leftover in self.dir.iterdir():
                shutil.rmtree(leftover, ignore_errors=True)
        self.dir.mkdir(mode=0o700, exist_ok=True)

    def tags(self, names: list[str]) -> list[Reference]:
        """The ``t`` parameters as references (a 400 for a bad one, before the stream)."""
        out = []
        for name in names:
            ref = self.images.tag_reference(name, None)
            if ref.digest is not None:
                raise InvalidParameter(f"invalid tag {name!r}: a build cannot be tagged with "
                                       "a digest")
            out.append(ref)
        return out

    def prepare(self, spec: BuildSpec) -> BuildSpec:
        """Check the limits as container create would (a 400 before the stream)."""
        hc = spec.host_config
        if hc.Memory and hc.Memory < 4 << 20:
            raise InvalidParameter("Minimum memory limit allowed is 4MB")
        if hc.MemorySwap > 0 and hc.Memory and hc.MemorySwap < hc.Memory:
            raise InvalidParameter("Minimum memoryswap limit should be larger than memory "
                                   "limit, see usage.")
        return spec

    async def receive(self, spec: BuildSpec, body: AsyncIterator[bytes]) -> Received:
        """Unpack the context and parse its instructions file, before the response starts:
        as with dockerd, what fails here is an HTTP error (a 400 naming the problem), not a
        stream. The caller must hand the result to :meth:`build`, which removes it.

        Cancellation: the partial context is removed.
        """
        await self._sweep_unclaimed()
        work = self.dir / uuid.uuid4().hex
        try:
            await trio.to_thread.run_sync(partial(work.mkdir, mode=0o700))
            svcfile_name = spec.svcfile
            if spec.remote:
                ctx, text_only = await remote.fetch(spec.remote, work)
                svcfile_name = None if text_only else svcfile_name
            else:
                async with prefetching(body) as reader:
                    ctx = await trio.to_thread.run_sync(ctxmod.unpack, reader,
                                                        work / "context")
            name, text = await trio.to_thread.run_sync(ctxmod.read_svcfile, ctx, svcfile_name)
            svcfile = parse(text, filename=name)
            await trio.to_thread.run_sync(ctxmod.apply_ignore, ctx)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(partial(_remove_work, work))
            raise
        self.unclaimed[work] = trio.current_time()
        return Received(spec, work, ctx, svcfile)

    async def _sweep_unclaimed(self) -> None:
        now = trio.current_time()
        for work, since in list(self.unclaimed.items()):
            if now - since > UNCLAIMED_SECONDS:
                del self.unclaimed[work]
                await trio.to_thread.run_sync(_remove_work, work)

    async def build(self, received: Received, send: trio.MemorySendChannel[Message]) -> str:
        """Run the steps, reporting into ``send``; the new image's id. Errors propagate (the
        caller puts them in the stream)."""
        spec = received.spec
        self.unclaimed.pop(received.work, None)
        out = Output(send, quiet=spec.quiet)
        job: Job | None = None
        try:
            job = Job(spec, received.ctx, out, images=self.images, containers=self.containers,
                      puller=self.puller)
            job.escape = received.svcfile.escape
            instructions = list(received.svcfile.instructions)
            if spec.labels:
                instructions.append(_labels(spec.labels, job.escape))
            image_id = await self._steps(job, instructions)
            await self._tag(job, image_id)
            await out.result(image_id, [r.familiar_string() for r in spec.tags])
            return image_id
        except BaseException as exc:
            if _cancelled(exc):
                if job is not None:
                    await job.discard()
                raise
            if job is not None and spec.forcerm:
                await job.remove_temp(say=False)
            await out.release_held()
            raise
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(partial(_remove_work, received.work))

    async def _steps(self, job: Job, instructions: list[Instruction]) -> str:
        for n, inst in enumerate(instructions, start=1):
            await dispatch(job, n, inst)
            await job.end_step()
        unused = job.unused_args()
        if unused:
            raise StepFailed(f"One or more build-args [{' '.join(unused)}] were not "
                             "consumed, failing build.")
        if job.image is None or job.scratch:
            raise StepFailed("No image was generated. Is your Dockerfile empty?")
        return job.image.id

    async def _tag(self, job: Job, image_id: str) -> None:
        image = self.images.images[image_id]
        async with self.images.lock:
            for ref in job.spec.tags:
                await self.images.add_ref(image, ref, force=True)


def _labels(labels: dict[str, str], escape: str) -> Instruction:
    """The ``labels`` parameter as a last LABEL step (as engines appended it)."""
    args: list[str] = []
    for k in sorted(labels):
        args += [_quote(k, escape), _quote(labels[k], escape)]
    original = "LABEL " + " ".join(f"{args[i]}={args[i + 1]}" for i in range(0, len(args), 2))
    return Instruction("label", tuple(args), original=original)


def _quote(s: str, escape: str = "\\") -> str:
    """``s`` as a word that the variable expansion of LABEL arguments gives back unchanged.
    Inside double quotes only the escape character before ``"`` or ``$`` escapes (before
    anything else it stays, so it is not doubled: 1.11's ``%q`` doubled backslashes into the
    label); a trailing one would escape the closing quote, so those go after it, escaped."""
    body = s.rstrip(escape)
    tail = len(s) - len(body)
    return ('"' + body.replace('"', escape + '"').replace("$", escape + "$") + '"'
            + escape * 2 * tail)


def _cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return isinstance(exc, trio.Cancelled)


def _remove_work(work: Path) -> None:
    if os.path.lexists(work):
        shutil.rmtree(work, ignore_errors=True)
