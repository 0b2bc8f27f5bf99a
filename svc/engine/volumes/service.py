"""Volumes: the local driver, its records, who uses a volume, and mounting one for a container.

A volume is a directory, ``<root>/volumes/<name>/_data`` (its ``Mountpoint``), with a durable
record (name, driver options, labels, whether it was made anonymously for a container). With
driver options (``type``, ``device``, ``o``: a tmpfs, a bind of a host directory, a device) the
device is mounted on that directory while at least one running container uses the volume, as
the local driver users know does, and unmounted after the last one stops.

A volume is *in use* while any container (running or not) refers to it; the containers
service answers that question (``referrers``). Events: create, mount, unmount, destroy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from svc.engine.events import EventBus
from svc.errors import Conflict, InvalidParameter, NotFound
from svc.runtime.mounts import mount_device, unmount, unmount_all
from svc.storage import volumes as dirs

log = logging.getLogger("svc.volumes")

DRIVER = "local"
NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
OPTION_KEYS = ("type", "device", "o")


@dataclass
class Volume:
    name: str
    mountpoint: Path
    options: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    created_ns: int = 0
    anonymous: bool = False  # made for a container (a path alone, an image VOLUME)
    users: set[str] = field(default_factory=set)  # running containers that have it mounted

    driver = DRIVER

    def record(self) -> dict[str, Any]:
        return {"Name": self.name, "Driver": DRIVER, "Options": self.options,
                "Labels": self.labels, "CreatedAt": self.created_ns,
                "Anonymous": self.anonymous}


NAME_MAX = 255  # a volume's name is a directory name under <root>/volumes


def check_name(name: str) -> None:
    """The local driver's rule for names (dockerd's message), and the filesystem's length."""
    if len(name) > NAME_MAX:
        raise InvalidParameter(f"volume name {name[:32]}... is too long: at most {NAME_MAX} "
                               "characters")
    if not NAME_RE.fullmatch(name):
        raise InvalidParameter(
            f'"{name}" includes invalid characters for a local volume name, only '
            '"[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host '
            "directory, use absolute path")


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise InvalidParameter(f"invalid filter 'name={text}': {exc}") from None


def check_driver(driver: str) -> None:
    if driver not in ("", DRIVER):
        raise NotFound(f"volume driver {driver!r} not found: only the local driver is "
                       "available")


def check_options(options: dict[str, str]) -> None:
    """The local driver's options: ``type``, ``device`` and ``o``, as mount(8) takes them."""
    for key in options:
        if key not in OPTION_KEYS:
            raise InvalidParameter(f'invalid option key: "{key}" (the local driver takes '
                                   "type, device and o)")
    if options and not (options.get("type") and options.get("device")):
        raise InvalidParameter("the local driver's options need both type and device "
                               "(e.g. type=tmpfs,device=tmpfs or type=none,device=/path,o=bind)")
    if "bind" in options.get("o", "").split(",") or "rbind" in options.get("o", "").split(","):
        device = options["device"]
        if not device.startswith("/") or not Path(device).is_dir():
            raise InvalidParameter(f"the bind source {device!r} of the volume is not an "
                                   "existing absolute directory")


