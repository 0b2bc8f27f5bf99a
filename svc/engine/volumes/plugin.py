"""One volume plugin's calls, as the engines made them, and what its answers mean.

``VolumeDriver.Create {Name, Opts}``, ``.Remove {Name}``, ``.Mount {Name, ID}``, ``.Unmount
{Name, ID}``, ``.Path {Name}`` -> ``{Mountpoint}``, ``.Get {Name}`` -> ``{Volume: {Name,
Mountpoint, Status}}``, ``.List {}`` -> ``{Volumes: [...]}``, ``.Capabilities {}`` ->
``{Capabilities: {Scope}}``. Every answer may carry ``Err``: a plugin of that generation
answered a refusal with 200 and ``{"Err": "..."}`` as often as with another status, and both
are the same refusal here (``<Method>: <Err>``). ``ID`` is the container's id (the engines
added it in 1.13; a 1.11 plugin ignores it). The parsers below are pure: what a plugin may
answer is checked here, so the rest of the engine sees names and absolute paths only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from svc.engine.volumes.base import DriverNotFound
from svc.plugins.client import PluginBadAnswer, PluginCallError, remote_error
from svc.plugins.discovery import PluginNotFound
from svc.plugins.manager import Plugin

log = logging.getLogger("svc.volumes")

KIND = "VolumeDriver"
SCOPES = ("local", "global")


@dataclass(frozen=True)
class Listed:
    """A volume as a plugin describes it (``Get``, ``List``)."""

    name: str
    mountpoint: str = ""
    status: dict[str, Any] | None = None


def check_err(method: str, doc: dict[str, Any]) -> None:
    """A 200 answer whose ``Err`` is set is a refusal, as the engines' proxy read it."""
    err = doc.get("Err")
    if err:
        raise remote_error(method, 200, str(err))


def parse_mountpoint(method: str, doc: dict[str, Any], *, required: bool) -> str:
    """``Mountpoint``: an absolute path ("" allowed where the answer may lack one)."""
    check_err(method, doc)
    point = doc.get("Mountpoint") or ""
    if not isinstance(point, str) or (point and not point.startswith("/")) or \
            (required and not point):
        raise PluginBadAnswer(f"{method}: the plugin answered Mountpoint={point!r}, "
                              "not an absolute path on this host")
    return point


def parse_volume(method: str, item: Any) -> Listed:
    if not isinstance(item, dict) or not isinstance(item.get("Name"), str) or \
            not item["Name"]:
        raise PluginBadAnswer(f"{method}: the plugin answered {item!r} for a volume, "
                              "which needs at least a Name")
    status = item.get("Status")
    return Listed(item["Name"], parse_mountpoint(method, item, required=False),
                  status if isinstance(status, dict) and status else None)


def parse_get(doc: dict[str, Any]) -> Listed | None:
    """``Get``'s volume; None when the plugin answered no volume and no error (moby took
    that as "no such volume")."""
    check_err("VolumeDriver.Get", doc)
    item = doc.get("Volume")
    return None if item is None else parse_volume("VolumeDriver.Get", item)


def parse_list(doc: dict[str, Any]) -> list[Listed]:
    check_err("VolumeDriver.List", doc)
    items = doc.get("Volumes") or []
    if not isinstance(items, list):
        raise PluginBadAnswer(f"VolumeDriver.List: the plugin answered Volumes={items!r}, "
                              "not a list")
    return [parse_volume("VolumeDriver.List", item) for item in items]


def parse_scope(doc: dict[str, Any]) -> str:
    """``Capabilities.Scope``, lower-cased; missing or unknown is ``local`` (as moby)."""
    check_err("VolumeDriver.Capabilities", doc)
    caps = doc.get("Capabilities")
    scope = str(caps.get("Scope") or "").lower() if isinstance(caps, dict) else ""
    return scope if scope in SCOPES else "local"


class VolumeDriverPlugin:
    """The VolumeDriver calls of one activated plugin (bounded by the plugin timeout)."""

    def __init__(self, plugin: Plugin, *, wait: bool = True) -> None:
        self.plugin = plugin
        self.wait = wait  # for a plugin that is starting again (``ls`` does not wait)

    @property
    def name(self) -> str:
        return self.plugin.name

    async def _call(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.plugin.call(method, args, retry=self.wait)
        except PluginNotFound:  # it died, and its socket or spec file has gone since
            raise DriverNotFound(f"Error looking up volume plugin {self.name}: plugin not "
                                 "found") from None

    async def create(self, name: str, opts: dict[str, str] | None) -> None:
        check_err("VolumeDriver.Create", await self._call(
            "VolumeDriver.Create", {"Name": name, "Opts": opts}))

    async def remove(self, name: str) -> None:
        check_err("VolumeDriver.Remove", await self._call(
            "VolumeDriver.Remove", {"Name": name}))

    async def mount(self, name: str, cid: str) -> str:
        doc = await self._call("VolumeDriver.Mount", {"Name": name, "ID": cid})
        return parse_mountpoint("VolumeDriver.Mount", doc, required=True)

    async def unmount(self, name: str, cid: str) -> None:
        check_err("VolumeDriver.Unmount", await self._call(
            "VolumeDriver.Unmount", {"Name": name, "ID": cid}))

    async def path(self, name: str) -> str:
        doc = await self._call("VolumeDriver.Path", {"Name": name})
        return parse_mountpoint("VolumeDriver.Path", doc, required=False)

    async def get(self, name: str) -> Listed | None:
        return parse_get(await self._call("VolumeDriver.Get", {"Name": name}))

    async def list(self) -> list[Listed]:
        return parse_list(await self._call("VolumeDriver.List", {}))

    async def scope(self) -> tuple[str, bool]:
        """The plugin's scope, and whether that answer holds for this activation: a plugin
        that does not serve ``Capabilities`` (a 404: the engines of 1.11 had no such call)
        is ``local``, as later engines took it; any other failure is ``local`` for now."""
        try:
            return parse_scope(await self._call("VolumeDriver.Capabilities", {})), True
        except PluginCallError as exc:
            if exc.status == 404:
                return "local", True
            log.warning("volume plugin %s: %s; taking it as local", self.name, exc)
        except PluginBadAnswer as exc:
            log.warning("volume plugin %s: %s; taking it as local", self.name, exc)
        return "local", False
