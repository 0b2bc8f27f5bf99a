"""Running a container: launch (rootfs, files, OCI bundle, runc create/start) and the relaunch
a restart policy asks for.

The ``Supervisor`` (supervise.py) runs in the engine's nursery for each started container: it
owns the process until it exits, tears down what launch made (runc state, cgroup, overlay
mount), records the exit and emits ``die`` (and ``oom``), then sleeps the back-off delay and
launches again when the policy says so. A stop or kill marks the container manually stopped,
which ends that loop. Cancellation (daemon shutdown) kills the container first: nothing keeps
running without a supervisor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers import files, links
from svc.engine.containers.container import Container, Live, now_ns
from svc.engine.containers.overlay import Overlay
from svc.engine.containers.rootfs import image_dir
from svc.engine.containers.shimmed import ShimHandle, create_shimmed
from svc.engine.containers.shipping import open_shipping
from svc.engine.containers.spec import HostFacts, oci_spec, write_bundle
from svc.engine.containers.state import transition
from svc.engine.containers.supervise import Supervisor
from svc.engine.containers.userdb import resolve_user
from svc.engine.events import EventBus
from svc.engine.images.service import ImageService
from svc.engine.networks import ports
from svc.engine.networks.service import NetworkService
from svc.engine.volumes.service import VolumeService
from svc.errors import Conflict, InvalidParameter, SvcError
from svc.network.bridge import parse_mac
from svc.runtime.cgroups import CgroupV1
from svc.runtime.mounts import mounts_under
from svc.runtime.process import ContainerPipes, open_pipes
from svc.runtime.protocol import Runtime, RuntimeFailure
from svc.runtime.reaper import Launches
from svc.runtime.shim.launch import Shim
from svc.runtime.spec import cgroups_path
from svc.storage.fsutil import remove_tree
from svc.storage.securejoin import mkdir_all
from svc.storage.trash import Trash

log = logging.getLogger("svc.engine.containers")


class StartError(InvalidParameter):
    """The container's own configuration made the runtime fail (no such binary...)."""


def start_failure(exc: RuntimeFailure) -> tuple[int, SvcError]:
    """dockerd's exit code for a failed start (127 not found, 126 not executable) and the
    error to return: the container's fault is a 400, anything else the runtime's 500."""
    text = str(exc)
    if "no such file or directory" in text or "executable file not found" in text:
        return 127, StartError(text)
    if "permission denied" in text:
        return 126, StartError(text)
    return 128, exc


