"""The volume plugins as drivers: each looked up by name (with the engines' wording when it
cannot be), each activation's scope, and the calls that ask every plugin (``volume ls``,
finding a name no record has).

Each plugin call is bounded by the plugin timeout (the core's), and the calls that ask several
plugins ask them at once: a plugin that hangs costs the caller that bound, once, and nobody
else anything; one that is down is left out of a listing with a warning.
"""

from __future__ import annotations

import logging

import trio

from svc.engine.volumes.base import DriverNotFound
from svc.engine.volumes.plugin import KIND, Listed, VolumeDriverPlugin
from svc.errors import SvcError
from svc.plugins.discovery import PluginNotFound
from svc.plugins.manager import Plugin, PluginManager

log = logging.getLogger("svc.volumes")


class PluginVolumes:
    """Volume drivers that are plugins, found through the engine's plugin manager."""

    def __init__(self, plugins: PluginManager) -> None:
        self.plugins = plugins
        self._scopes: dict[str, tuple[Plugin, str]] = {}  # per activation

    async def driver(self, name: str) -> VolumeDriverPlugin:
        """The plugin ``name`` as a volume driver, its scope known.

        Raises:
            SvcError: of the lookup's kind (a 404 for a name nothing has), in moby's words:
                ``Error looking up volume plugin <name>: <why>``.
        """
        try:
            plugin = await self.plugins.get(name, KIND)
        except PluginNotFound as exc:
            raise DriverNotFound(f"Error looking up volume plugin {name}: {exc}") from None
        except SvcError as exc:
            exc.message = f"Error looking up volume plugin {name}: {exc.message}"
            raise
        return VolumeDriverPlugin(plugin)

    async def scope(self, d: VolumeDriverPlugin) -> str:
        """``Capabilities``, asked once per activation of the plugin (a plugin that answers
        404 is ``local``, and is not asked again until it is activated again)."""
        known = self._scopes.get(d.name)
        if known is not None and known[0] is d.plugin:
            return known[1]
        scope, final = await d.scope()
        if final:
            self._scopes[d.name] = (d.plugin, scope)
        return scope

    def known_scope(self, name: str) -> str:
        """The scope plugin ``name`` last gave ("" if it has not been asked)."""
        known = self._scopes.get(name)
        return known[1] if known is not None else ""

    async def find(self, name: str) -> tuple[str, Listed] | None:
        """The plugin that has a volume ``name`` (``Get`` asked of every volume plugin at
        once; the first by plugin name wins), as moby probed its drivers for a name that no
        record had. Plugins that fail are skipped."""
        found: dict[str, Listed] = {}

        async def ask(d: VolumeDriverPlugin) -> None:
            try:
                got = await d.get(name)
            except SvcError as exc:
                log.debug("volume plugin %s has no volume %s: %s", d.name, name, exc)
                return
            if got is not None and got.name == name:
                found[d.name] = got

        async with trio.open_nursery() as nursery:
            for plugin in await self.plugins.get_all(KIND):
                nursery.start_soon(ask, VolumeDriverPlugin(plugin, wait=False))
        if not found:
            return None
        first = min(found)
        return first, found[first]

    async def list_all(self, only: list[str] | None, recorded: set[str]
                       ) -> tuple[dict[str, list[Listed]], dict[str, str]]:
        """Every volume plugin's ``List`` at once (only those named in ``only``, if given).

        Returns:
            The volumes by driver, and the drivers that could not answer with why (a
            driver that some record names but that cannot be found is one of them).
        """
        failed: dict[str, str] = {}
        plugins = await self.plugins.get_all(KIND, failed)
        failed = {n: why for n, why in failed.items() if n in recorded}
        answered = {p.name for p in plugins}
        for name in recorded - answered - set(failed):
            failed[name] = f"Error looking up volume plugin {name}: plugin not found"
        if only is not None:
            plugins = [p for p in plugins if p.name in only]
            failed = {n: why for n, why in failed.items() if n in only}
        listed: dict[str, list[Listed]] = {}

        async def ask(d: VolumeDriverPlugin) -> None:
            try:
                await self.scope(d)
                listed[d.name] = await d.list()
            except SvcError as exc:
                failed[d.name] = str(exc)

        async with trio.open_nursery() as nursery:
            for plugin in plugins:
                nursery.start_soon(ask, VolumeDriverPlugin(plugin, wait=False))
        return listed, failed
