"""Pools and addresses from an IPAM plugin, in the order libnetwork asked for them: at a
network's create ``RequestPool`` (IPv4, then IPv6 when enabled and configured), its gateway
(from the pool's data, else ``RequestAddress`` with the gateway's request type; always
requested when the user named one) and each auxiliary address; at its removal the same
released; per endpoint ``RequestAddress`` and ``ReleaseAddress``.

Whatever a failed create got is released before the error goes out (shielded: a caller that
went away leaves no pool behind); a release that fails is logged, as libnetwork did.
"""

from __future__ import annotations

import ipaddress
import logging

import trio

from svc.engine.networks import ipam_api
from svc.engine.networks.drivers import RemoteIpam
from svc.engine.networks.held import PoolInfo
from svc.engine.networks.ipam import CreateSpec, Network
from svc.engine.networks.remote_api import PoolData
from svc.errors import InvalidParameter, SvcError
from svc.plugins.client import PluginCallError

log = logging.getLogger("svc.networks")


async def request_pool(ipam: RemoteIpam, space: str, *, subnet: str, ip_range: str,
                       gateway: str, aux: dict[str, str], options: dict[str, str] | None,
                       v6: bool) -> PoolInfo:
    """A pool, its gateway and auxiliary addresses; all released again if one fails.

    Raises:
        SvcError: the plugin's refusal (or nonsense), or an auxiliary address outside the
            pool (400).
    """
    doc = await ipam.call("RequestPool", ipam_api.request_pool(space, subnet, ip_range,
                                                               options, v6))
    pool = ipam_api.parse_pool(doc, v6)
    info = PoolInfo(pool.pool_id, pool.pool, pool.gateway, dict(pool.data))
    try:
        if gateway or not info.gateway:
            try:
                info.gateway = await request_address(ipam, info, gateway,
                                                     ipam_api.gateway_options())
            except SvcError as exc:
                exc.message = f"failed to allocate gateway ({gateway}): {exc.message}"
                raise
        await _reserve_aux(ipam, info, aux, ip_range)
    except BaseException:
        with trio.CancelScope(shield=True):
            await release_pool(ipam, info)
        raise
    return info


async def _reserve_aux(ipam: RemoteIpam, info: PoolInfo, aux: dict[str, str],
                       ip_range: str) -> None:
    """Each auxiliary address reserved (libnetwork: those outside the sub-pool that the
    plugin refuses are left to the user: only the addressable part is the plugin's)."""
    net = ipaddress.ip_network(info.pool)
    for name, address in aux.items():
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            raise InvalidParameter(f"non parsable secondary ip address ({name}:{address}) "
                                   "passed for network") from None
        if ip not in net:
            raise InvalidParameter(f"auxiliary address: ({name}:{address}) must belong to "
                                   f"the master pool: {net}")
        try:
            info.aux[name] = await request_address(ipam, info, address, None)
        except PluginCallError:
            if ip_range and ip in ipaddress.ip_network(ip_range, strict=False):
                raise
            log.info("IPAM plugin %s did not reserve the auxiliary address %s=%s (outside "
                     "its sub-pool)", ipam.name, name, address)


async def request_pools(ipam: RemoteIpam, space: str, spec: CreateSpec
                        ) -> tuple[PoolInfo, PoolInfo | None]:
    """The IPv4 pool of a network being made, and its IPv6 one when it asks for IPv6 (as
    libnetwork: none unless configured); the first released again if the second fails."""
    pool4 = await request_pool(
        ipam, space, subnet=spec.subnet, ip_range=spec.ip_range, gateway=spec.gateway,
        aux=dict(spec.aux or {}), options=spec.ipam_options, v6=False)
    if not (spec.enable_ipv6 and spec.subnet6):
        return pool4, None
    try:
        pool6 = await request_pool(
            ipam, space, subnet=spec.subnet6, ip_range="", gateway=spec.gateway6, aux={},
            options=spec.ipam_options, v6=True)
    except BaseException:
        with trio.CancelScope(shield=True):
            await release_pool(ipam, pool4)
        raise
    return pool4, pool6


async def release_pool(ipam: RemoteIpam, info: PoolInfo) -> None:
    """Gateway, auxiliary addresses, then the pool: each failure logged, none raised."""
    for address in ([info.gateway] if info.gateway else []) + list(info.aux.values()):
        try:
            await release_address(ipam, info.pool_id, address)
        except SvcError as exc:
            log.warning("IPAM plugin %s: releasing %s of pool %s: %s", ipam.name, address,
                        info.pool, exc)
    try:
        await ipam.call("ReleasePool", ipam_api.release_pool(info.pool_id))
    except SvcError as exc:
        log.warning("IPAM plugin %s: releasing the pool %s: %s", ipam.name, info.pool, exc)


async def request_address(ipam: RemoteIpam, info: PoolInfo, address: str,
                          options: dict[str, str] | None) -> str:
    """An address of the pool (``address`` if named), in CIDR form.

    Raises:
        InvalidParameter: ``address`` is not in the pool.
        SvcError: the plugin's refusal or nonsense.
    """
    if address and ipaddress.ip_address(address) not in ipaddress.ip_network(info.pool):
        raise InvalidParameter(f"Invalid address {address}: It does not belong to any of "
                               "this network's subnets")
    doc = await ipam.call("RequestAddress", ipam_api.request_address(info.pool_id, address,
                                                                     options))
    return ipam_api.parse_address(doc, info.pool)


async def release_address(ipam: RemoteIpam, pool_id: str, address: str, *,
                          wait: bool = True) -> None:
    await ipam.call("ReleaseAddress", ipam_api.release_address(pool_id, address), wait=wait)


def endpoint_options(ipam: RemoteIpam, mac: str) -> dict[str, str] | None:
    """An endpoint's RequestAddress options: its MAC for a plugin that asked for MACs."""
    return {ipam_api.MAC: mac} if ipam.requires_mac and mac else None


def pool_data(net: Network, space: str) -> tuple[list[PoolData], list[PoolData]]:
    """The network's pools as its driver is told of them (IPv4Data, IPv6Data)."""
    if net.pool4 is not None:
        v4 = [_data(space, net.pool4)]
    else:
        plen = net.prefixlen
        v4 = [PoolData(space, net.subnet, f"{net.gateway}/{plen}" if net.gateway else "",
                       tuple((k, f"{a}/{plen}") for k, a in sorted(net.aux.items())))]
    if net.pool6 is not None:
        v6 = [_data(space, net.pool6)]
    elif net.subnet6:
        v6 = [PoolData(space, net.subnet6, f"{net.gateway6}/{net.prefixlen6}")]
    else:
        v6 = []
    return v4, v6


def _data(space: str, info: PoolInfo) -> PoolData:
    return PoolData(space, info.pool, info.gateway, tuple(sorted(info.aux.items())))


def apply_pools(net: Network, pool4: PoolInfo, pool6: PoolInfo | None) -> None:
    """The network's addressing from a plugin's pools (what inspect and the driver see)."""
    net.pool4, net.pool6 = pool4, pool6
    net.subnet = str(ipaddress.ip_network(pool4.pool, strict=False))
    net.gateway, net.ip_range = pool4.gateway_ip, ""
    if pool6 is not None:
        net.subnet6 = str(ipaddress.ip_network(pool6.pool, strict=False))
        net.gateway6 = pool6.gateway_ip
