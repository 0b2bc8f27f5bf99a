"""A container's endpoints on networks whose driver or IPAM is a plugin, in libnetwork's
order: addresses (``RequestAddress``), ``CreateEndpoint`` (then ``EndpointOperInfo``) before
the container's process exists; ``Join``, the interface the plugin made moved into the
container's namespace as ``<DstPrefix><n>``, addressed and routed, and
``ProgramExternalConnectivity`` for the endpoint that gives the container its way out, once
it exists; and at the end ``RevokeExternalConnectivity``, ``Leave``, ``DeleteEndpoint``,
``ReleaseAddress`` (``owed.Owed.undo``).

What each step may leave in a plugin is recorded in the network's record before the step
(``held.Held``): a step that fails undoes what came before it, and a daemon killed at any
point undoes it at its next start. No lock is held across a plugin call: a plugin that hangs
holds up the container being wired, no one else.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from svc.engine.networks import pools, remote_api
from svc.engine.networks.drivers import NetworkPlugins, RemoteDriver, RemoteIpam
from svc.engine.networks.held import Held, Plugged
from svc.engine.networks.ipam import EndpointInfo, Network, pick_address, pick_address6
from svc.engine.networks.owed import Owed
from svc.errors import Conflict, SvcError, SystemError_
from svc.network import bridge as br
from svc.network import handover

if TYPE_CHECKING:
    from svc.engine.networks.service import NetworkService

log = logging.getLogger("svc.networks")


def random_mac() -> str:
    """libnetwork's GenerateRandomMAC: 02:42 and four random bytes."""
    return "02:42:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(4))


def _split(cidr: str) -> tuple[str, int]:
    ip, _, plen = cidr.partition("/")
    return ip, int(plen or 0)


