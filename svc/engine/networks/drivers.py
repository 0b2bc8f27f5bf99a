"""Network drivers and IPAM drivers that are plugins: looked up by name, asked what they can
once per activation, and called.

As libnetwork did when a plugin was activated: a NetworkDriver is asked ``GetCapabilities``
(its scope; an answer other than ``local``/``global`` makes it unusable) and, when it is of
global scope and the daemon is in a cluster, told of every node (``DiscoverNew``); an
IpamDriver is asked ``GetCapabilities`` (a failure is taken as none, as libnetwork took it)
and ``GetDefaultAddressSpaces``. A plugin that dies and comes back is a new activation, asked
again. Node notifications (on activation, and as nodes come and go) are sent in the
background, in order, by ``run``: a plugin that hangs on them holds up nobody.

Every call is bounded by the plugin timeout; the one lock here is per plugin name, held only
while a new activation is asked its capabilities.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.engine.networks import ipam_api, remote_api
from svc.errors import NotFound, SvcError
from svc.plugins.client import PluginCallError
from svc.plugins.discovery import PluginNotFound
from svc.plugins.manager import Plugin, PluginManager

log = logging.getLogger("svc.networks")
Nodes = Callable[[], list[tuple[str, bool]]]  # the cluster's nodes: (address, this one)


class DriverNotFound(NotFound):
    """No plugin has the name (the engines' words first)."""


class RemoteDriver:
    """One activation of a NetworkDriver plugin."""

    def __init__(self, plugin: Plugin, scope: str) -> None:
        self.plugin, self.scope = plugin, scope

    @property
    def name(self) -> str:
        return self.plugin.name

    async def call(self, method: str, body: Any, *, optional: bool = False,
                   wait: bool = True) -> dict[str, Any]:
        """``NetworkDriver.<method>``'s answer; a refusal raises. ``optional``: a 404 (a
        plugin without the method, as libnetwork allowed for Program/Revoke) is ``{}``.
        Without ``wait``, a plugin that is restarting fails at once."""
        full = f"{remote_api.KIND}.{method}"
        try:
            doc = await self.plugin.call(full, body, retry=wait)
        except PluginNotFound:  # it died, and its socket or spec file has gone since
            raise DriverNotFound(f"plugin not found: network driver {self.name}") from None
        except PluginCallError as exc:
            if optional and exc.status == 404:
                return {}
            raise
        return remote_api.check_err(full, doc)


class RemoteIpam:
    """One activation of an IpamDriver plugin."""

    def __init__(self, plugin: Plugin, requires_mac: bool, spaces: tuple[str, str]) -> None:
        self.plugin, self.requires_mac, self.spaces = plugin, requires_mac, spaces

    @property
    def name(self) -> str:
        return self.plugin.name

    async def call(self, method: str, body: Any, *, wait: bool = True) -> dict[str, Any]:
        try:
            doc = await self.plugin.call(f"{ipam_api.KIND}.{method}", body, retry=wait)
        except PluginNotFound:
            raise DriverNotFound(f"plugin not found: IPAM driver {self.name}") from None
        return ipam_api.check_error(method, doc)


class NetworkPlugins:
    """The network and IPAM plugins in use, per activation."""

    def __init__(self, plugins: PluginManager) -> None:
        self.plugins = plugins
        self.nodes: Nodes = list  # set by the engine when the daemon is in a cluster
        self._drivers: dict[str, RemoteDriver] = {}
        self._ipams: dict[str, RemoteIpam] = {}
        self._probing: dict[str, trio.Lock] = {}
        self._send, self._receive = trio.open_memory_channel[
            Callable[[], Awaitable[None]]](math.inf)

    async def _plugin(self, name: str, kind: str, what: str, wait: bool) -> Plugin:
        try:
            return await self.plugins.get(name, kind, retry=wait)
        except PluginNotFound:
            raise DriverNotFound(f"plugin not found: {what} {name}") from None

    async def driver(self, name: str, *, wait: bool = True) -> RemoteDriver:
        """The NetworkDriver plugin ``name``, its scope known (without ``wait``, a plugin
        that does not answer fails at once instead of being waited for while it starts).

        Raises:
            DriverNotFound: nothing has that name (a 404: "plugin not found").
            SvcError: it cannot be activated, is no network driver, or its capabilities
                are refused or make no sense.
        """
        plugin = await self._plugin(name, remote_api.KIND, "network driver", wait)
        async with self._probing.setdefault(f"net:{name}", trio.Lock()):
            known = self._drivers.get(name)
            if known is not None and known.plugin is plugin:
                return known
            doc = await plugin.call(f"{remote_api.KIND}.GetCapabilities")
            driver = RemoteDriver(plugin, remote_api.parse_scope(doc))
            self._drivers[name] = driver
        if driver.scope == "global":
            for address, self_ in self.nodes():
                self._notify(driver, "DiscoverNew", address, self_)
        return driver

    async def ipam(self, name: str, *, wait: bool = True) -> RemoteIpam:
        """The IpamDriver plugin ``name``, its capabilities and address spaces known.

        Raises:
            DriverNotFound: nothing has that name.
            SvcError: it cannot be activated, is no IPAM driver, or does not say its
                address spaces.
        """
        plugin = await self._plugin(name, ipam_api.KIND, "IPAM driver", wait)
        async with self._probing.setdefault(f"ipam:{name}", trio.Lock()):
            known = self._ipams.get(name)
            if known is not None and known.plugin is plugin:
                return known
            try:
                requires_mac = ipam_api.parse_capabilities(
                    await plugin.call(f"{ipam_api.KIND}.GetCapabilities"))
            except SvcError as exc:  # as libnetwork: registered without capabilities
                log.info("IPAM plugin %s does not say its capabilities: %s", name, exc)
                requires_mac = False
            try:
                spaces = ipam_api.parse_spaces(
                    await plugin.call(f"{ipam_api.KIND}.GetDefaultAddressSpaces"))
            except SvcError as exc:
                exc.message = (f"ipam driver {name!r} failed to return default address "
                               f"spaces: {exc.message}")
                raise
            ipam = self._ipams[name] = RemoteIpam(plugin, requires_mac, spaces)
        return ipam

    def known_scope(self, name: str) -> str:
        known = self._drivers.get(name)
        return known.scope if known is not None else ""

    # -- node discovery ------------------------------------------------------------------

    def node_changed(self, key: str, value: Any | None) -> None:
        """A listener of the cluster's node list (keys are advertise addresses): each
        activated global driver is told of the node that came or went."""
        address = key.rpartition(":")[0] or key
        method = "DiscoverNew" if value is not None else "DiscoverDelete"
        mine = {a for a, self_ in self.nodes() if self_}
        for driver in list(self._drivers.values()):
            if driver.scope == "global":
                self._notify(driver, method, address, address in mine)

    def _notify(self, driver: RemoteDriver, method: str, address: str, self_: bool) -> None:
        async def send() -> None:
            try:
                await driver.call(method, remote_api.discovery(address, self_), optional=True)
            except SvcError as exc:  # libnetwork logged these at debug level
                log.debug("network plugin %s: %s of %s: %s", driver.name, method, address, exc)

        self._send.send_nowait(send)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Send the node notifications, in order, until cancelled."""
        task_status.started()
        async for send in self._receive:
            await send()
