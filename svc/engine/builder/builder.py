"""``POST /build``: a context in, an image out (the legacy builder of API 1.22/1.23).

:meth:`Builder.prepare` checks what can be refused before the response starts (tag names,
the limits) with an HTTP error, and :meth:`Builder.receive` reads the instructions file
(``Svcfile``, else ``Dockerfile``, or the one named) and parses it. If that file is the
context's first file (``early``), only it is read before the stream starts; otherwise the
whole context is unpacked (``context``) and the ignore file applied first.
:meth:`Builder.build` then, reporting into the stream: runs the steps (``steps``) while the
rest of a streaming context arrives (COPY and ADD wait for all of it), refuses build args no
ARG consumed (proxy variables excepted), and names the image with every tag. Failures go
into the stream, a failed RUN with its exit code; a context refused while the steps ran
cancels them and leaves nothing behind.

Builds run side by side and never hold a lock across a step, so a build blocks no other
request. Cancellation (the client went away): the running step's container is killed,
intermediate containers and the images this build made are removed, the context directory
goes; the daemon is ready for the next build at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from svc.engine.builder import context as ctxmod
from svc.engine.builder import early, remote
from svc.engine.builder.job import BuildSpec, Job
from svc.engine.builder.output import Message, Output, StepFailed
from svc.engine.builder.steps import dispatch
from svc.engine.containers.service import ContainerService
from svc.engine.images.pull import Puller
from svc.engine.images.service import ImageService
from svc.engine.streams import reading
from svc.errors import InvalidParameter
from svc.svcfile.parser import Instruction, Svcfile, parse
from svc.wire.reference import Reference

log = logging.getLogger("svc.engine.builder")
UNCLAIMED_SECONDS = 600.0


@dataclass(frozen=True)
class Received:
    """A context unpacked and its instructions parsed, ready to build; or, with ``arriving``,
    the instructions file parsed from the first bytes and the rest of the context still to
    be read from ``arriving`` while the build runs."""

    spec: BuildSpec
    work: Path
    ctx: ctxmod.Context
    svcfile: Svcfile
    arriving: AsyncIterator[bytes] | None = None
    svcfile_name: str = ""  # the instructions file read from the first bytes: its path
    svcfile_hash: str = ""  # and its sha256


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
        """Parse the instructions file before the response starts: as with dockerd, what
        fails here is an HTTP error (a 400 naming the problem), not a stream. When the
        instructions file is the context's first file (``early``) that is all that is read
        here: the rest arrives while the build runs. Otherwise the whole context is unpacked
        first. The caller must hand the result to :meth:`build`, which removes it.

        Cancellation: the partial context is removed.
        """
        await self._sweep_unclaimed()
        work = self.dir / uuid.uuid4().hex
        try:
            await trio.to_thread.run_sync(partial(work.mkdir, mode=0o700))
            received = await self._receive(spec, body, work)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(partial(_remove_work, work))
            raise
        self.unclaimed[work] = trio.current_time()
        return received

    async def _receive(self, spec: BuildSpec, body: AsyncIterator[bytes],
                       work: Path) -> Received:
        svcfile_name = spec.svcfile
        if spec.remote:
            ctx, text_only = await remote.fetch(spec.remote, work)
            svcfile_name = None if text_only else svcfile_name
        else:
            rest = aiter(body)
            peeked = await early.peek(rest, spec.svcfile)
            if peeked.first is not None:
                name, data = peeked.first
                text = data.decode("utf-8", errors="replace")
                if not text.strip():
                    raise ctxmod.ContextError(f"The Dockerfile ({name}) cannot be empty")
                return Received(spec, work, ctxmod.Context(work / "context", work=work,
                                                           hash_large=not spec.nocache),
                                parse(text, filename=name), early.replay(peeked, rest),
                                name, hashlib.sha256(data).hexdigest())
            async with reading(early.replay(peeked, rest)) as reader:
                ctx = await trio.to_thread.run_sync(partial(
                    ctxmod.unpack, reader, work / "context", hash_large=not spec.nocache))
        name, text = await trio.to_thread.run_sync(ctxmod.read_svcfile, ctx, svcfile_name)
        svcfile = parse(text, filename=name)
        await trio.to_thread.run_sync(ctxmod.apply_ignore, ctx)
        return Received(spec, work, ctx, svcfile)

    async def _arrive(self, received: Received, job: Job) -> None:
        """The rest of a context whose build has begun: unpacked into the job's context,
        checked (the instructions file the build runs is the one the context holds), the
        ignore file applied; then COPY and ADD may go on (``job.arrived``). A refused context
        raises, which cancels the build."""
        assert received.arriving is not None
        ctx = received.ctx
        async with reading(received.arriving) as reader:
            await trio.to_thread.run_sync(ctxmod.unpack, reader, ctx.root, ctx)
        name = received.svcfile_name
        if ctx.hashes.get(name) != received.svcfile_hash:
            raise ctxmod.ContextError(f"invalid build context: the instructions file {name} "
                                      "appears more than once in it")
        await trio.to_thread.run_sync(ctxmod.apply_ignore, ctx)
        job.arrived.set()

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
            async with trio.open_nursery() as background:
                job.background = background
                if received.arriving is None:
                    image_id = await self._steps(job, instructions)
                else:
                    image_id = await self._steps_arriving(received, job, instructions)
                await self._tag(job, image_id)
            await out.result(image_id, [r.familiar_string() for r in spec.tags])
            return image_id
        except BaseException as exc:
            refused = _refused(exc)
            if _cancelled(exc) or refused is not None:
                if job is not None:
                    await job.discard()
                if refused is not None:
                    raise refused from None
                raise
            if job is not None and spec.forcerm:
                await job.remove_temp(say=False)
            await out.release_held()
            raise
        finally:
            with trio.CancelScope(shield=True):
                if job is not None:
                    await job.drop_staged()
                await trio.to_thread.run_sync(partial(_remove_work, received.work))

    async def _steps(self, job: Job, instructions: list[Instruction]) -> str:
        for n, inst in enumerate(instructions, start=1):
            await dispatch(job, n, inst)
            await job.end_step()
        await job.settle()
        unused = job.unused_args()
        if unused:
            raise StepFailed(f"One or more build-args [{' '.join(unused)}] were not "
                             "consumed, failing build.")
        if job.image is None or job.scratch:
            raise StepFailed("No image was generated. Is your Dockerfile empty?")
        return job.image.id

    async def _steps_arriving(self, received: Received, job: Job,
                              instructions: list[Instruction]) -> str:
        """The steps while the context arrives. A refused context cancels them (and the
        build leaves nothing behind); a failed step lets the upload finish first (the client
        is still sending it), then fails the build."""
        job.arrived = trio.Event()
        failure: Exception | None = None
        image_id = ""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._arrive, received, job)
            try:
                image_id = await self._steps(job, instructions)
            except Exception as exc:  # noqa: BLE001 - raised once the context is in
                failure = exc
        if failure is not None:
            raise failure
        return image_id

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


def _refused(exc: BaseException) -> ctxmod.ContextError | None:
    """The context error that ended a build whose context was still arriving."""
    found: BaseException | None = exc
    while isinstance(found, BaseExceptionGroup):
        group = found.subgroup(ctxmod.ContextError)
        found = group.exceptions[0] if group is not None else None
    return found if isinstance(found, ctxmod.ContextError) else None


def _cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return isinstance(exc, trio.Cancelled)


def _remove_work(work: Path) -> None:
    if os.path.lexists(work):
        shutil.rmtree(work, ignore_errors=True)