class PluggedEndpoints:
    def __init__(self, service: NetworkService, drivers: NetworkPlugins, owed: Owed,
                 save: Callable[[Network], Awaitable[None]]) -> None:
        self.service = service
        self.drivers = drivers
        self.owed = owed
        self.save = save

    # -- addresses ---------------------------------------------------------------------------

    async def addresses(self, net: Network, ipam: RemoteIpam, held: Held, static: str,
                        static6: str, mac: str) -> tuple[str, str]:
        """The endpoint's addresses (CIDR) from the network's IPAM plugin, each put in
        ``held`` as it comes."""
        assert net.pool4 is not None
        opts = pools.endpoint_options(ipam, mac)
        address = await pools.request_address(ipam, net.pool4, static, opts)
        held.addresses.append((net.pool4.pool_id, address))
        address6 = ""
        if net.pool6 is not None:
            address6 = await pools.request_address(ipam, net.pool6, static6, opts)
            held.addresses.append((net.pool6.pool_id, address6))
        return address, address6

    async def bridge_addresses(self, net: Network, cid: str, eid: str, static: str,
                               static6: str, mac: str) -> tuple[Held, str, str, str]:
        """A bridge endpoint's addresses (and MAC, "" if the bridge's own will do) from an
        IPAM plugin, recorded before they are used; undone if that fails."""
        await self._settled(net, cid)
        ipam = await self.drivers.ipam(net.ipam_driver)
        held = Held(cid)
        mac = mac or (random_mac() if ipam.requires_mac else "")
        try:
            address, address6 = await self.addresses(net, ipam, held, static, static6, mac)
            net.held[eid] = held
            await self.save(net)
        except BaseException:
            await self._drop(net, eid, held)
            raise
        return held, address, address6, mac

    async def _settled(self, net: Network, cid: str) -> None:
        if net.removing:
            raise Conflict(f"network {net.name} is being removed")
        await self.owed.settle(net, cid)  # its old static address free again, if it had one

    async def _drop(self, net: Network, eid: str, held: Held) -> None:
        """Undo what ``held`` names (shielded), now or in the background."""
        if held.done:
            return
        net.held[eid] = held
        with trio.CancelScope(shield=True):
            if not await self.owed.undo(net, eid):
                self.owed.wake()

    # -- create ------------------------------------------------------------------------------

    async def reserve(self, cid: str, name: str, net: Network, ifname: str, static: str,
                      static6: str, *, aliases: list[str], links: list[str], mac: str,
                      ports: dict[str, Any] | None) -> EndpointInfo:
        """Addresses and ``CreateEndpoint`` for container ``cid`` on the plugin network
        ``net``; ``mac`` is the container's own MAC (its first network), ``ports`` its
        ports as libnetwork's options carry them. Undone if a step fails.

        Cancellation: a checkpoint; what was done is undone (shielded) before the
        cancellation goes on, except an address the IPAM plugin handed out in the instant
        before its answer was read.
        """
        await self._settled(net, cid)
        driver = await self.drivers.driver(net.driver)
        ipam = await self.drivers.ipam(net.ipam_driver) if net.ipam_driver else None
        if cid in net.endpoints:  # reserved meanwhile
            return net.endpoints[cid]
        eid, held = secrets.token_hex(32), Held(cid)
        iface_mac = mac or (random_mac() if ipam is not None and ipam.requires_mac else "")
        address = address6 = ""
        if ipam is None:  # the built-in IPAM: chosen (and so taken) before any await
            address = f"{pick_address(net, static)}/{net.prefixlen}"
            if net.subnet6:
                address6 = f"{pick_address6(net, static6)}/{net.prefixlen6}"
            held.reserved = [a.split("/")[0] for a in (address, address6) if a]
        info = EndpointInfo(container=name, endpoint_id=eid, endpoint=self._endpoint(
            ifname, address, address6, iface_mac), aliases=list(aliases), links=list(links),
            plugged=Plugged(held, options=dict(ports or remote_api.port_options([], []))))
        net.endpoints[cid] = info
        try:
            if ipam is not None:
                address, address6 = await self.addresses(net, ipam, held, static, static6,
                                                          iface_mac)
            held.created = True
            net.held[eid] = held
            await self.save(net)
            given = remote_api.Interface(address, address6, iface_mac)
            iface = await self._create(driver, net, eid, given, mac, ports)
        except BaseException:
            net.endpoints.pop(cid, None)
            await self._drop(net, eid, held)
            raise
        info.endpoint = self._endpoint(ifname, iface.address, iface.address6, iface.mac)
        return info

    @staticmethod
    def _endpoint(ifname: str, address: str, address6: str, mac: str) -> br.Endpoint:
        ip, plen = _split(address)
        ip6, plen6 = _split(address6)
        return br.Endpoint(host_if="", address=ip, prefixlen=plen, gateway="", mac=mac,
                           ifname=ifname, address6=ip6, prefixlen6=plen6)

    async def _create(self, driver: RemoteDriver, net: Network, eid: str,
                      given: remote_api.Interface, mac: str, ports: dict[str, Any] | None
                      ) -> remote_api.Interface:
        options = remote_api.endpoint_options(mac, None if net.internal else ports)
        doc = await driver.call("CreateEndpoint", remote_api.create_endpoint(
            net.id, eid, given, options))
        iface = remote_api.parse_create_endpoint(doc, given)
        try:  # 1.11 asked it for the ports it might publish; nothing of it is shown
            await driver.call("EndpointOperInfo", remote_api.endpoint_only(net.id, eid),
                              optional=True)
        except SvcError as exc:
            log.info("network plugin %s: EndpointOperInfo: %s", driver.name, exc)
        return iface

    # -- join --------------------------------------------------------------------------------

    async def attach(self, cid: str, pid: int, net: Network) -> None:
        """``Join``, then the interface handed over to the container ``pid`` and, if this
        endpoint gives the container its way out, ``ProgramExternalConnectivity``. On
        failure the endpoint is undone whole (the caller's teardown need not know it).

        Cancellation: a checkpoint; the endpoint is undone as on a failure (shielded).
        """
        info = net.endpoints[cid]
        p = info.plugged
        assert p is not None
        eid = info.endpoint_id
        try:
            driver = await self.drivers.driver(net.driver)
            p.held.joined = True
            await self.save(net)
            doc = await driver.call("Join", remote_api.join(net.id, eid, f"/proc/{pid}/ns/net",
                                                            p.options))
            p.joined = answer = remote_api.parse_join(doc)
            await self._hand_over(cid, pid, net, info, answer)
            if info.default_route and not net.internal:
                p.held.external = True
                await self.save(net)
                await driver.call("ProgramExternalConnectivity", remote_api.external(
                    net.id, eid, p.options), optional=True)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await self._give_back(pid, p)
                net.endpoints.pop(cid, None)
                await self._drop(net, eid, p.held)
            if isinstance(exc, br.NetworkError | OSError):
                raise SystemError_(str(exc)) from exc
            raise
        info.attached = True
        if not (info.default_route or net.internal or answer.disable_gateway_service) and \
                not any(i.default_route for _, i in self.service.of_container(cid, hidden=True)):
            await self.service.gateway_leg(cid, pid, info.container)  # libnetwork's needDefaultGW

    async def _hand_over(self, cid: str, pid: int, net: Network, info: EndpointInfo,
                         answer: remote_api.JoinAnswer) -> None:
        """The plugin's interface into the container, with the endpoint's addresses, the
        Join's routes and (if no other network of the container gives one) its gateway."""
        p = info.plugged
        assert p is not None
        visible, leg = self.gateway_taken(cid, info)
        default = bool(answer.gateway) and not visible
        if default and leg is not None:  # libnetwork's clearDefaultGW
            await self.service.release(cid, only=leg, announce=False)
        ep = info.endpoint
        slot = ep.ifname[3:] if ep.ifname.startswith("eth") else ep.ifname
        ifname = f"{answer.dst_prefix}{slot}" if answer.src_name else ""
        spec = handover.Inside(
            answer.src_name, ifname, mac=ep.mac,
            address=f"{ep.address}/{ep.prefixlen}" if ep.address else "",
            address6=f"{ep.address6}/{ep.prefixlen6}" if ep.address6 else "",
            connected=tuple(r.destination for r in answer.routes
                            if r.route_type != remote_api.NEXTHOP),
            via=tuple((r.destination, r.next_hop) for r in answer.routes
                      if r.route_type == remote_api.NEXTHOP),
            gateway=answer.gateway if default else "",
            gateway6=answer.gateway6 if default else "")
        mac = await trio.to_thread.run_sync(handover.move_in, pid, spec)
        p.ifname = ifname
        info.endpoint = replace(ep, ifname=ifname or ep.ifname, mac=mac or ep.mac,
                                gateway=answer.gateway, gateway6=answer.gateway6)
        info.default_route = default or (answer.default_route and not visible)

    def gateway_taken(self, cid: str, other_than: EndpointInfo
                      ) -> tuple[bool, Network | None]:
        """Whether another network of ``cid`` gives it its default route, and its way out
        through docker_gwbridge if that is what gives it."""
        visible, leg = False, None
        for net, info in self.service.of_container(cid, hidden=True):
            if info is other_than or not info.default_route:
                continue
            if info.hidden:
                leg = net
            else:
                visible = True
        return visible, leg

    async def _give_back(self, pid: int | None, p: Plugged) -> None:
        """The interface of a container that keeps running handed back to the host under
        the plugin's name, so that the plugin can delete it."""
        if pid and p.ifname and p.joined is not None and p.joined.src_name:
            try:
                await trio.to_thread.run_sync(handover.move_out, pid, p.ifname,
                                              p.joined.src_name)
            except OSError as exc:  # the container is gone: its interface went with it
                log.debug("handing %s back: %s", p.ifname, exc)
        p.ifname = ""

    async def release(self, net: Network, info: EndpointInfo, pid: int | None) -> None:
        """The endpoint (already out of ``net.endpoints``) undone: its interface handed
        back if its container still runs (``pid``), then Revoke, Leave, DeleteEndpoint,
        ReleaseAddress; what cannot be done now stays owed.

        Cancellation: shielded (each call bounded by the plugin timeout, and the first one
        without an answer leaves the rest to the background).
        """
        p = info.plugged
        assert p is not None
        with trio.CancelScope(shield=True):
            await self._give_back(pid, p)
            await self._drop(net, info.endpoint_id, p.held)