class Runner:
    """Launches containers (mounts, network, the OCI bundle, runc create and start), tears
    them down, and hands each running one to the supervisor. Takes exactly what it uses."""

    def __init__(self, *, runtime: Runtime, cgroups: CgroupV1, images: ImageService,
                 events: EventBus, volumes: VolumeService, networks: NetworkService,
                 launches: Launches, facts: HostFacts, exec_root: Path, cgroup_parent: str,
                 save: Callable[[Container], Awaitable[None]],
                 auto_remove: Callable[[Container], Awaitable[None]],
                 resolve: Callable[[str], Container], trash: Trash | None = None,
                 monitor: Shim | None = None) -> None:
        self.runtime = runtime
        self.monitor = monitor  # live restore: containers run under svc-shim
        self.trash = trash  # removed containers' directories, deleted in the background
        self.cgroups = cgroups
        self.images = images
        self.overlay = Overlay(images)
        self.events = events
        self.volumes = volumes
        self.networks = networks
        self.launches = launches  # launches in flight, which the orphan reaper waits out
        self.facts = facts
        self.exec_root = exec_root
        self.cgroup_parent = cgroup_parent
        self.save = save
        self.resolve = resolve  # names and ids, for NetworkMode container:<ref>
        self._nursery: trio.Nursery | None = None
        self.supervisor = Supervisor(runtime, cgroups, save, auto_remove,
                                     event=self.event, cgroup_of=self.cgroup_of,
                                     teardown=self.teardown, launch=self.launch)

    def bind(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run a task in the engine's nursery (supervisors outlive requests). An exception
        in it is logged, never raised into the nursery (that would stop the daemon)."""
        assert self._nursery is not None, "the runner is not bound to the engine's nursery"

        async def guarded() -> None:
            try:
                await fn(*args)
            except Exception:
                log.exception("a background task of the containers service failed")

        self._nursery.start_soon(guarded)

    def bundle_dir(self, c: Container) -> Path:
        return self.exec_root / "containers" / c.id

    def cgroup_of(self, c: Container) -> str:
        parent = c.host_config.CgroupParent or self.cgroup_parent
        return cgroups_path(parent, c.id)

    def event(self, c: Container, action: str, *, at_ns: int | None = None,
              **extra: str) -> None:
        attrs = dict(c.config.Labels or {})
        attrs.update(image=c.config.Image or c.image_id, name=c.bare_name, **extra)
        self.events.publish("container", action, c.id, attrs, at_ns=at_ns)

    async def settle_exit(self, c: Container, limit: float = 5.0) -> bool:
        """The runtime says ``c`` is gone (or not running) while svc still believes it runs:
        its process has exited and its supervisor has not recorded that yet. Wait, at most
        ``limit`` seconds, until it has, so that the caller answers as for a stopped
        container (dockerd answers from its own state, recorded by then). Returns whether
        the container is known stopped now.

        Cancellation: a checkpoint; nothing is left behind.
        """
        live = c.live
        if live is None:
            return True
        if _alive(live.pid):  # it does run: the runtime's failure is not this window
            return False
        with trio.move_on_after(limit):
            await live.exited.wait()
        return c.live is None or live.exited.is_set()

    # -- launch -----------------------------------------------------------------------------

    async def launch(self, c: Container) -> None:
        """Start ``c``'s process and its supervisor; the caller holds ``c.lock``.

        Raises the start error after recording it (ExitCode 126/127/128, Error) with nothing
        left behind: no mount, runc state or cgroup.
        """
        assert self._nursery is not None, "the runner is not bound to the engine's nursery"
        pump = None
        try:
            pump = await open_shipping(c)  # (an unreachable receiver fails the start first)
            with self.launches.launching():  # until c.live names the init's pid
                live, pipes = await self._create(c)
        except BaseException as exc:
            if pump is not None:
                with trio.CancelScope(shield=True):
                    await pump.driver.aclose()
            if isinstance(exc, RuntimeFailure):
                code, err = start_failure(exc)
                await self._record_failure(c, code, str(exc))
                raise err from None
            if isinstance(exc, SvcError | OSError):
                await self._record_failure(c, 128, str(exc))
            raise
        live.launched = launched = trio.Event()
        await self._nursery.start(self.supervisor.supervise, c, live, pipes, pump)
        try:
            try:
                await self.runtime.start(c.id)
            except RuntimeFailure as exc:
                code, err = start_failure(exc)
                live.start_failure = (code, str(exc))  # the supervisor records it, with ``die``
                launched.set()
                with contextlib.suppress(RuntimeFailure):
                    await self.runtime.kill(c.id, signal.SIGKILL)
                await live.exited.wait()
                raise err from None
            st = c.state
            transition(st, "started")
            st.pid, st.started_ns = live.pid, now_ns()
            st.exit_code, st.error, st.oom_killed = 0, "", False
            c.has_been_started = True
            await self.supervisor.save_or_defer(c)  # it runs: on a full disk the record follows
            c.notify()
            self.event(c, "start")
        finally:
            launched.set()  # the supervisor may now record an exit (after ``start``)

    async def _record_failure(self, c: Container, code: int, message: str) -> None:
        """A start that failed before the process ran: the exit code and error recorded, and
        ``die`` sent as dockerd sends it (below API 1.25 the CLI's ``run --rm`` removes the
        container when it sees ``die`` and waits for ``destroy``)."""
        c.state.exit_code, c.state.error = code, message
        await self.supervisor.save_or_defer(c)
        c.exits, c.last_exit_code = c.exits + 1, code
        c.notify()
        self.event(c, "die", exitCode=str(code))

    async def _create(self, c: Container) -> tuple[Live, ContainerPipes | None]:
        # the start holds the overlay like a reader until its process runs (an archive
        # reader finishing meanwhile must not unmount it under runc create)
        c.fs_users += 1
        created = False
        try:
            out = await self._create_mounted(c)
            created = True
            return out
        finally:
            c.fs_users -= 1
            if not created:  # its teardown left the overlay to this hold: release it
                with trio.CancelScope(shield=True):
                    await self.unmount(c, unless_used=True)

    async def _create_mounted(self, c: Container) -> tuple[Live, ContainerPipes | None]:
        await self.mount(c)
        pipes: ContainerPipes | None = None
        handle: ShimHandle | None = None
        try:
            await self._mount_volumes(c)
            nets = self.networks
            plan = nets.plan(c.host_config.NetworkMode or "default", c.net_config)
            port_options = ports.plugin_options(c.host_config, c.config) \
                if any(n.plugged for n, _ in plan) else None  # (only a plugin is told)
            for i, (net, cfg) in enumerate(plan):
                await nets.reserve(c.id, c.name, net, f"eth{i}", cfg.ipv4, list(cfg.aliases),
                                   cfg.ipv6, links=list(cfg.links), ports=port_options,
                                   mac=parse_mac(c.config.MacAddress)
                                   if i == 0 and c.config.MacAddress else "")
            address = nets.of_container(c.id)[0][1].endpoint.address if plan else None
            embedded_dns = bool(plan) and not plan[0][0].builtin
            link_hosts, link_env = links.resolve_links(c, self.resolve, nets)
            spec = await trio.to_thread.run_sync(self._prepare, c, self._joined_net(c), address,
                                                 embedded_dns, link_hosts, link_env)
            bundle = self.bundle_dir(c)
            await trio.to_thread.run_sync(write_bundle, bundle, spec)
            if self.runtime.has_state(c.id):  # a leftover of a crash (one stat, else none)
                with contextlib.suppress(RuntimeFailure):
                    await self.runtime.delete(c.id, force=True)
            if self.monitor is not None:
                created, handle = await create_shimmed(self.monitor, c, bundle)
            elif c.tty:
                created = await self.runtime.create(c.id, bundle, terminal=True)
            else:
                pipes = open_pipes(stdin=c.config.OpenStdin)
                created = await self.runtime.create(c.id, bundle, stdio=pipes)
            for i, (net, _) in enumerate(plan):  # an internal network has no way out
                await nets.attach(c.id, created.pid, net,
                                  default_route=i == 0 and not net.internal)
            if embedded_dns:
                assert self._nursery is not None
                await nets.dns.start(c.id, created.pid, self._nursery,
                                     list(c.host_config.Dns or []))
            published = ports.bindings(c.host_config, c.config)
            if plan and published and not plan[0][0].plugged:  # (else the plugin's)
                assert self._nursery is not None
                await nets.publish(c.id, published, self._nursery, plan[0][0])
        except BaseException:
            if pipes is not None:
                with trio.CancelScope(shield=True):
                    await pipes.aclose()
            with trio.CancelScope(shield=True):
                await self.teardown(c)
                if handle is not None:
                    handle.close()
                c.monitor_pid = 0  # (also when conmon's start itself failed)
            raise
        live = Live(created.pid, cgroup=self.cgroup_of(c), console=created.console,
                    stdin=pipes.stdin if pipes is not None else None, monitor=handle)
        if handle is not None:  # the shim's descriptors: stdin, the pty
            live.console, live.stdin = handle.console, handle.stdin
        c.live = live
        return live, pipes

    def _joined_net(self, c: Container) -> str | None:
        mode = c.host_config.NetworkMode
        if not mode.startswith("container:"):
            return None
        other = self.resolve(mode.partition(":")[2])
        if other.id == c.id:
            raise InvalidParameter("cannot join the network of a container: itself")
        if other.live is None:
            raise Conflict(f"cannot join network of a non running container: {other.id}")
        return f"/proc/{other.live.pid}/ns/net"

    def _prepare(self, c: Container, joined_net: str | None, address: str | None,
                 embedded_dns: bool = False, link_hosts: list[tuple[str, str]] | None = None,
                 link_env: list[str] | None = None) -> dict[str, Any]:
        """Blocking: user, working dir, /etc files and the OCI document."""
        cfg, hc = c.config, c.host_config
        user = resolve_user(c.rootfs, cfg.User, hc.GroupAdd)
        if cfg.WorkingDir:
            mkdir_all(c.rootfs, cfg.WorkingDir)
        files.write_etc(c, address, list(link_hosts or []), embedded_dns=embedded_dns,
                        upstream=self.networks.dns.upstream)
        for m in c.mounts:
            src = Path(m.Source)
            if m.Type == "bind" and not src.exists():  # dockerd makes a missing host dir
                src.mkdir(parents=True, mode=0o755)
        return oci_spec(c, user, self.facts, self.cgroup_of(c), joined_net, link_env)

    async def mount(self, c: Container) -> None:
        await self.overlay.mount(c)

    def image_view(self, c: Container) -> AbstractAsyncContextManager[Path]:
        return self.overlay.view(c)

    async def unmount(self, c: Container, *, unless_used: bool = False,
                      unless_read: bool = False) -> None:
        await self.overlay.unmount(c, unless_used=unless_used, unless_read=unless_read)

    async def _mount_volumes(self, c: Container) -> None:
        """Each volume of ``c`` ready for it (a device mounted if it has one, a plugin's
        ``Mount``, whose path becomes the mount point's source); a new, empty volume filled
        from the image's content at its mount point, unless ``nocopy``."""
        for m in c.mounts:
            if m.Type != "volume":
                continue
            m.Source = await self.volumes.mount(m.Name, c.id, m.Destination, bool(m.RW),
                                                str(m.Propagation or ""))
            if m.CopyData:
                source = await trio.to_thread.run_sync(
                    image_dir, c.rootfs, str(m.Destination))
                if source is not None:
                    await self.volumes.fill(m.Source, source)

    async def _unmount_volumes(self, c: Container) -> None:
        for m in c.mounts:
            if m.Type == "volume":
                await self.volumes.unmount(m.Name, c.id)

    async def teardown(self, c: Container) -> None:
        """Remove runc's state (and so the cgroup), release the volumes and unmount the
        rootfs; the network's endpoints go at the same time as runc's state (neither needs
        the other). Idempotent."""
        async with trio.open_nursery() as nursery:  # the network's part beside runc's
            nursery.start_soon(self._delete_state, c)
            await self.networks.release(c.id)
        await self._unmount_volumes(c)
        # in the worker thread, missing or not: finding out takes a stat per hierarchy
        await trio.to_thread.run_sync(self.cgroups.remove, self.cgroup_of(c))
        await self.unmount(c, unless_read=True)  # else the last archive reader unmounts
        await trio.to_thread.run_sync(partial(remove_tree, self.bundle_dir(c), ignore_errors=True))

    async def _delete_state(self, c: Container) -> None:
        """runc's state and cgroup gone, its process killed if it still runs; shielded, so
        that a failure beside it never leaves it half done."""
        if self.runtime.has_state(c.id):  # else runc would start only to find nothing
            with trio.CancelScope(shield=True), contextlib.suppress(RuntimeFailure):
                await self.runtime.delete(c.id, force=True)

    async def leaves_traces(self, c: Container) -> bool:
        """Whether ``c`` has anything outside its directory and its record that a removal
        must undo: a process, runc's state, a cgroup, a mounted rootfs, network endpoints,
        volumes it holds. A container that never ran (or was torn down when it exited) has
        none: its removal needs no teardown, and no durable REMOVING mark for a crash to
        resume from (its record goes first, then its directory; a directory left without a
        record is swept at the next start)."""
        if c.live is not None or c.fs_users or self.networks.of_container(c.id):
            return True
        if any(m.Type == "volume" and self.volumes.mounted_for(m.Name, c.id)
               for m in c.mounts):
            return True
        return await trio.to_thread.run_sync(self._traces_on_host, c)

    def _traces_on_host(self, c: Container) -> bool:
        """Blocking: runc's state, the cgroup or the overlay mount of ``c``."""
        return self.runtime.has_state(c.id) or os.path.ismount(c.rootfs) \
            or self.cgroups.exists(self.cgroup_of(c))

    def remove_files(self, c: Container) -> None:
        """Blocking: the OCI bundle (a few small files) deleted, the container's directory
        (its logs, its rootfs's changes) thrown into the trash, to be deleted in the
        background. Called once its record is gone, so the throw needs no fsync. A tree with
        something still mounted in it is never moved: it is deleted here around the mount
        (``remove_tree`` never walks into one), as before the trash."""
        remove_tree(self.bundle_dir(c), ignore_errors=True)
        if self.trash is not None and not mounts_under(c.dir):
            self.trash.throw([c.dir], durable=False)
            return
        remove_tree(c.dir, ignore_errors=True)

def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
