"""User bridge networks: made (a Linux bridge holding the gateway, its iptables rules) and
removed, with the built-in IPAM or an IPAM plugin.

With an IPAM plugin the pools are asked for before the service's lock is taken (a plugin that
hangs holds up only this create), the bridge is made under the lock, and the pools are given
back if anything after them fails.
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import TYPE_CHECKING

import trio

from svc.engine.networks import pools
from svc.engine.networks.held import PoolInfo
from svc.engine.networks.ipam import (
    CreateSpec,
    Network,
    bridge_name_option,
    check_aux,
    plan_ipam,
    plan_ipam6,
    ula_subnet,
)
from svc.engine.networks.ipam_api import LOCAL_SPACE
from svc.errors import Conflict, InvalidParameter, NotFound, SystemError_, as_no_space
from svc.network import bridge as br
from svc.network.firewall import FirewallError

if TYPE_CHECKING:
    from svc.engine.networks.service import NetworkService


class BridgeNetworks:
    def __init__(self, service: NetworkService) -> None:
        self.service = service

    async def create(self, spec: CreateSpec) -> tuple[Network, str]:
        """A user bridge network and a warning; nothing is left if any step fails."""
        svc = self.service
        wanted_bridge = bridge_name_option(spec.options)
        got: tuple[PoolInfo, PoolInfo | None] | None = None
        if spec.ipam_driver:
            got = await self._plugin_pools(spec)
        try:
            return await self._create(spec, wanted_bridge, got)
        except BaseException:
            if got is not None:
                with trio.CancelScope(shield=True):
                    ipam = await svc.plugged.drivers.ipam(spec.ipam_driver)
                    for info in got:
                        if info is not None:
                            await pools.release_pool(ipam, info)
            raise

    async def _plugin_pools(self, spec: CreateSpec) -> tuple[PoolInfo, PoolInfo | None]:
        ipam = await self.service.plugged.drivers.ipam(spec.ipam_driver)
        pool4, pool6 = await pools.request_pools(ipam, ipam.spaces[0], spec)
        if not pool4.gateway:
            with trio.CancelScope(shield=True):
                for info in (pool4, pool6):
                    if info is not None:
                        await pools.release_pool(ipam, info)
            raise InvalidParameter(f"IPAM plugin {spec.ipam_driver} gave the pool "
                                   f"{pool4.pool} no gateway: a bridge needs one")
        return pool4, pool6

    async def _create(self, spec: CreateSpec, wanted_bridge: str,
                      got: tuple[PoolInfo, PoolInfo | None] | None) -> tuple[Network, str]:
        svc = self.service
        name = spec.name
        async with svc.lock:
            warning = svc.check_duplicate(name, spec.check_duplicate)
            if wanted_bridge and any(n.bridge == wanted_bridge for n in svc.bridges()):
                raise Conflict(f"the bridge {wanted_bridge} is used by another network")
            taken = await trio.to_thread.run_sync(svc.subnets_in_use)
            nid = secrets.token_hex(32)
            net = Network(nid, name, "bridge", bridge=wanted_bridge or f"br-{nid[:12]}",
                          internal=spec.internal, options=dict(spec.options or {}),
                          labels=dict(spec.labels or {}),
                          ipam_options=dict(spec.ipam_options or {}),
                          configured=spec.configured)
            if got is not None:
                self._plugin_addressing(net, spec, got, taken)
            else:
                self._builtin_addressing(net, spec, taken)
            with trio.CancelScope(shield=True):
                await self._make(net)
                svc.networks[nid] = net
        svc.events.publish("network", "create", nid, {"name": name, "type": "bridge"})
        return net, warning

    def _builtin_addressing(self, net: Network, spec: CreateSpec,
                            taken: list[ipaddress.IPv4Network]) -> None:
        svc = self.service
        net.subnet, net.gateway, net.ip_range = plan_ipam(spec.subnet, spec.ip_range,
                                                          spec.gateway, taken)
        taken6 = [ipaddress.IPv6Network(n.subnet6) for n in svc.networks.values()
                  if n.subnet6]
        subnet6 = spec.subnet6
        if spec.enable_ipv6 and not subnet6:
            subnet6 = ula_subnet(taken6)
        v6 = plan_ipam6(subnet6, spec.gateway6, taken6)
        if v6[0] and not spec.enable_ipv6:
            net.declared6, v6 = {"Subnet": v6[0], "Gateway": spec.gateway6}, ("", "")
        net.subnet6, net.gateway6 = v6
        net.aux = check_aux(spec.aux or {}, net.subnet)

    def _plugin_addressing(self, net: Network, spec: CreateSpec,
                           got: tuple[PoolInfo, PoolInfo | None],
                           taken: list[ipaddress.IPv4Network]) -> None:
        """The plugin's pools on a bridge: they must not overlap what the host routes."""
        pool4, pool6 = got
        mine = ipaddress.IPv4Network(pool4.pool, strict=False)
        for other in taken:
            if mine.overlaps(other):
                raise Conflict(f"Pool overlaps with other one on this address space: {mine} "
                               f"overlaps {other}")
        net.ipam_driver = spec.ipam_driver
        net.address_space = LOCAL_SPACE
        pools.apply_pools(net, pool4, pool6)
        net.aux = dict(spec.aux or {})
        if spec.subnet6 and not spec.enable_ipv6:
            net.declared6 = {"Subnet": spec.subnet6, "Gateway": spec.gateway6}

    async def _make(self, net: Network) -> None:
        """The bridge, its rules and the record (shielded by the caller)."""
        svc = self.service
        try:
            await trio.to_thread.run_sync(svc.make_bridge, net)
        except br.InterfaceTaken as exc:
            raise Conflict(str(exc)) from None
        except (br.NetworkError, FirewallError, OSError) as exc:
            await trio.to_thread.run_sync(svc.drop_bridge, net)
            raise as_no_space(exc, "network create") or SystemError_(str(exc)) from exc
        try:
            await svc.save(net.id, net.record())
        except BaseException:  # not recorded (a full disk): no bridge, no rules
            await trio.to_thread.run_sync(svc.drop_bridge, net)
            raise

    async def remove(self, net: Network) -> None:
        """Delete a user bridge network (409 while containers use it), then give back the
        pools of its IPAM plugin."""
        svc = self.service
        if net.held:  # addresses of gone containers its IPAM plugin is still owed
            await svc.plugged.settle(net)
        async with svc.lock:
            if svc.networks.get(net.id) is not net:  # removed while this one waited
                raise NotFound(f"network {net.id} not found")
            svc.refuse_if_used(net)
            with trio.CancelScope(shield=True):
                await svc.delete(net.id)
                del svc.networks[net.id]
                svc.plugged.forget(net)
                await trio.to_thread.run_sync(svc.drop_bridge, net)
        if net.ipam_driver:
            with trio.CancelScope(shield=True):
                await svc.plugged.release_pools(net)
        svc.events.publish("network", "destroy", net.id, {"name": net.name, "type": "bridge"})
