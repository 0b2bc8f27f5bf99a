"""Volumes: the one entry point the API and the containers service use, whichever driver owns
a volume: the local driver (``local.py``) or a plugin (``remote.py``, ``refs.py``).

Every volume has a durable record naming its driver, so the daemon knows who owns a name
after a restart, as moby's volume store did; a plugin is asked for the rest (its path, its
status, its list). Operations on one name wait for each other (a lock per name); nothing holds
a lock across the volumes, so a plugin that hangs holds up only the callers of its own
volumes, each for the plugin timeout at most.

A volume is *in use* while any container (running or not) refers to it; the containers
service answers that question (``referrers``). Events: create, mount, unmount, destroy, each
with the volume's ``driver``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from svc.engine.events import EventBus
from svc.engine.volumes import local
from svc.engine.volumes.base import LOCAL, KeyedLock, Volume, check_name, op_error, pattern
from svc.engine.volumes.plugin import Listed
from svc.engine.volumes.refs import MountRefs
from svc.engine.volumes.remote import PluginVolumes
from svc.errors import Conflict, NotFound, SvcError
from svc.plugins.client import PluginCallNotFound
from svc.plugins.manager import PluginManager

log = logging.getLogger("svc.volumes")


class VolumeService:
    def __init__(self, root: Path, events: EventBus, plugins: PluginManager,
                 save: Callable[[str, dict[str, Any]], Awaitable[None]],
                 delete: Callable[[str], Awaitable[None]]) -> None:
        self.local = local.LocalDriver(root)
        self.drivers = PluginVolumes(plugins)
        self.events = events
        self._save, self._delete = save, delete
        self.volumes: dict[str, Volume] = {}
        self.referrers: Callable[[str], list[str]] = lambda name: []
        self._names = KeyedLock()
        self.refs = MountRefs(self.drivers, events, self._save_locked,
                              lambda: self.volumes.values())

    def open(self, records: dict[str, dict[str, Any]]) -> None:
        """Load the records and unmount what a crash left mounted (blocking; before
        serving). The plugin mounts a crash left are owed their Unmount (``run``)."""
        for name, rec in records.items():
            v = Volume.from_record(name, rec)
            if v.local:
                v.mountpoint = str(self.local.path(name))
            elif v.owed:
                log.info("volume %s: %d mount(s) of plugin %s left by the last run: they are "
                         "unmounted", name, len(v.owed), v.driver)
            self.volumes[name] = v
        self.local.open()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Send the Unmounts plugin volumes are owed, until cancelled."""
        await self.refs.run(task_status=task_status)

    def get(self, name: str) -> Volume:
        """A recorded volume (no plugin is asked)."""
        v = self.volumes.get(name)
        if v is None:
            raise NotFound(f"get {name}: no such volume")
        return v

    def exists(self, name: str) -> bool:
        return name in self.volumes

    def mounted_for(self, name: str, cid: str) -> bool:
        v = self.volumes.get(name)
        return v is not None and cid in v.users

    async def inspect(self, name: str) -> Volume:
        """``name`` as its driver describes it now: a plugin is asked ``Get`` (and ``Path``
        when Get gives no path). A name no record has is looked for at every volume plugin
        and, if one has it, recorded as that plugin's (moby's store did the same)."""
        v = self.volumes.get(name)
        if v is None:
            found = await self.drivers.find(name)
            if found is None:
                raise NotFound(f"get {name}: no such volume")
            v = await self._adopt(*found)
        if v.local:
            return v
        try:
            d = await self.drivers.driver(v.driver)
            v.scope = await self.drivers.scope(d)
            got = await d.get(name)
            if got is None:
                raise NotFound("no such volume")
            v.mountpoint = got.mountpoint or await d.path(name) or v.mountpoint
            v.status = got.status
        except SvcError as exc:
            raise op_error(exc, "get", name) from None
        return v

    async def select(self, dangling: bool | None = None, names: list[str] | None = None,
                     drivers: list[str] | None = None, labels: list[str] | None = None
                     ) -> tuple[list[Volume], list[str]]:
        """The volumes the list filters keep, and warnings for the drivers that could not
        answer (their recorded volumes are shown), as dockerd filters them: ``name`` a
        regular expression searched in the name, ``driver`` exact, ``label`` ``key`` or
        ``key=value`` (every one must hold); values of one filter are alternatives."""
        patterns = [pattern(n) for n in names or []]
        found, warnings = await self._all(drivers)
        out = sorted(found.values(), key=lambda v: v.name)
        if dangling is not None:
            out = [v for v in out if (not self.referrers(v.name)) == dangling]
        if patterns:
            out = [v for v in out if any(p.search(v.name) for p in patterns)]
        if drivers:
            out = [v for v in out if v.driver in drivers]
        for label in labels or []:
            key, sep, value = label.partition("=")
            out = [v for v in out if key in v.labels and (not sep or v.labels[key] == value)]
        return out, warnings

    async def _all(self, drivers: list[str] | None) -> tuple[dict[str, Volume], list[str]]:
        """The local volumes and what every plugin lists (new names recorded as theirs);
        a plugin that cannot answer: a warning, and its recorded volumes."""
        out = {n: v for n, v in self.volumes.items() if v.local}
        plugins = [d for d in drivers or [] if d != LOCAL]
        if drivers and not plugins:
            return out, []
        recorded = {v.driver for v in self.volumes.values() if not v.local}
        listed, failed = await self.drivers.list_all(plugins or None, recorded)
        for driver, items in sorted(listed.items()):
            for item in items:
                v = await self._listed(driver, item)
                if v is not None:
                    out.setdefault(v.name, v)
        for driver in failed:
            out.update({n: v for n, v in self.volumes.items() if v.driver == driver})
        return out, [f"list {driver}: {why}" for driver, why in sorted(failed.items())]

    async def _listed(self, driver: str, item: Listed) -> Volume | None:
        v = self.volumes.get(item.name)
        if v is None:
            try:
                check_name(item.name, driver)
            except SvcError:
                log.warning("volume plugin %s lists %r, a name svc cannot record: left out",
                            driver, item.name)
                return None
            v = await self._adopt(driver, item)
        elif v.driver != driver:
            log.warning("volume %s of driver %s is also listed by %s: that one is left out",
                        v.name, v.driver, driver)
            return None
        v.mountpoint = item.mountpoint or v.mountpoint
        v.scope = self.drivers.known_scope(driver) or v.scope
        return v

    async def _adopt(self, driver: str, item: Listed) -> Volume:
        """Record a volume a plugin has and svc had no record of (listed, or found)."""
        async with self._names.hold(item.name):
            return self.volumes.get(item.name) or await self._adopt_locked(driver, item)

    async def create(self, name: str | None, *, driver: str = "",
                     options: dict[str, str] | None = None,
                     labels: dict[str, str] | None = None, anonymous: bool = False) -> Volume:
        """A new volume, or the existing one of that name (as dockerd answers a second
        create). Without a driver, a name no record has is first looked for at every volume
        plugin, as moby did; then it is the local driver's.

        Cancellation: the record is written shielded; a plugin that was asked to create the
        volume and whose answer was cut short may have it (a later ``ls`` records it).
        """
        if name is None:
            name = secrets.token_hex(32)
        if driver in ("", LOCAL):
            local.check_options(dict(options or {}))
        if name not in self.volumes:
            check_name(name, driver)
        async with self._names.hold(name):
            v = self.volumes.get(name)
            if v is not None:
                return _existing(v, driver, options)
            found = await self.drivers.find(name) if not driver and not anonymous else None
            if found is not None:
                return await self._adopt_locked(*found)
            if driver in ("", LOCAL):
                v = await self._create_local(name, dict(options or {}), labels, anonymous)
            else:
                v = await self._create_remote(driver, name, options, labels, anonymous)
        self.events.publish("volume", "create", name, {"driver": v.driver})
        return v

    async def _adopt_locked(self, driver: str, item: Listed) -> Volume:
        v = await self._keep(Volume(item.name, driver, item.mountpoint, status=item.status,
                                    created_ns=time.time_ns()))
        log.info("volume %s of plugin %s recorded", v.name, driver)
        return v

    async def _keep(self, v: Volume) -> Volume:
        """``v`` recorded durably, then known (shielded: memory never runs ahead of the
        disk, nor the disk of memory)."""
        with trio.CancelScope(shield=True):
            await self._save(v.name, v.record())
            self.volumes[v.name] = v
        return v

    async def _create_local(self, name: str, options: dict[str, str],
                            labels: dict[str, str] | None, anonymous: bool) -> Volume:
        v = Volume(name, LOCAL, str(self.local.path(name)), options, dict(labels or {}),
                   time.time_ns(), anonymous)
        with trio.CancelScope(shield=True):  # a record never lacks its directory
            await self.local.make(v)
            try:
                await self._save(name, v.record())
            except BaseException:  # not recorded (a full disk): no directory either
                with contextlib.suppress(OSError):
                    await self.local.destroy(v)
                raise
            self.volumes[name] = v
        return v

    async def _create_remote(self, driver: str, name: str, options: dict[str, str] | None,
                             labels: dict[str, str] | None, anonymous: bool) -> Volume:
        """As moby's store: ``Get`` first (a volume the plugin has is taken as it is), else
        ``Create``; then ``Path`` for the answer's Mountpoint."""
        try:
            d = await self.drivers.driver(driver)
            scope = await self.drivers.scope(d)
            with contextlib.suppress(SvcError):
                if (got := await d.get(name)) is not None:
                    point = got.mountpoint
                    with contextlib.suppress(SvcError):
                        point = point or await d.path(name)
                    return await self._record(driver, name, point, options, labels,
                                              anonymous, scope)
            await d.create(name, options)
        except SvcError as exc:
            raise op_error(exc, "create", name) from None
        point = ""
        with contextlib.suppress(SvcError):
            point = await d.path(name)
        return await self._record(driver, name, point, options, labels, anonymous, scope)

    async def _record(self, driver: str, name: str, point: str,
                      options: dict[str, str] | None, labels: dict[str, str] | None,
                      anonymous: bool, scope: str) -> Volume:
        return await self._keep(Volume(name, driver, point, dict(options or {}),
                                       dict(labels or {}), time.time_ns(), anonymous,
                                       scope=scope))

    async def remove(self, name: str) -> None:
        """Delete a volume no container refers to (409 otherwise, with their ids); a
        plugin's volume is removed by its plugin first (after any Unmount it is owed)."""
        for cid in sorted(self.get(name).owed):
            try:
                await self.refs.settle(self.get(name), cid)
            except SvcError as exc:
                raise op_error(exc, "remove", name) from None
        async with self._names.hold(name):
            v = self.get(name)
            users = self.referrers(name) or sorted(v.users | v.owed)
            if users:
                raise Conflict(f"unable to remove volume: remove {name}: volume is in use - "
                               f"[{', '.join(users)}]")
            if v.local:
                with trio.CancelScope(shield=True):
                    await self._forget(name)
                    await self.local.destroy(v)
            else:
                await self._remove_remote(v)
        self.events.publish("volume", "destroy", name, {"driver": v.driver})

    async def _remove_remote(self, v: Volume) -> None:
        try:
            d = await self.drivers.driver(v.driver)
            await d.remove(v.name)
        except PluginCallNotFound as exc:  # the plugin has no such volume: nor has svc now
            with trio.CancelScope(shield=True):
                await self._forget(v.name)
            raise op_error(exc, "remove", v.name) from None
        except SvcError as exc:
            raise op_error(exc, "remove", v.name) from None
        with trio.CancelScope(shield=True):
            await self._forget(v.name)

    async def _forget(self, name: str) -> None:
        await self._delete(name)
        del self.volumes[name]

    async def mount(self, name: str, cid: str, destination: str, rw: bool,
                    propagation: str = "") -> str:
        """The path of volume ``name`` for container ``cid``: a local one's directory (its
        device mounted first if it has one and no other container has), a plugin's answer
        to ``Mount``. Idempotent per container.

        Raises:
            SvcError: the plugin's (``VolumeDriver.Mount: <its words>``), or its timeout.
        """
        v = self.get(name)
        if v.local:
            async with self._names.hold(name):
                new = await self.local.mount(v, cid)
            point = v.mountpoint
        else:
            point, new = await self.refs.mount(v, cid)
        if new:
            self.events.publish("volume", "mount", name, {
                "container": cid, "destination": destination, "driver": v.driver,
                "propagation": propagation, "read/write": "true" if rw else "false"})
        return point

    async def unmount(self, name: str, cid: str) -> None:
        """Container ``cid`` stopped using the volume: a local one's device is unmounted
        after the last user; a plugin is sent ``Unmount`` (owed, if it cannot be now).
        Idempotent; never raises for a plugin's sake."""
        v = self.volumes.get(name)
        if v is None:
            return
        if not v.local:
            with trio.CancelScope(shield=True):
                await self.refs.unmount(v, cid)
            return
        if cid not in v.users:
            return
        with trio.CancelScope(shield=True):
            async with self._names.hold(name):
                await self.local.unmount(v, cid)
        self.events.publish("volume", "unmount", name, {"container": cid, "driver": LOCAL})

    async def fill(self, mountpoint: str, source: Path) -> None:
        """Copy ``source`` (the image's content at the mount point) into a volume's files at
        ``mountpoint`` (what ``mount`` gave) if they are empty, as dockerd does."""
        await local.fill(mountpoint, source)

    async def _save_locked(self, v: Volume) -> None:
        async with self._names.hold(v.name):
            if self.volumes.get(v.name) is v:
                await self._save(v.name, v.record())


def _existing(v: Volume, driver: str, options: dict[str, str] | None) -> Volume:
    """The answer to creating a name that exists: that volume, unless another driver was
    asked for by name (moby: the local driver's name, or none, takes the existing one)."""
    if driver not in ("", LOCAL) and driver != v.driver:
        raise Conflict(f"A volume named {v.name} already exists with the {v.driver} driver. "
                       "Choose a different volume name.")
    if v.local and options and options != v.options:
        raise Conflict(f"volume {v.name} already exists with other options")
    return v
