"""The local driver: a volume is a directory, ``<root>/volumes/<name>/_data`` (its
``Mountpoint``). With driver options (``type``, ``device``, ``o``: a tmpfs, a bind of a host
directory, a device) the device is mounted on that directory while at least one running
container uses the volume, as the local driver users know does, and unmounted after the last
one stops. A crash leaves devices mounted: ``open`` unmounts them before the daemon serves.

The service holds the volume's name lock around each of these.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import trio

from svc.engine.volumes.base import Volume
from svc.errors import InvalidParameter
from svc.runtime.mounts import mount_device, unmount, unmount_all
from svc.storage import volumes as dirs

log = logging.getLogger("svc.volumes")

OPTION_KEYS = ("type", "device", "o")


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


class LocalDriver:
    def __init__(self, root: Path) -> None:
        self.dir = root / "volumes"  # the records live in the store, <root>/store/volumes

    def open(self) -> None:
        """Unmount what a crash left mounted (blocking; before serving)."""
        if self.dir.exists():
            for point in unmount_all(self.dir):
                log.info("unmounted %s, left mounted by a crash", point)

    def path(self, name: str) -> Path:
        return dirs.data_dir(self.dir, name)

    async def make(self, v: Volume) -> None:
        """The volume's directories (an existing one is kept: a crash may have left it)."""
        await trio.to_thread.run_sync(dirs.create, self.dir, v.name)

    async def destroy(self, v: Volume) -> None:
        """Its device unmounted if it has one, its files deleted."""
        await trio.to_thread.run_sync(_quiet_unmount, Path(v.mountpoint))
        await trio.to_thread.run_sync(dirs.remove, self.dir, v.name)

    async def mount(self, v: Volume, cid: str) -> bool:
        """``v`` ready for container ``cid``: its device mounted first if it has one and no
        other container has it. Returns False if it was already mounted for ``cid``."""
        if cid in v.users:
            return False
        if v.options and not v.users:
            await trio.to_thread.run_sync(dirs.create, self.dir, v.name)
            o = v.options
            await mount_device(o["device"], Path(v.mountpoint), o["type"], o.get("o", ""))
        v.users.add(cid)
        return True

    async def unmount(self, v: Volume, cid: str) -> None:
        """``cid`` stopped using ``v``; its device is unmounted after the last user."""
        v.users.discard(cid)
        if v.options and not v.users:
            await trio.to_thread.run_sync(_quiet_unmount, Path(v.mountpoint))


async def fill(mountpoint: str, source: Path) -> None:
    """Copy ``source`` (the image's content at the mount point, resolved inside the
    container's root) into a volume's files if they are empty, as dockerd does."""
    target = Path(mountpoint)
    if await trio.to_thread.run_sync(dirs.is_empty, target):
        await trio.to_thread.run_sync(dirs.copy_contents, source, target)


def _quiet_unmount(path: Path) -> None:
    with contextlib.suppress(OSError):
        unmount(path)
