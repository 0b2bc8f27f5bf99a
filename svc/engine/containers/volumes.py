"""A container's volumes from the containers service's side: its mount points planned at
create (and the volumes they name made), the containers that use a volume, and ``rm -v``."""

from __future__ import annotations

import contextlib
from typing import Any

from svc.engine.containers.container import Container
from svc.engine.containers.mounts import MountPoint, parse_volumes_from, plan, volume_options
from svc.engine.containers.registry import ContainerRegistry
from svc.engine.volumes.base import DriverNotFound
from svc.engine.volumes.service import VolumeService
from svc.errors import InvalidParameter, SvcError
from svc.models.containers import HostConfigBody


class ContainerVolumes:
    """The containers service's volume side: it needs the volumes and the known containers."""

    def __init__(self, volumes: VolumeService, registry: ContainerRegistry) -> None:
        self.volumes = volumes
        self.registry = registry

    def volumes_from(self, hc: HostConfigBody) -> list[tuple[list[MountPoint], str]]:
        out = []
        for entry in hc.VolumesFrom or []:
            ref, mode = parse_volumes_from(entry)
            out.append((self.registry.resolve(ref).mounts, mode))
        return out

    async def make_mounts(self, hc: HostConfigBody, volumes: Any,
                           volumes_from: list[tuple[list[MountPoint], str]],
                           before: list[MountPoint]) -> list[MountPoint]:
        """Plan the mount points and make the volumes they name (anonymous ones too; those
        made before for the same destination are reused). Cancellation: a volume already made
        stays (a dangling one, if the create fails)."""
        try:
            return await self._make_mounts(hc, volumes, volumes_from, before)
        except DriverNotFound as exc:  # not a 404: the CLI would take it for a missing image
            raise InvalidParameter(str(exc)) from None

    async def _make_mounts(self, hc: HostConfigBody, volumes: Any,
                           volumes_from: list[tuple[list[MountPoint], str]],
                           before: list[MountPoint]) -> list[MountPoint]:
        vols = self.volumes
        points = plan(hc, volumes if isinstance(volumes, dict) else None, volumes_from)
        reuse = {m.Destination: m for m in before if m.Anonymous}
        for m in (m for m in points if m.Type == "volume"):
            old = reuse.get(m.Destination)
            if m.Name:
                driver_opts, labels = volume_options(hc, m.Destination)
                v = await vols.create(m.Name, driver=m.Driver, options=driver_opts or None,
                                      labels=labels)
            elif old is not None and vols.exists(old.Name):
                v = vols.get(old.Name)
            else:
                v = await vols.create(None, driver=m.Driver, anonymous=True)
            # a plugin's path is known for sure once it is mounted (the start sets it)
            m.Name, m.Source, m.Driver = v.name, v.mountpoint, v.driver
        return points

    async def drop_anonymous(self, c: Container,
                              mounts: list[MountPoint] | None = None) -> None:
        """Remove the anonymous volumes of ``c`` (or those of ``mounts``) that no other
        container refers to (``rm -v``)."""
        for m in c.mounts if mounts is None else mounts:
            if m.Anonymous and self.volumes.exists(m.Name):
                others = [r for r in self.users(m.Name) if r != c.id]
                if not others:
                    with contextlib.suppress(SvcError):
                        await self.volumes.remove(m.Name)

    def users(self, name: str) -> list[str]:
        """The containers (any state) whose mount points name volume ``name``."""
        return [c.id for c in self.registry.all()
                if any(m.Name == name for m in c.mounts)]
