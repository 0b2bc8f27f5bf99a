"""The Engine: the domain's composition point that the API layer talks to.

It owns the durable store, the event bus and (in later issues) the services for containers,
images, volumes and networks, and the nursery their long-lived tasks run in.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from svc.background import keep_running
from svc.engine import system
from svc.engine.authz import Authorizer
from svc.engine.builder.builder import Builder
from svc.engine.cluster.session import ClusterFlags, ClusterSession
from svc.engine.containers.config import LogDefaults
from svc.engine.containers.container import Container
from svc.engine.containers.service import ContainerService
from svc.engine.containers.spec import HostFacts
from svc.engine.events import REPLAY_EVENTS, EventBus
from svc.engine.images.distribution import DistributionMap
from svc.engine.images.downloads import DownloadManager
from svc.engine.images.pull import Puller
from svc.engine.images.push import Pusher
from svc.engine.images.service import Image, ImageService
from svc.engine.networks.overlay import Overlay
from svc.engine.networks.service import NetworkService
from svc.engine.registries import Registries
from svc.engine.trash import TrashEmptier
from svc.engine.volumes.service import VolumeService
from svc.errors import SvcError
from svc.models.system import PluginsInfo, SystemInfo, VersionInfo
from svc.network.ifaddr import interface_address
from svc.plugins.client import CALL_TIMEOUT
from svc.plugins.discovery import Discovery
from svc.plugins.manager import PluginManager
from svc.registry.transport import RegistryConfig
from svc.runtime import host
from svc.runtime.cgroups import CgroupV1, Knobs
from svc.runtime.process import host_capabilities, set_subreaper
from svc.runtime.protocol import Runtime
from svc.runtime.reaper import Launches, reap_orphans
from svc.runtime.shim.launch import Shim
from svc.storage.eventlog import EventLog
from svc.storage.lock import RootLock
from svc.storage.store import COLLECTIONS, ObjectStore
from svc.storage.trash import Trash

log = logging.getLogger("svc.engine")


@dataclass(frozen=True)
class EngineConfig:
    root: Path
    exec_root: Path
    runtime: str = "runc"
    debug: bool = False
    cgroup_parent: str = "/svc"
    shutdown_timeout: float = 10.0
    bridge: str = "svc0"
    bip: str = "172.17.0.1/16"
    dns: tuple[str, ...] = ()
    registry: RegistryConfig = RegistryConfig()
    log_defaults: LogDefaults = LogDefaults()
    cluster: ClusterFlags = ClusterFlags()
    plugin_dirs: tuple[Path, ...] = ()  # empty: the default directories
    plugin_timeout: float = CALL_TIMEOUT
    authorization_plugins: tuple[str, ...] = ()
    live_restore: bool = False  # containers outlive the daemon (under ``Adapters.monitor``)


@dataclass(frozen=True)
class Adapters:
    """The host-facing parts the engine works through, built by the composition root
    (``svc.daemon``) and handed in, so that a test can hand in fakes of its own."""

    runtime: Runtime
    cgroups: CgroupV1
    store: ObjectStore
    monitor: Shim | None = None  # live restore: what containers and execs run under


class Engine:
    """Domain state and services. ``open`` loads state; ``run`` hosts the background tasks."""

    def __init__(self, config: EngineConfig, adapters: Adapters) -> None:
        self.config = config
        self.store = adapters.store
        self.events = EventBus(EventLog(config.root / "events.jsonl", keep=REPLAY_EVENTS))
        self.engine_id = ""
        self._lock = RootLock(config.root)
        # Removed images' layers and containers' directories: deleted in the background.
        self.trash = Trash(config.root / "trash")
        self.trash_emptier = TrashEmptier(self.trash)
        self.images = ImageService(config.root, self.store, self.events, self.trash)
        self.registries = Registries(config.registry)
        self.distribution = DistributionMap(config.root)
        self.pusher = Pusher(self.images, self.distribution, config.registry)
        self.downloads = DownloadManager(config.root, config.registry)
        self.puller = Puller(self.images, self.distribution, self.downloads, config.registry)
        self.images.on_delete = self._forget_partial_blobs
        self.images.on_untag = self.downloads.owner_gone  # partial blobs pulled for it
        self.cgroups = adapters.cgroups
        dirs = config.plugin_dirs
        self.plugins = PluginManager(Discovery(dirs, dirs) if dirs else Discovery(),
                                     timeout=config.plugin_timeout)
        # every API request goes through these (svc.api.authz); None: no cost at all
        self.authz = Authorizer(self.plugins, config.authorization_plugins,
                                config.plugin_timeout) if config.authorization_plugins else None
        self.runtime = adapters.runtime
        self.volumes = VolumeService(
            config.root, self.events, self.plugins,
            save=lambda name, rec: self.save_record("volumes", name, rec),
            delete=self._delete_volume)
        self.networks = NetworkService(self.events, config.bridge, config.bip,
                                       list(config.dns), self.plugins)
        self.networks.ports.loopback_rules = config.live_restore  # (no proxy while away)
        self.networks.save = lambda nid, rec: self.save_record("networks", nid, rec)
        self.networks.delete = lambda nid: self.delete_record("networks", nid)
        self.launches = Launches()  # shared by the runner and the orphan reaper
        self.containers = ContainerService(
            config.root, runtime=self.runtime, cgroups=self.cgroups, images=self.images,
            events=self.events, volumes=self.volumes, networks=self.networks,
            launches=self.launches,
            facts=HostFacts(tuple(host_capabilities()), host.oom_score_adj()),
            exec_root=config.exec_root, cgroup_parent=config.cgroup_parent,
            save=self._save_container, delete=self._delete_container,
            auto_remove=self._auto_remove, knobs=self._probe_knobs(),
            log_defaults=config.log_defaults, trash=self.trash, monitor=adapters.monitor)
        self.volumes.referrers = self.containers.volume_users
        self.builder = Builder(config.root, self.images, self.containers, self.puller)
        self.cluster = ClusterSession(config.cluster, lookup=interface_address,
                                      daemon_id=lambda: self.engine_id)
        self.overlay = self.networks.overlay = Overlay(self.networks, self.cluster)
        # network plugins of global scope are told of the cluster's nodes (DiscoverNew)
        self.networks.plugged.drivers.nodes = self._nodes
        if self.cluster.nodes is not None:
            self.cluster.nodes.listeners.append(self.networks.plugged.drivers.node_changed)
        self._nursery: trio.Nursery | None = None

    def open(self) -> None:
        """Create the directories and load every durable record (blocking; before serving)."""
        for d in (self.config.root, self.config.exec_root):
            d.mkdir(parents=True, exist_ok=True, mode=0o711)
        self._lock.acquire()  # RootInUse if another daemon owns this root
        self.store.prepare()
        pending = self.trash.prepare()
        if pending.entries:
            log.info("%d removed object(s) still to delete: deleted in the background",
                     pending.entries)
        self.engine_id = system.load_engine_id(self.config.root)
        # (the records are only read here: the services hold the state, and the store on
        # disk is the durable copy; a copy kept in memory cost 3 KiB per container)
        records: dict[str, dict[str, dict[str, Any]]] = {}
        for collection in COLLECTIONS:
            report = self.store.load(collection)
            records[collection] = report.records
            if report.skipped:
                log.error("%s: skipped %d damaged record(s)", collection, len(report.skipped))
        self.images.open(records["images"])
        self.distribution.open()
        self.builder.open()
        self.volumes.open(records["volumes"])
        for nid, rec in self.networks.open(records["networks"], self.engine_id):
            self.store.put("networks", nid, rec)
        self.containers.open(records["containers"], keep=self.store.ids_on_disk("containers"))
        replayed = self.events.load()
        log.info("state loaded from %s: %d images, %d image names; %d recent events",
                 self.config.root, len(self.images.images), len(self.images.repos), replayed)

    def _forget_partial_blobs(self, image: Image) -> Callable[[], None]:
        """A removed image's layers need no half-downloaded blobs any more: the disk work
        that removes them (the image service runs it with the deletion)."""
        diff_ids = image.config.diff_ids
        blobs = {b for d in diff_ids for b, _ in self.distribution.lookup(str(d))}
        return self.downloads.blobs_gone(sorted(blobs))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the engine's background tasks until cancelled."""
        set_subreaper()  # container inits are re-parented to the daemon, which reaps them
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.events.run)
            await nursery.start(self.downloads.run)
            await nursery.start(keep_running, "trash emptier", self.trash_emptier.run)
            await nursery.start(keep_running, "orphan reaper", reap_orphans,
                                self.containers.waited_pids, self.launches)
            await nursery.start(keep_running, "stats collector", self.containers.stats.run)
            try:
                await self.networks.setup()
            except SvcError as exc:  # containers on the bridge fail to start, saying why
                log.error("the default bridge could not be set up: %s", exc)
            # the cluster before the containers: one that restarts on an overlay finds it
            await self.overlay.forget_sandboxes()
            await nursery.start(self.cluster.run)
            await nursery.start(self.overlay.run)
            # before the containers: the plugin mounts of containers a crash left running
            # are owed their Unmount, sent in the background as restore tears them down;
            # their plugin endpoints are owed Leave, DeleteEndpoint and ReleaseAddress
            await nursery.start(keep_running, "volume unmounts", self.volumes.run)
            # (live restore: the endpoints of containers still running under conmon are not
            # undone: they are taken back below)
            self.networks.plugged.owed.spared = self.containers.restorer.still_running()
            await nursery.start(keep_running, "network plugins", self.networks.plugged.run)
            await self.containers.restore(nursery)
            task_status.started()

    async def stop_containers(self) -> None:
        """Shutdown: stop every running container (stop signal, then SIGKILL), then take the
        bridge's outbound rules away. With live restore the containers and the rules stay
        (the supervisors let go of them when the engine's tasks are cancelled)."""
        with trio.CancelScope(shield=True):
            if not self.config.live_restore:
                await self.containers.stop_all(self.config.shutdown_timeout)
                await self.networks.shutdown()
            await self.cluster.leave()

    def _nodes(self) -> list[tuple[str, bool]]:
        """The cluster's nodes as network plugins are told of them: (address, this one)."""
        return [(n.rpartition(":")[0] or n, n == self.cluster.advertise)
                for n in self.cluster.status().nodes]

    def _probe_knobs(self) -> Knobs | None:
        """Which cgroup knobs this kernel offers (None when cgroups cannot be probed)."""
        try:
            return self.cgroups.probe()
        except OSError as exc:
            log.warning("cannot probe the cgroup hierarchies: %s", exc)
            return None

    async def _save_container(self, c: Container) -> None:
        c.revision += 1
        await self.save_record("containers", c.id, c.record())

    async def _auto_remove(self, c: Container) -> None:
        """``run --rm``: the container goes once it has exited."""
        with contextlib.suppress(SvcError):
            await self.containers.remove(c, force=True)

    async def _delete_volume(self, name: str) -> None:
        await self.delete_record("volumes", name)

    async def _delete_container(self, c: Container) -> None:
        await self.delete_record("containers", c.id)

    def begin_shutdown(self) -> None:
        """End live streams so that in-flight requests finish promptly."""
        self.events.close()

    async def persist(self) -> None:
        """Write whatever is still only in memory (called on shutdown)."""
        await self.events.flush()
        await self.containers.runner.supervisor.save_deferred()

    def close(self) -> None:
        """Release the root (after persist)."""
        self._lock.release()

    # -- durable records -------------------------------------------------------------------

    async def save_record(self, collection: str, oid: str, record: dict[str, object]) -> None:
        """Persist a record; when this returns it survives a crash (the store fsyncs).

        Cancellation: the write runs in a worker thread and is shielded, so a cancelled caller
        never leaves memory and disk disagreeing.
        """
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.store.put, collection, oid, record)

    async def delete_record(self, collection: str, oid: str) -> bool:
        """Remove a record durably; False if there was none. Shielded like ``save_record``.

        The record is renamed into the trash (its two directories fsynced at once): an
        unlink on the request's path waited up to 11 ms under CPU contention, where a rename
        does not."""
        with trio.CancelScope(shield=True):
            existed = await trio.to_thread.run_sync(
                lambda: self.store.delete(collection, oid, trash=self.trash))
        return existed

    # -- system ---------------------------------------------------------------------------

    def version(self) -> VersionInfo:
        return system.version_info()

    def info(self) -> SystemInfo:
        return system.system_info(
            engine_id=self.engine_id, root=self.config.root, runtime=self.config.runtime,
            debug=self.config.debug, containers=self.containers.counts(),
            images=len(self.images.images), listeners=self.events.listeners,
            registry=self.config.registry, logging_driver=self.config.log_defaults.driver,
            cluster=self.cluster.status(),
            log_dropped=self.containers.runner.supervisor.log_dropped.total,
            live_restore=self.config.live_restore,
            plugins=PluginsInfo(
                Volume=["local", *self.plugins.activated("VolumeDriver")],
                Network=["bridge", "host", "null", *self.plugins.activated("NetworkDriver")],
                Authorization=list(self.config.authorization_plugins) or None),
        )
