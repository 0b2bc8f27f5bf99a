"""One build's state: the current image and run configuration, the build args, the images
and containers it made, and the two ways a step ends: a cache hit or a new image.

A step may leave its image to be finished in the background (``defer``: a COPY's layer is
hashed while the next step runs); every step but RUN first waits for it (``settle``), and RUN
runs on the staged layer meanwhile (``Pending``). Nothing after a step that made a new image
can come from the cache, so nothing is lost by not knowing its id yet.

Cancellation (the client went away): ``discard`` removes every intermediate container
(killing a running one) and every image this build made that nothing else uses; a failed
build keeps its images (they are the cache of the next attempt), as engines do. Staged
layers a deferred step left go with ``drop_staged``, once no container can use them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from svc.engine.builder import imaging
from svc.engine.builder.context import Context
from svc.engine.builder.output import Output, StepFailed
from svc.engine.containers.container import Container
from svc.engine.containers.service import ContainerService
from svc.engine.images.pull import Puller
from svc.engine.images.service import Image, ImageService
from svc.errors import SvcError
from svc.models.containers import HostConfigBody
from svc.models.imageconfig import RunConfig
from svc.storage.layers import StagedLayer
from svc.wire.authconfig import AuthConfig
from svc.wire.reference import Reference

log = logging.getLogger("svc.engine.builder")

# Usable without an ARG line (moby's BuiltinAllowedBuildArgs).
PROXY_ARGS = frozenset({"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
                        "FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy"})


@dataclass(frozen=True)
class BuildSpec:
    """A build request, checked (``Builder.prepare``)."""

    tags: list[Reference] = field(default_factory=list)
    svcfile: str | None = None
    quiet: bool = False
    nocache: bool = False
    rm: bool = True
    forcerm: bool = False
    pull: bool = False
    buildargs: dict[str, str | None] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    host_config: HostConfigBody = field(default_factory=HostConfigBody)
    remote: str | None = None
    registry_auth: dict[str, AuthConfig] = field(default_factory=dict)  # X-Registry-Config


@dataclass(eq=False)
class Pending:
    """A step's image still being made (``Job.defer``): on top of ``parent``, with the layer
    staged at ``lower_dir`` (an overlay lower dir of the layer store, valid throughout)."""

    parent: Image
    lower_dir: str
    image: Image | None = None
    error: BaseException | None = None
    done: trio.Event = field(default_factory=trio.Event)  # image or error set, line written
    # held while a container mounts the staged layer: the layer's commit moves its directory
    mounting: trio.Lock = field(default_factory=trio.Lock)
    owes_line: bool = False  # the output waits for its " ---> <id>" (``Output.hold``)
    # the image is made once this is set: when the next step's container has started, or
    # when a step waits for the image (``wait``)
    wanted: trio.Event = field(default_factory=trio.Event)

    async def wait(self) -> None:
        """Until the image is made (or has failed); it is wanted from now on."""
        self.wanted.set()
        await self.done.wait()


class Job:
    """The state of one build while its steps run."""

    def __init__(self, spec: BuildSpec, ctx: Context, out: Output, *, images: ImageService,
                 containers: ContainerService, puller: Puller) -> None:
        self.spec = spec
        self.ctx = ctx
        self.out = out
        self.images = images
        self.containers = containers
        self.puller = puller
        self.image: Image | None = None
        self.scratch = False  # the current image is the empty scratch base
        self.config: RunConfig = imaging.base_config(None)
        self.author = ""
        self.cmd_set = False
        self.escape = "\\"
        self.buildargs: dict[str, str | None] = dict(spec.buildargs)
        self.allowed: set[str] = set()
        self.cache_busted = spec.nocache
        self.made: list[Image] = []
        self.temp: list[Container] = []  # intermediate containers, removed after the step
        # set once the whole context is in (COPY and ADD wait for it; it streams in while
        # the steps before them run: ``Builder.build``)
        self.arrived = trio.Event()
        self.arrived.set()
        # where intermediate containers are removed and deferred images finished while the
        # next step runs (None: at once)
        self.background: trio.Nursery | None = None
        self.pending: Pending | None = None  # the current image, while it is being made
        self.staged: list[StagedLayer] = []  # staged layers of deferred steps (drop_staged)

    # -- environment ------------------------------------------------------------------------

    def arg_allowed(self, name: str) -> bool:
        return name in self.allowed or name in PROXY_ARGS

    def expansion_env(self) -> list[str]:
        """What ``$VAR`` sees: the configuration's Env first (ENV wins), then build args."""
        env = list(self.config.Env or [])
        env += [f"{k}={v}" for k, v in self.buildargs.items()
                if v is not None and self.arg_allowed(k)]
        return env

    def run_env(self) -> list[str]:
        """Build args a RUN sees beside the configuration's Env (sorted, as the cache key)."""
        defined = {e.partition("=")[0] for e in self.config.Env or []}
        return sorted(f"{k}={v}" for k, v in self.buildargs.items()
                      if v is not None and self.arg_allowed(k) and k not in defined)

    def unused_args(self) -> list[str]:
        return sorted(k for k in self.spec.buildargs if not self.arg_allowed(k))

    # -- steps ------------------------------------------------------------------------------

    def require_image(self, what: str) -> Image:
        if self.image is None:
            raise StepFailed(f"Please provide a source image with `from` prior to {what}")
        return self.image

    async def probe(self, probe: RunConfig) -> bool:
        """Take a cached image for this step if there is one (and the cache is in use)."""
        if self.cache_busted:
            return False
        parent = self.require_image("commit")
        hit = imaging.find_cached(self.images, parent, probe)
        if hit is None:
            self.cache_busted = True
            return False
        await self.out.line(" ---> Using cache")
        self.image = hit
        self.scratch = False
        return True

    async def commit_metadata(self, text: str) -> None:
        """A step that only changes the configuration: an image without a new layer."""
        parent = self.require_image(text.split(" ", 1)[0])
        probe = imaging.probe(self.config, imaging.nop(text), parent.id)
        if await self.probe(probe):
            return
        config = self.config.model_copy(update={"Image": parent.id}, deep=True)
        doc = imaging.step_config(parent, config, probe, author=self.author,
                                  created_ns=time.time_ns(), diff_id=None)
        async with self.images.lock:
            image = await self.images.commit_image(doc, list(parent.chain), parent.id)
        self.adopt(image)

    def adopt(self, image: Image) -> None:
        self.made.append(image)
        self.image = image
        self.scratch = False

    async def defer(self, parent: Image, staged: StagedLayer,
                    make: Callable[[Pending], Awaitable[Image]]) -> None:
        """The step's image is ``make(pending)``'s, made in the background while the next
        step runs; ``settle`` waits for it. ``staged`` (its layer, mountable at once) is
        dropped by ``drop_staged``. Without a background nursery it is made at once.

        In the background, ``make`` begins once the image is ``wanted``: when a RUN on the
        staged layer has started its container, or when a step needs the image. Making it
        reads and hashes every new file (50 MB: 30-45 ms of a core); begun at once, that
        raced the next container's creation for this machine's two cores and slowed
        ``runc create`` by 10-20 ms, where the command that then runs usually leaves a
        core free."""
        pending = Pending(parent, staged.lower_dir)
        self.staged.append(staged)
        self.pending = pending
        if self.background is None:
            pending.wanted.set()
            await self._finish(pending, make)
        else:
            self.background.start_soon(self._finish, pending, make)

    async def _finish(self, pending: Pending, make: Callable[[Pending], Awaitable[Image]]
                      ) -> None:
        """``make`` puts its image into ``made`` as soon as it exists (a cancellation after
        that must still find it)."""
        try:
            await pending.wanted.wait()
            image = await make(pending)
        except Exception as exc:  # noqa: BLE001 - the step after it raises it (``settle``)
            pending.error = exc
        except BaseException as exc:  # cancelled: the build goes, nothing more is said
            pending.error = exc
            pending.done.set()
            raise
        else:
            pending.image = image
        try:
            if pending.owes_line:
                await self.out.release(None if pending.image is None
                                       else f" ---> {pending.image.short}")
        finally:
            pending.done.set()

    async def settle(self) -> None:
        """The deferred image (if any) is the current one, once it is made; its error if it
        failed."""
        pending = self.pending
        if pending is None:
            return
        await pending.wait()
        self.pending = None
        if pending.image is None:
            if isinstance(pending.error, Exception):
                raise pending.error
            raise StepFailed("the previous step did not finish")
        self.image = pending.image
        self.scratch = False

    async def drop_staged(self) -> None:
        """Staged layers of deferred steps go (those committed were moved into the store
        already): at the end of the build, when no container of it runs any more."""
        with trio.CancelScope(shield=True):
            while self.staged:
                await trio.to_thread.run_sync(self.images.layers.discard, self.staged.pop())

    async def scratch_base(self) -> Image:
        """The empty image ``FROM scratch`` builds on (one for every build)."""
        doc = imaging.scratch_config()
        known = self.images.images.get(imaging.config_id(doc))
        if known is not None:
            return known
        async with self.images.lock:
            image = await self.images.commit_image(doc, [], None)
        self.made.append(image)
        return image

    async def end_step(self) -> None:
        """`` ---> <id>`` (owed until a deferred image is made) and, with ``rm``, the
        intermediate containers go."""
        pending = self.pending
        if pending is not None and not pending.done.is_set():
            pending.owes_line = True
            self.out.hold()
        else:
            await self.settle()
            if self.image is not None:
                await self.out.line(f" ---> {self.image.short}")
        if self.spec.rm:
            await self.remove_temp(say=True)

    async def remove_temp(self, *, say: bool) -> None:
        """The intermediate containers go: while the next step runs when the build has a
        ``background`` nursery and ``say`` (a step ended; the build waits for them before
        its result), else at once. A removal is never cancelled half-way."""
        while self.temp:
            c = self.temp.pop(0)
            if say:
                await self.out.line(f"Removing intermediate container {c.short_id}")
            if say and self.background is not None:
                self.background.start_soon(self._remove, c)
            else:
                await self._remove(c)

    async def _remove(self, c: Container) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self.containers.remove(c, force=True, volumes=True)
            except SvcError as exc:
                log.warning("removing intermediate container %s: %s", c.short_id, exc)

    async def discard(self) -> None:
        """The build was cancelled: its containers and the images it made go."""
        with trio.CancelScope(shield=True):
            await self.remove_temp(say=False)
            for image in reversed(self.made):
                async with self.images.lock:
                    if image.id not in self.images.images or self.images.children(image.id) \
                            or self.images.refs_of(image.id) \
                            or self.images.container_use(image.id) is not None:
                        continue  # another build or a name uses it now
                    with contextlib.suppress(SvcError):
                        await self.images.delete_image(image)
