"""Networks whose driver is a plugin: made and removed as libnetwork made and removed them,
and the plugin parts (drivers, endpoints, owed undoing) composed for the network service.

Create: the driver looked up (``GetCapabilities`` on its activation), the pools (the built-in
IPAM's, or an IPAM plugin's ``RequestPool`` and gateway), ``CreateNetwork`` with them, then the
record; a step that fails gives back what came before it. Remove: what gone endpoints still
owe, ``DeleteNetwork``, the record, then the pools. A plugin that refuses ``DeleteNetwork``
does not keep the network (libnetwork logged it and went on); one that does not answer does,
so that the user may try again once it is back.

No lock is held across a plugin call: names and built-in pools being created are kept in
sets, so that two creates at once neither take one name nor one pool.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from typing import TYPE_CHECKING

import trio

from svc.engine.networks import pools, remote_api
from svc.engine.networks.drivers import NetworkPlugins, RemoteDriver, RemoteIpam
from svc.engine.networks.ipam import (
    CreateSpec,
    Network,
    check_aux,
    plan_ipam,
    plan_ipam6,
    ula_subnet,
)
from svc.engine.networks.ipam_api import GLOBAL_SPACE, LOCAL_SPACE
from svc.engine.networks.joins import PluggedEndpoints
from svc.engine.networks.owed import Owed, answered
from svc.errors import Conflict, NotFound, SvcError
from svc.plugins.manager import PluginManager

if TYPE_CHECKING:
    from svc.engine.networks.service import NetworkService

log = logging.getLogger("svc.networks")


class PluginNetworks:
    def __init__(self, service: NetworkService, plugins: PluginManager) -> None:
        self.service = service
        self.drivers = NetworkPlugins(plugins)
        self.owed = Owed(self.drivers, lambda: service.networks.values(), self.save)
        self.endpoints = PluggedEndpoints(service, self.drivers, self.owed, self.save)
        self._creating: list[str] = []  # names
        self._planned: list[ipaddress.IPv4Network] = []  # built-in pools of creates
        self._saving: dict[str, trio.Lock] = {}

    @property
    def planned(self) -> list[ipaddress.IPv4Network]:
        return list(self._planned)

    async def save(self, net: Network) -> None:
        """The network's record, written under its own lock (the last write holds the last
        state); not once the network has gone."""
        async with self._saving.setdefault(net.id, trio.Lock()):
            if self.service.networks.get(net.id) is net:
                await self.service.save(net.id, net.record())

    def forget(self, net: Network) -> None:
        """``net`` is gone: its record's lock too."""
        self._saving.pop(net.id, None)

    async def settle(self, net: Network) -> None:
        """What gone endpoints of ``net`` still owe, undone now; 409 if a plugin does not
        answer for some."""
        await self.owed.settle(net)
        self.service.refuse_if_used(net)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Node notifications and owed undoing, in the background until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.drivers.run)
            await nursery.start(self.owed.run)
            task_status.started()

    # -- create ------------------------------------------------------------------------------

    async def create(self, spec: CreateSpec) -> tuple[Network, str]:
        """A network of the driver plugin ``spec.driver`` and a warning (a second network
        of a name in use, without ``check_duplicate``).

        Cancellation: a checkpoint; the pools are given back and a ``CreateNetwork`` whose
        answer was not read is followed by ``DeleteNetwork`` (shielded).
        """
        svc = self.service
        warning = svc.check_duplicate(spec.name, spec.check_duplicate)
        if spec.check_duplicate and spec.name in self._creating:
            raise Conflict(f"network with name {spec.name} already exists")
        self._creating.append(spec.name)
        try:
            driver = await self.drivers.driver(spec.driver)
            warning = svc.check_duplicate(spec.name, spec.check_duplicate)  # (meanwhile)
            net = Network(secrets.token_hex(32), spec.name, spec.driver,
                          internal=spec.internal, options=dict(spec.options or {}),
                          labels=dict(spec.labels or {}),
                          ipam_options=dict(spec.ipam_options or {}),
                          configured=spec.configured, plugin_scope=driver.scope,
                          ipam_driver=spec.ipam_driver)
            if spec.ipam_driver:
                ipam = await self.drivers.ipam(spec.ipam_driver)
                await self._plugin_pools(net, spec, ipam, driver.scope)
                try:
                    await self._create(net, spec, driver)
                except BaseException:
                    with trio.CancelScope(shield=True):
                        await self.release_pools(net)
                    raise
            else:
                planned = await self._builtin_pools(net, spec, driver.scope)
                try:
                    await self._create(net, spec, driver)
                finally:
                    self._planned.remove(planned)
        finally:
            self._creating.remove(spec.name)
        svc.events.publish("network", "create", net.id, {"name": net.name, "type": net.driver})
        return net, warning

    async def _plugin_pools(self, net: Network, spec: CreateSpec, ipam: RemoteIpam,
                            scope: str) -> None:
        space = ipam.spaces[1] if scope == "global" else ipam.spaces[0]
        pool4, pool6 = await pools.request_pools(ipam, space, spec)
        net.address_space = space
        pools.apply_pools(net, pool4, pool6)
        net.aux = dict(spec.aux or {})

    async def _builtin_pools(self, net: Network, spec: CreateSpec,
                             scope: str) -> ipaddress.IPv4Network:
        """The built-in IPAM's pools, as for a bridge; the IPv4 one counted as taken until
        the create ends."""
        taken = await trio.to_thread.run_sync(self.service.subnets_in_use)
        net.subnet, net.gateway, net.ip_range = plan_ipam(spec.subnet, spec.ip_range,
                                                          spec.gateway, taken)
        taken6 = [ipaddress.IPv6Network(n.subnet6) for n in self.service.networks.values()
                  if n.subnet6]
        subnet6 = spec.subnet6 or (ula_subnet(taken6) if spec.enable_ipv6 else "")
        net.subnet6, net.gateway6 = plan_ipam6(subnet6, spec.gateway6, taken6)
        if net.subnet6 and not spec.enable_ipv6:
            net.declared6 = {"Subnet": net.subnet6, "Gateway": spec.gateway6}
            net.subnet6 = net.gateway6 = ""
        net.aux = check_aux(spec.aux or {}, net.subnet)
        net.address_space = GLOBAL_SPACE if scope == "global" else LOCAL_SPACE
        planned = ipaddress.IPv4Network(net.subnet)
        self._planned.append(planned)
        return planned

    async def _create(self, net: Network, spec: CreateSpec, driver: RemoteDriver) -> None:
        """``CreateNetwork``, then the record (``DeleteNetwork`` again if it cannot be
        written, or if the caller went away meanwhile)."""
        v4, v6 = pools.pool_data(net, net.address_space)
        created = False
        try:
            await driver.call("CreateNetwork", remote_api.create_network(
                net.id, spec.options, enable_ipv6=bool(net.subnet6), internal=net.internal,
                v4=v4, v6=v6))
            created = True
            with trio.CancelScope(shield=True):
                await self.service.save(net.id, net.record())
                self.service.networks[net.id] = net
        except BaseException as exc:
            if not created and answered(exc):  # refused: nothing to undo
                raise
            with trio.CancelScope(shield=True):
                try:
                    await driver.call("DeleteNetwork", remote_api.network_only(net.id))
                except SvcError as exc:
                    log.warning("network plugin %s: undoing the create of %s: %s",
                                driver.name, net.name, exc)
            raise

    # -- remove ------------------------------------------------------------------------------

    async def remove(self, net: Network) -> None:
        """Delete the plugin network ``net`` (409 while containers use it).

        Cancellation: before ``DeleteNetwork`` is answered, the network stays (to be
        removed again); after, the rest is shielded.
        """
        svc = self.service
        if net.removing:
            raise Conflict(f"network {net.name} is being removed")
        net.removing = True
        try:
            await self.settle(net)
            driver = await self.drivers.driver(net.driver)
            try:
                await driver.call("DeleteNetwork", remote_api.network_only(net.id))
            except SvcError as exc:
                if not answered(exc):
                    raise
                log.warning("network plugin %s: %s (the network %s is removed all the same, "
                            "as the engines did)", driver.name, exc, net.name)
        except BaseException:
            net.removing = False
            raise
        with trio.CancelScope(shield=True):
            if svc.networks.get(net.id) is not net:
                raise NotFound(f"network {net.id} not found")
            await svc.delete(net.id)
            del svc.networks[net.id]
            self.forget(net)
            await self.release_pools(net)
        svc.events.publish("network", "destroy", net.id, {"name": net.name, "type": net.driver})

    async def release_pools(self, net: Network) -> None:
        """The pools of ``net``'s IPAM plugin given back (failures logged)."""
        if not net.ipam_driver:
            return
        try:
            ipam = await self.drivers.ipam(net.ipam_driver)
        except SvcError as exc:
            log.warning("network %s: its pools are not released: %s", net.name, exc)
            return
        for info in (net.pool4, net.pool6):
            if info is not None:
                await pools.release_pool(ipam, info)
