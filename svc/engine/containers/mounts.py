"""A container's mount points, planned at create from VolumesFrom, Binds, HostConfig.Mounts
and the config's (and image's) Volumes, in dockerd's order of precedence.

Each mount point is a ``MountPoint`` record kept in the container's record (in the API's
spelling), so that the anonymous volumes made for it keep their names across restarts.

Binds take these forms (the spec's): ``/ctr`` (an anonymous volume), ``/host:/ctr[:mode]`` (a
bind), ``name:/ctr[:mode]`` (a named volume, created when missing). Modes: ``ro`` or ``rw``,
``z``/``Z`` (accepted, no SELinux here), ``nocopy``, and one propagation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from svc.engine.volumes.base import check_name
from svc.errors import InvalidParameter
from svc.models.containers import HostConfigBody, MountBody

PROPAGATIONS = ("rprivate", "private", "rslave", "slave", "rshared", "shared")


class MountPoint(BaseModel):
    """One mount point of a container."""

    Type: str  # bind, volume or tmpfs
    Name: str = ""  # the volume's name ("" for a bind, or an anonymous volume not made yet)
    Source: str = ""  # the host path
    Destination: str  # the path in the container
    Driver: str = ""  # a volume's driver ("local", or a plugin's name)
    Mode: str = ""  # the bind's mode text, as given
    RW: bool = True
    Propagation: str = ""
    CopyData: bool = False  # fill a new volume from the image's content there
    Anonymous: bool = False  # made for this container (removed with it)
    TmpfsOptions: str = ""  # size=...,mode=...


@dataclass(frozen=True)
class BindSpec:
    source: str  # "" for an anonymous volume; a name for a named volume; else a host path
    destination: str
    mode: str
    rw: bool
    copy: bool
    propagation: str

    @property
    def kind(self) -> str:
        if not self.source:
            return "volume"
        return "bind" if self.source.startswith("/") else "volume"


def parse_bind(bind: str, driver: str = "") -> BindSpec:
    """One Binds entry, checked (a volume's name by the rule of ``driver``); errors name
    the entry."""
    parts = bind.split(":")
    if len(parts) > 3 or not all(parts[:2]):
        raise InvalidParameter(f"invalid volume specification: {bind!r}: use /container/path, "
                               "/host/path:/container/path[:mode] or name:/container/path[:mode]")
    if len(parts) == 1:
        source, dest, mode = "", parts[0], ""
    else:
        source, dest = parts[0], parts[1]
        mode = parts[2] if len(parts) == 3 else ""
    rw, copy, propagation = _mode(mode, bind)
    if not dest.startswith("/") or dest.rstrip("/") == "":
        raise InvalidParameter(f"invalid volume specification: {bind!r}: the container path "
                               "must be absolute and not /")
    if source and not source.startswith("/"):
        check_name(source, driver)
    return BindSpec(source, _clean(dest), mode, rw, copy, propagation)


def _mode(mode: str, bind: str) -> tuple[bool, bool, str]:
    rw, copy, propagation, seen_rw = True, True, "", False
    for m in filter(None, mode.split(",")):
        if m in ("ro", "rw"):
            if seen_rw:
                raise InvalidParameter(f"invalid mode: {mode!r} in {bind!r}: ro and rw "
                                       "exclude each other")
            rw, seen_rw = m == "rw", True
        elif m == "nocopy":
            copy = False
        elif m in PROPAGATIONS:
            if propagation:
                raise InvalidParameter(f"invalid mode: {mode!r} in {bind!r}: one propagation")
            propagation = m
        elif m not in ("z", "Z"):
            raise InvalidParameter(f"invalid mode: {m!r} in {bind!r}")
    return rw, copy, propagation


def _clean(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


def check_binds(hc: HostConfigBody) -> None:
    for bind in hc.Binds or []:
        parse_bind(bind, hc.VolumeDriver)
    for m in hc.Mounts or []:
        _check_mount(m, hc.VolumeDriver)
    # VolumeDriver alone is accepted (dockerd uses it only when it makes a volume): an
    # unknown driver is a 404 from the volume create it would take (a Mounts entry's
    # DriverConfig too)
    for dest in hc.Tmpfs or {}:
        if not dest.startswith("/") or dest == "/":
            raise InvalidParameter(f"invalid tmpfs mount point {dest!r}: it must be an "
                                   "absolute path other than /")


def _check_mount(m: MountBody, driver: str) -> None:
    what = f"mount {m.Type or '?'} {m.Source or ''}:{m.Target or ''}"
    if m.Type not in ("bind", "volume", "tmpfs"):
        raise InvalidParameter(f"invalid {what}: Type must be bind, volume or tmpfs")
    if not m.Target.startswith("/") or m.Target.rstrip("/") == "":
        raise InvalidParameter(f"invalid {what}: Target must be an absolute path, not /")
    if m.Type == "bind":
        if not m.Source.startswith("/"):
            raise InvalidParameter(f"invalid {what}: a bind's Source must be an absolute path")
        if not Path(m.Source).exists():
            raise InvalidParameter(f"invalid {what}: bind source path does not exist: "
                                   f"{m.Source}")
    elif m.Type == "volume" and m.Source:
        config = m.VolumeOptions.DriverConfig if m.VolumeOptions else None
        check_name(m.Source, config.Name if config and config.Name else driver)
    elif m.Type == "tmpfs" and m.Source:
        raise InvalidParameter(f"invalid {what}: a tmpfs takes no Source")
    prop = m.BindOptions.Propagation if m.BindOptions else ""
    if prop and prop not in PROPAGATIONS:
        raise InvalidParameter(f"invalid {what}: unknown propagation {prop!r}")


def plan(hc: HostConfigBody, volumes: dict[str, Any] | None,
         volumes_from: list[tuple[list[MountPoint], str]]) -> list[MountPoint]:
    """The container's mount points, destination by destination: those of VolumesFrom (mode
    ``ro``/``rw`` or the original's), overridden by Binds and Mounts, then an anonymous volume
    for each config Volume left. A volume's ``Driver`` is the one asked for, or ""; its path
    (and an anonymous one's ``Name``) is known once it is made."""
    driver = hc.VolumeDriver
    points: dict[str, MountPoint] = {}
    for theirs, mode in volumes_from:
        for m in theirs:
            if m.Type == "tmpfs":
                continue
            copied = m.model_copy(update={"CopyData": False, "Anonymous": False})
            if mode:
                copied.RW = mode == "rw"
                copied.Mode = mode
            points[m.Destination] = copied
    own: set[str] = set()
    for bind in hc.Binds or []:
        b = parse_bind(bind, driver)
        _claim(own, b.destination)
        if b.kind == "bind":
            points[b.destination] = _point("bind", "", b.source, b.destination, b.mode, b.rw,
                                           b.propagation or "rprivate", copy=False)
        else:
            points[b.destination] = _point("volume", b.source, "", b.destination, b.mode,
                                           b.rw, b.propagation, copy=b.copy,
                                           anonymous=not b.source, driver=driver)
    for mb in hc.Mounts or []:
        dest = _clean(mb.Target)
        _claim(own, dest)
        points[dest] = _from_mount(mb, dest, driver)
    for dest in hc.Tmpfs or {}:  # mounted by the spec; a config Volume there is not made
        _claim(own, _clean(dest))
        points.pop(_clean(dest), None)
    tmpfs = {_clean(d) for d in hc.Tmpfs or {}}
    for dest in (d for d in volumes or {} if _clean(str(d)) not in tmpfs):
        dest = _clean(str(dest))
        if dest not in points:
            points[dest] = _point("volume", "", "", dest, "", True, "", copy=True,
                                  anonymous=True, driver=driver)
    return list(points.values())


def _from_mount(mb: MountBody, dest: str, driver: str) -> MountPoint:
    prop = mb.BindOptions.Propagation if mb.BindOptions else ""
    if mb.Type == "bind":
        return _point("bind", "", mb.Source, dest, "", not mb.ReadOnly, prop or "rprivate",
                      copy=False)
    if mb.Type == "volume":
        vo = mb.VolumeOptions
        nocopy = bool(vo and vo.NoCopy)
        if vo and vo.DriverConfig and vo.DriverConfig.Name:
            driver = vo.DriverConfig.Name
        return _point("volume", mb.Source, "", dest, "", not mb.ReadOnly, prop,
                      copy=not nocopy, anonymous=not mb.Source, driver=driver)
    t = mb.TmpfsOptions
    opts = [f"size={t.SizeBytes}"] if t and t.SizeBytes else []
    opts += [f"mode={t.Mode:o}"] if t and t.Mode else []
    point = _point("tmpfs", "", "", dest, "", not mb.ReadOnly, "", copy=False)
    point.TmpfsOptions = ",".join(opts)
    return point


def _claim(own: set[str], dest: str) -> None:
    if dest in own:
        raise InvalidParameter(f"Duplicate mount point: {dest}")
    own.add(dest)


def _point(kind: str, name: str, source: str, dest: str, mode: str, rw: bool, propagation: str,
           *, copy: bool, anonymous: bool = False, driver: str = "") -> MountPoint:
    return MountPoint(Type=kind, Name=name, Source=source, Destination=dest,
                      Driver=driver if kind == "volume" else "", Mode=mode, RW=rw,
                      Propagation=propagation, CopyData=copy, Anonymous=anonymous)


def parse_volumes_from(entry: str) -> tuple[str, str]:
    """``container[:ro|rw]`` -> (container, mode or "")."""
    ref, _, mode = entry.partition(":")
    if not ref or mode not in ("", "ro", "rw"):
        raise InvalidParameter(f"invalid VolumesFrom entry {entry!r}: use "
                               "<container>[:ro|rw]")
    return ref, mode


def volume_options(hc: HostConfigBody, destination: str) -> tuple[dict[str, str], dict[str, str]]:
    """The driver options and labels that a ``Mounts`` entry gives the volume it creates."""
    for m in hc.Mounts or []:
        if m.Type == "volume" and _clean(m.Target) == destination and m.VolumeOptions:
            vo = m.VolumeOptions
            opts = dict(vo.DriverConfig.Options or {}) if vo.DriverConfig else {}
            return opts, dict(vo.Labels or {})
    return {}, {}