class VolumeService:
    def __init__(self, root: Path, events: EventBus,
                 save: Callable[[str, dict[str, Any]], Awaitable[None]],
                 delete: Callable[[str], Awaitable[None]]) -> None:
        self.dir = root / "volumes"  # the records live in the store, <root>/store/volumes
        self.events = events
        self._save, self._delete = save, delete
        self.volumes: dict[str, Volume] = {}
        self.referrers: Callable[[str], list[str]] = lambda name: []
        self._lock = trio.Lock()

    def open(self, records: dict[str, dict[str, Any]]) -> None:
        """Load the records and unmount what a crash left mounted (blocking; before serving)."""
        for name, rec in records.items():
            self.volumes[name] = Volume(
                name=name, mountpoint=dirs.data_dir(self.dir, name),
                options={str(k): str(v) for k, v in (rec.get("Options") or {}).items()},
                labels={str(k): str(v) for k, v in (rec.get("Labels") or {}).items()},
                created_ns=int(rec.get("CreatedAt") or 0),
                anonymous=bool(rec.get("Anonymous")))
        if self.dir.exists():
            for point in unmount_all(self.dir):
                log.info("unmounted %s, left mounted by a crash", point)

    def path(self, name: str) -> Path:
        """Where volume ``name`` has (or will have) its files."""
        return dirs.data_dir(self.dir, name)

    def get(self, name: str) -> Volume:
        v = self.volumes.get(name)
        if v is None:
            raise NotFound(f"get {name}: no such volume")
        return v

    def select(self, dangling: bool | None = None, names: list[str] | None = None,
               drivers: list[str] | None = None,
               labels: list[str] | None = None) -> list[Volume]:
        """The volumes the list filters keep, as dockerd filters them: ``name`` a regular
        expression searched in the name, ``driver`` exact, ``label`` ``key`` or
        ``key=value`` (every one must hold); values of one filter are alternatives."""
        out = sorted(self.volumes.values(), key=lambda v: v.name)
        if dangling is not None:
            out = [v for v in out if (not self.referrers(v.name)) == dangling]
        if names:
            patterns = [_pattern(n) for n in names]
            out = [v for v in out if any(p.search(v.name) for p in patterns)]
        if drivers:
            out = [v for v in out if v.driver in drivers]
        for label in labels or []:
            key, sep, value = label.partition("=")
            out = [v for v in out if key in v.labels and (not sep or v.labels[key] == value)]
        return out

    async def create(self, name: str | None, *, driver: str = "", options: dict[str, str] | None
                     = None, labels: dict[str, str] | None = None,
                     anonymous: bool = False) -> Volume:
        """A new volume, or the existing one of that name (as dockerd answers a second create).

        Cancellation: shielded once the directory is being made, so a record never lacks its
        directory; a crash between the two leaves a directory that a later create reuses.
        """
        check_driver(driver)
        options = dict(options or {})
        check_options(options)
        if name is None:
            name = secrets.token_hex(32)
        check_name(name)
        async with self._lock:
            existing = self.volumes.get(name)
            if existing is not None:
                if options and options != existing.options:
                    raise Conflict(f"volume {name} already exists with other options")
                return existing
            v = Volume(name=name, mountpoint=dirs.data_dir(self.dir, name), options=options,
                       labels=dict(labels or {}), created_ns=time.time_ns(),
                       anonymous=anonymous)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(dirs.create, self.dir, name)
                try:
                    await self._save(name, v.record())
                except BaseException:  # not recorded (a full disk): no directory either
                    with contextlib.suppress(OSError):
                        await trio.to_thread.run_sync(dirs.remove, self.dir, name)
                    raise
                self.volumes[name] = v
        self.events.publish("volume", "create", name, {"driver": DRIVER})
        return v

    async def remove(self, name: str) -> None:
        """Delete a volume no container refers to (409 otherwise, with their ids)."""
        async with self._lock:
            v = self.get(name)
            users = self.referrers(name)
            if users:
                raise Conflict(f"unable to remove volume: remove {name}: volume is in use - "
                               f"[{', '.join(users)}]")
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_quiet_unmount, v.mountpoint)
                await self._delete(name)
                del self.volumes[name]
                await trio.to_thread.run_sync(dirs.remove, self.dir, name)
        self.events.publish("volume", "destroy", name, {"driver": DRIVER})

    async def mount(self, name: str, cid: str, destination: str, rw: bool,
                    propagation: str = "") -> Path:
        """The volume's directory for container ``cid``, its device mounted first if it has
        one and no other container has. Idempotent per container."""
        v = self.get(name)
        async with self._lock:
            if cid in v.users:
                return v.mountpoint
            if v.options and not v.users:
                await trio.to_thread.run_sync(dirs.create, self.dir, name)
                o = v.options
                await mount_device(o["device"], v.mountpoint, o["type"], o.get("o", ""))
            v.users.add(cid)
        self.events.publish("volume", "mount", name, {
            "container": cid, "destination": destination, "driver": DRIVER,
            "propagation": propagation, "read/write": "true" if rw else "false"})
        return v.mountpoint

    async def unmount(self, name: str, cid: str) -> None:
        """Container ``cid`` stopped using the volume; its device is unmounted after the
        last user. Idempotent."""
        v = self.volumes.get(name)
        if v is None or cid not in v.users:
            return
        with trio.CancelScope(shield=True):
            async with self._lock:
                v.users.discard(cid)
                if v.options and not v.users:
                    await trio.to_thread.run_sync(_quiet_unmount, v.mountpoint)
        self.events.publish("volume", "unmount", name, {"container": cid, "driver": DRIVER})

    async def fill(self, name: str, source: Path) -> None:
        """Copy ``source`` (the image's content at the mount point, resolved inside the
        container's root) into the volume if the volume is empty, as dockerd does."""
        v = self.get(name)
        if await trio.to_thread.run_sync(dirs.is_empty, v.mountpoint):
            await trio.to_thread.run_sync(dirs.copy_contents, source, v.mountpoint)


def _quiet_unmount(path: Path) -> None:
    with contextlib.suppress(OSError):
        unmount(path)
