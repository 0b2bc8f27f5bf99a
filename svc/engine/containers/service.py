"""The containers service: records, names, and every lifecycle verb with dockerd's rules.

Each verb checks the state table (``state.require``) under the container's lock, so two verbs
never interleave on one container. Running processes belong to supervisor tasks in the engine's
nursery (``run.Runner``); a verb that waits for an exit waits on ``changed``, never on a process.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.attach import SessionOptions, StdinTarget, session
from svc.engine.containers.config import (
    LogDefaults,
    check_host_config,
    check_name,
    fill_host_defaults,
    merge_config,
    with_log_defaults,
)
from svc.engine.containers.container import Container, new_id, now_ns
from svc.engine.containers.exec import ExecService
from svc.engine.containers.files import check_dns, check_extra_hosts
from svc.engine.containers.fs import ContainerFS
from svc.engine.containers.lifecycle import RUNNING_STATES, Lifecycle
from svc.engine.containers.links import parse_link
from svc.engine.containers.logs import log_replay
from svc.engine.containers.mounts import check_binds
from svc.engine.containers.networking import ContainerNetworking
from svc.engine.containers.ops import ContainerOps
from svc.engine.containers.registry import ContainerRegistry
from svc.engine.containers.restore import ContainerRestore
from svc.engine.containers.run import Runner
from svc.engine.containers.spec import HostFacts
from svc.engine.containers.state import State, require, transition
from svc.engine.containers.stats import StatsService
from svc.engine.containers.volumes import ContainerVolumes
from svc.engine.events import EventBus
from svc.engine.images.service import Image, ImageService
from svc.engine.networks.endpoints import EndpointPlan
from svc.engine.networks.ports import bindings as port_bindings
from svc.engine.networks.service import NetworkService
from svc.engine.volumes.service import VolumeService
from svc.errors import Conflict, InvalidParameter, NotFound
from svc.models.containers import CreateBody, EndpointConfigBody, HostConfigBody
from svc.network.bridge import parse_mac
from svc.runtime.cgroups import CgroupV1, Knobs
from svc.runtime.protocol import Runtime
from svc.runtime.reaper import Launches
from svc.runtime.shim.launch import Shim
from svc.storage.fsutil import remove_tree
from svc.storage.trash import Trash

log = logging.getLogger("svc.engine.containers")


COLLECTION = "containers"


class ContainerService:
    """The containers and every verb on them. Composed of collaborators, each given in its
    constructor exactly what it uses: the registry of containers and names, the runner (launch,
    supervision, teardown), files, exec, stats, networking, volumes, restore and the other
    operations (update, top, resize, commit)."""

    def __init__(self, root: Path, *, runtime: Runtime, cgroups: CgroupV1, images: ImageService,
                 events: EventBus, volumes: VolumeService, networks: NetworkService,
                 launches: Launches, facts: HostFacts, exec_root: Path, cgroup_parent: str,
                 save: Callable[[Container], Awaitable[None]],
                 delete: Callable[[Container], Awaitable[None]],
                 auto_remove: Callable[[Container], Awaitable[None]],
                 knobs: Knobs | None, log_defaults: LogDefaults | None = None,
                 trash: Trash | None = None, monitor: Shim | None = None) -> None:
        self.dir = root / "containers"
        self.log_defaults = log_defaults or LogDefaults()
        self.images = images
        self.network_service = networks
        self.save = save
        self.delete = delete
        self.knobs = knobs  # the cgroup knobs this kernel offers (None: not probed)
        self.registry = ContainerRegistry()
        self.runner = Runner(runtime=runtime, cgroups=cgroups, images=images, events=events,
                             volumes=volumes, networks=networks, launches=launches, facts=facts,
                             exec_root=exec_root, cgroup_parent=cgroup_parent, save=save,
                             auto_remove=auto_remove, resolve=self.registry.resolve,
                             trash=trash, monitor=monitor)
        self.fs = ContainerFS(self.runner, images, runtime)
        self.execs = ExecService(self.runner, runtime, launches, facts)
        self.stats = StatsService(self.runner, cgroups)
        self.networking = ContainerNetworking(networks, save)
        self.volumes = ContainerVolumes(volumes, self.registry)
        self.ops = ContainerOps(runtime, cgroups, images, self.runner, self.fs, knobs, save)
        self.lifecycle = Lifecycle(runtime, self.runner, save)
        self.restorer = ContainerRestore(self.registry, runtime, self.runner, self.dir,
                                         save, self._finish_remove, trash)

    @property
    def containers(self) -> dict[str, Container]:
        return self.registry.containers

    @property
    def names(self) -> dict[str, str]:
        return self.registry.names

    # -- what the collaborators do, as the api and the engine call it -----------------------

    def resolve(self, ref: str) -> Container:
        return self.registry.resolve(ref)

    async def restore(self, nursery: trio.Nursery) -> None:
        await self.restorer.restore(nursery)
        for c in [c for c in self.containers.values() if c.live and c.live.monitor]:
            await self.execs.adopt(c)  # taken back: their exec sessions too

    async def connect(self, c: Container, ref: str, cfg: EndpointConfigBody | None) -> None:
        await self.networking.connect(c, ref, cfg)

    async def disconnect(self, c: Container, ref: str) -> None:
        await self.networking.disconnect(c, ref)

    async def remove_link(self, c: Container, alias: str) -> None:
        await self.networking.remove_link(c, alias)

    def network_names(self, c: Container) -> set[str]:
        return self.networking.network_names(c)

    def volume_users(self, name: str) -> list[str]:
        return self.volumes.users(name)

    # -- loading (restore.py) ---------------------------------------------------------------

    def open(self, records: Mapping[str, Mapping[str, Any]], keep: Iterable[str] = ()) -> None:
        """Load the records (blocking, before serving): see ``ContainerRestore.load``."""
        self.restorer.load(records, keep)
        self.images.container_use = self.registry.image_use

    # -- create -----------------------------------------------------------------------------

    async def create(self, body: CreateBody, name: str | None, *,
                     lowers: tuple[str, ...] = ()) -> Container:
        """A new container of ``body``. ``lowers``: the builder's layers above the image's
        (a layer still being committed; ``rebase`` once its image exists)."""
        image_ref = body.Image
        if not image_ref:
            raise InvalidParameter("Config.Image is required: the image to create the "
                                   "container from")
        try:
            image = self.images.resolve(image_ref)
        except NotFound:
            raise NotFound(f"No such image: {image_ref}") from None
        hc = with_log_defaults(body.HostConfig or HostConfigBody(), self.log_defaults)
        warnings = check_host_config(hc, self.knobs)
        check_binds(hc)
        check_extra_hosts(list(hc.ExtraHosts or []))
        check_dns(list(hc.Dns or []))
        volumes_from = self.volumes.volumes_from(hc)
        if hc.NetworkMode.startswith("container:"):
            self.resolve(hc.NetworkMode.partition(":")[2])
        net_config = self.networking.net_config(hc.NetworkMode, body)
        for entry in hc.Links or []:
            target, _ = parse_link(entry)
            try:
                self.resolve(target)
            except NotFound:
                raise NotFound(f"Could not get container for {target}") from None
        if body.MacAddress:
            try:
                parse_mac(body.MacAddress)
            except ValueError:
                raise InvalidParameter(f"invalid MAC address {body.MacAddress!r}") from None
        if hc.Links and hc.NetworkMode not in ("", "default", "bridge", "host", "none") \
                and not hc.NetworkMode.startswith("container:"):
            # as the CLI does for --link with --net: on a user network a link is an alias
            # that only this container resolves (dockerd ignores HostConfig.Links there)
            primary = next(iter(net_config), None) or self.network_service.resolve(
                hc.NetworkMode).id
            net_config[primary] = net_config.get(primary, EndpointPlan()).with_links(hc.Links)
            hc = hc.model_copy(update={"Links": None})
        cid = new_id()
        config, path, args = merge_config(body, image.config.run, cid)
        hc = fill_host_defaults(hc)
        port_bindings(hc, config)  # 400s before anything is made
        async with self.registry.names_lock:
            if name:
                full = check_name(name)
                if full in self.names:
                    raise self.registry.name_taken(full)
            else:
                full = self.registry.new_name()
            c = Container(id=cid, name=full, created_ns=now_ns(), path=path, args=args,
                          config=config, host_config=hc, net_config=net_config,
                          image_id=image.id, warnings=warnings, dir=self.dir / cid,
                          build_lowers=lowers)
            self.names[full] = cid
            self.containers[cid] = c
        try:
            c.mounts = await self.volumes.make_mounts(hc, config.Volumes, volumes_from, [])
            await trio.to_thread.run_sync(os.mkdir, c.dir, 0o710)
            await self.save(c)
        except BaseException:
            self.names.pop(full, None)
            self.containers.pop(cid, None)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(partial(remove_tree, c.dir, ignore_errors=True))
                await self.volumes.drop_anonymous(c)
            raise
        self.runner.event(c, "create")
        return c

    async def rebase(self, c: Container, image: Image) -> None:
        """A build's container made with ``lowers`` now names the image those layers became
        (its record, ``docker inspect``, later mounts): the same files, the image's layers."""
        c.image_id = image.id
        c.config = c.config.model_copy(update={"Image": image.id})
        c.build_lowers = ()
        await self.save(c)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, c: Container) -> None:
        await self.lifecycle.start(c)

    async def wait_exit(self, c: Container, after: int | None = None) -> int:
        return await self.lifecycle.wait_exit(c, after)

    async def wait_ended(self, c: Container, after: int) -> int:
        return await self.lifecycle.wait_ended(c, after)

    async def stop(self, c: Container, timeout: int | None) -> None:
        await self.lifecycle.stop(c, timeout)

    async def restart(self, c: Container, timeout: int | None) -> None:
        await self.lifecycle.restart(c, timeout)

    async def kill(self, c: Container, sig_text: str | None) -> None:
        await self.lifecycle.kill(c, sig_text)

    async def pause(self, c: Container) -> None:
        await self.lifecycle.pause(c)

    async def unpause(self, c: Container) -> None:
        await self.lifecycle.unpause(c)

    async def rename(self, c: Container, new: str) -> None:
        if not new:
            raise InvalidParameter("Neither old nor new names may be empty")
        full = check_name(new)
        async with self.registry.names_lock:
            require(c.state.status, "rename", c.id)
            if full == c.name:
                raise Conflict(f"Renaming a container with the same name as its current name "
                               f"({full}) is not allowed")
            if full in self.names:
                raise self.registry.name_taken(full)
            old = c.name
            c.name = full
            self.names[full] = c.id
            self.names.pop(old, None)
            try:
                await self.save(c)
            except BaseException:
                c.name = old
                self.names[old] = c.id
                self.names.pop(full, None)
                raise
        self.runner.event(c, "rename", oldName=old)

    async def remove(self, c: Container, *, force: bool, volumes: bool = False,
                     announce: bool = True) -> None:
        """Remove ``c`` (``force``: kill it first if it runs; ``volumes``: its anonymous
        volumes too). ``destroy`` goes out last, once everything is done and durable: below
        API 1.25 the CLI's ``run --rm`` removes the container itself and stops waiting at
        ``destroy``, cancelling a removal whose answer has not come yet. Without
        ``announce`` the caller sends it (``removed``) once it has answered."""
        async with c.lock:
            require(c.state.status, "force_remove" if force else "remove", c.id)
            if c.state.status in RUNNING_STATES:
                c.manually_stopped = True
                if c.restart_scope is not None:
                    c.restart_scope.cancel()
                await self.lifecycle.send_signal(c, signal.SIGKILL)
                await self.lifecycle.wait_live_exit(c, None)
            transition(c.state, "removing")
            with trio.CancelScope(shield=True):
                traces = await self.runner.leaves_traces(c)
                if traces:  # a crash from here on: the next start finishes the removal
                    await self.runner.supervisor.save_or_defer(c)  # (a full disk: on anyway)
            c.notify()
            await self._finish_remove(c, teardown=traces)
            if volumes:
                with trio.CancelScope(shield=True):
                    await self.volumes.drop_anonymous(c)
        if announce:
            self.removed(c)

    def removed(self, c: Container) -> None:
        """The ``destroy`` event of a finished removal."""
        self.runner.event(c, "destroy")

    async def _finish_remove(self, c: Container, *, teardown: bool = True) -> None:
        """Tear ``c`` down (unless it left nothing to undo), then delete its record (the
        removal is durable from there) and its directory, and forget it."""
        with trio.CancelScope(shield=True):
            if teardown:
                await self.runner.teardown(c)
                if c.fs_users:
                    # an archive reader holds the overlay: it is detached (lazily, if busy)
                    # before its directory goes, so rmtree never walks into a mounted tree
                    await self.runner.unmount(c)
            await self.delete(c)
            await trio.to_thread.run_sync(self.runner.remove_files, c)
            self.execs.forget(c)
            self.stats.forget(c)
            self.containers.pop(c.id, None)
            if self.names.get(c.name) == c.id:
                del self.names[c.name]
            c.notify()

    async def stop_all(self, timeout: float) -> None:
        """Daemon shutdown: every running container gets its stop signal, then SIGKILL."""
        await self.lifecycle.stop_all(list(self.containers.values()), timeout)

    async def attach(self, c: Container, stream: trio.abc.Stream, *, logs: bool,
                     follow: bool, stdin: bool, stdout: bool, stderr: bool,
                     detach_keys: bytes, raw_output: bool = False) -> str:
        """Serve an attached client (see ``engine.attach``). Output is subscribed to before
        anything else, so a client that attaches before ``start`` misses nothing."""
        attachment = c.hub.subscribe(stdout=stdout, stderr=stderr) if follow else None
        replay = None
        if logs and c.log_driver() == "json-file":
            def replay() -> AsyncIterator[bytes]:
                return log_replay(c, stdout=stdout, stderr=stderr, raw=c.tty or raw_output)
        self.runner.event(c, "attach")
        target = None
        if stdin and c.config.OpenStdin:
            target = StdinTarget(get=lambda: self._stdin_of(c),
                                 close_on_eof=c.config.StdinOnce and not c.tty)
        opts = SessionOptions(stdin=target is not None, tty=c.tty or raw_output,
                              detach_keys=detach_keys)
        ended = await session(stream, attachment, opts, target, replay)
        if ended == "detach":
            self.runner.event(c, "detach")
        return ended

    async def _stdin_of(self, c: Container) -> Any:
        """The running process's stdin (the pty for a TTY), waiting for a start."""
        while True:
            changed = c.changed
            live = c.live
            if live is not None:
                return live.console if c.tty else live.stdin
            if c.state.status is State.REMOVING:
                return None
            await changed.wait()

    async def apply_start_host_config(self, c: Container, hc: HostConfigBody) -> None:
        """HostConfig sent with start (clients before v1.24): validated and applied before
        the first start, as dockerd does; ignored once the container has run."""
        if c.has_been_started or c.state.status is not State.CREATED:
            return
        c.warnings = check_host_config(hc, self.knobs)
        check_binds(hc)
        volumes_from = self.volumes.volumes_from(hc)
        before, before_hc = c.mounts, c.host_config
        c.mounts = await self.volumes.make_mounts(hc, c.config.Volumes, volumes_from, before)
        c.host_config = fill_host_defaults(hc)
        try:
            await self.save(c)
        except BaseException:  # not saved (a full disk): not changed
            c.mounts, c.host_config = before, before_hc
            raise
        kept = {m.Name for m in c.mounts}
        await self.volumes.drop_anonymous(c, [m for m in before if m.Name not in kept])

    # -- queries ----------------------------------------------------------------------------

    def waited_pids(self) -> set[int]:
        """Processes whose exit a supervisor waits for (never reaped by the orphan reaper)."""
        inits = {c.live.pid for c in self.containers.values() if c.live is not None}
        return inits | self.execs.waited_pids()

    def all(self) -> Iterable[Container]:
        return self.containers.values()

    def counts(self) -> tuple[int, int, int, int]:
        """(all, running, paused, stopped) for /info."""
        running = sum(1 for c in self.containers.values() if c.state.status in (
            State.RUNNING, State.RESTARTING))
        paused = sum(1 for c in self.containers.values() if c.state.status is State.PAUSED)
        total = len(self.containers)
        return total, running, paused, total - running - paused
