"""Networks: the built-in ``bridge``, ``host`` and ``none``, user bridge networks, and wiring
containers into them (see docs/architecture.md, "Networks and ports").

Every bridge network is a Linux bridge holding its gateway address; a container gets, between
``runc create`` and ``runc start``, an address on each of its networks and a veth pair whose
container end is ``eth0``, ``eth1``..., the first giving the default route. iptables rules are
the daemon's own (``svc.network.firewall``), changed in one batch per operation. A start
reconciles bridges, veths and rules with the records (what a crash left goes).

Events: network create, connect, disconnect, destroy.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.engine.events import EventBus
from svc.engine.networks import hostbridges
from svc.engine.networks.bridgenets import BridgeNetworks
from svc.engine.networks.dns import EmbeddedDNS, lookup
from svc.engine.networks.endpoints import EndpointPlan
from svc.engine.networks.held import Held, Plugged
from svc.engine.networks.ipam import (
    CreateSpec,
    EndpointInfo,
    Network,
    check_bip,
    check_network_name,
    pick_address,
    pick_address6,
)
from svc.engine.networks.overlay import GW_BRIDGE, GW_OPTIONS, NEEDS_STORE, Overlay
from svc.engine.networks.plugged import PluginNetworks
from svc.engine.networks.publish import PortPublisher
from svc.errors import Conflict, Forbidden, InvalidParameter, NotFound, SvcError, SystemError_
from svc.network import bridge as br
from svc.network.firewall import Firewall, FirewallError, owner_of
from svc.network.proxy import Binding
from svc.plugins.manager import PluginManager

log = logging.getLogger("svc.networks")

BUILTIN = (("bridge", "bridge"), ("host", "host"), ("none", "null"))


class NetworkService:
    def __init__(self, events: EventBus, bridge_name: str, bip: str,
                 dns: list[str] | None = None, plugins: PluginManager | None = None) -> None:
        if bridge_name == "none":  # dockerd's "no default bridge"; never a bridge named none
            raise InvalidParameter("--bridge=none (a daemon without the default bridge network) "
                                   "is not supported by svc; name a bridge or leave the default")
        if not 0 < len(bridge_name) <= br.IFNAME_MAX:
            raise InvalidParameter(f"invalid --bridge {bridge_name!r}: 1 to 15 characters")
        self.events = events
        self.gateway, self.prefixlen, self.subnet = check_bip(bip)
        self.bridge_name = bridge_name
        self.networks: dict[str, Network] = {}
        self.save: Callable[[str, dict[str, Any]], Awaitable[None]] = _unset
        self.delete: Callable[[str], Awaitable[object]] = _unset
        self._forwarding_turned_on = False
        self._ready = False
        self.ports = PortPublisher(lambda: self.firewall)
        self.lock = trio.Lock()  # user bridges' create and removal
        self.dns = EmbeddedDNS(self._lookup, list(dns or []))
        self.owner = ""
        self.firewall = Firewall("unset")
        self.overlay: Overlay | None = None  # global networks, with a cluster store
        self.bridgenets = BridgeNetworks(self)
        self.plugged = PluginNetworks(self, plugins or PluginManager())
        self._gw_lock = trio.Lock()

    def _lookup(self, cid: str, name: str) -> list[str] | None:
        return lookup(self.of_container(cid), name)

    def open(self, records: dict[str, dict[str, Any]],
             daemon_id: str) -> list[tuple[str, dict[str, Any]]]:
        """Load the networks; returns records to save for built-in ones seen the first time.
        ``daemon_id`` marks the bridges and rules this daemon owns."""
        self.owner = owner_of(daemon_id)
        self.firewall = Firewall(self.owner)
        by_name = {str(r.get("Name")): (oid, r) for oid, r in records.items()}
        new: list[tuple[str, dict[str, Any]]] = []
        for name, driver in BUILTIN:
            found = by_name.get(name)
            nid = found[0] if found else secrets.token_hex(32)
            net = Network(nid, name, driver, builtin=True)
            if found is None:
                new.append((nid, net.record()))
            if name == "bridge":
                net.subnet, net.gateway, net.bridge = self.subnet, self.gateway, self.bridge_name
            self.networks[nid] = net
        for oid, r in records.items():
            if r.get("Builtin") or str(r.get("Name")) in dict(BUILTIN):
                continue
            self.networks[oid] = Network.from_record(oid, r)
        return new

    @property
    def default_bridge(self) -> Network:
        return next(n for n in self.networks.values() if n.name == "bridge")

    def bridges(self) -> list[Network]:
        return [n for n in self.networks.values() if n.bridge]

    # -- daemon start and stop -------------------------------------------------------------

    async def setup(self) -> None:
        """Every network's bridge, address and rules (at daemon start)."""
        try:
            await trio.to_thread.run_sync(self._setup)
        except (br.NetworkError, FirewallError, OSError) as exc:
            raise SystemError_(str(exc)) from exc
        self._ready = True

    def _setup(self) -> None:
        self._forwarding_turned_on = hostbridges.setup(
            self.owner, self.firewall, self.bridges(), keep_ports=self.ports.loopback_rules)

    async def shutdown(self) -> None:
        """Take the rules away (the bridges stay, as dockerd's do)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._shutdown)

    def _shutdown(self) -> None:
        if not self._ready:
            return
        try:
            self.firewall.clear()
        except FirewallError as exc:
            log.error("removing the iptables rules: %s", exc)
        if self._forwarding_turned_on:
            br.disable_forwarding()

    # -- lookups ---------------------------------------------------------------------------

    def resolve(self, ref: str) -> Network:
        """By name, full id or unique id prefix."""
        for n in self.networks.values():
            if ref in (n.name, n.id):
                return n
        found = [n for n in self.networks.values() if ref and n.id.startswith(ref)]
        if len(found) == 1:
            return found[0]
        raise NotFound(f"network {ref} not found")

    def of_container(self, cid: str, *, hidden: bool = False
                     ) -> list[tuple[Network, EndpointInfo]]:
        """The networks the container is attached to now, in the order of its interfaces
        (its way out of an overlay only if ``hidden``)."""
        found = [(n, n.endpoints[cid]) for n in self.networks.values()
                 if cid in n.endpoints and (hidden or not n.endpoints[cid].hidden)]
        return sorted(found, key=lambda f: f[1].endpoint.ifname)

    # -- user networks ---------------------------------------------------------------------

    async def create(self, spec: CreateSpec) -> tuple[Network, str]:
        """A user network and a warning; nothing is left if any step fails.

        As dockerd: a name in use is a 409 only with ``check_duplicate`` (the CLI sends it;
        docker-py does not), else the second network is made with a warning; an IPv6 pool
        without ``enable_ipv6`` is kept and shown but not used; ``aux`` addresses (a name
        -> an address of the subnet) are never given to a container. A driver or IPAM
        driver that is not built in is a plugin (404 "plugin not found" if none has the
        name).
        """
        check_network_name(spec.name)
        driver, ipam_driver = spec.driver, spec.ipam_driver
        if driver == "overlay":
            if self.overlay is None or not self.overlay.enabled:
                raise InvalidParameter(NEEDS_STORE)
            if ipam_driver:
                raise InvalidParameter("svc's overlay networks take the built-in IPAM only")
            return await self.overlay.create_network(spec), ""
        if driver in ("host", "null"):
            raise Forbidden(f'only one instance of "{driver}" network is allowed')
        if driver in ("", "bridge"):
            return await self.bridgenets.create(spec)
        return await self.plugged.create(spec)

    def check_duplicate(self, name: str, check: bool) -> str:
        """409 for a name in use (with ``check``, or a built-in one's); else the warning of
        a second network of that name ("" if none)."""
        same = [n for n in self.networks.values() if n.name == name]
        if same and (check or same[0].builtin):
            raise Conflict(f"network with name {name} already exists")
        return f"Network with name {name} (id : {same[0].id}) already exists" if same else ""

    def subnets_in_use(self) -> list[ipaddress.IPv4Network]:
        """Blocking: the IPv4 subnets of the local networks and of the host's interfaces."""
        nets = [ipaddress.IPv4Network(n.subnet) for n in self.networks.values()
                if n.subnet and n.scope == "local"]
        return nets + self.plugged.planned + br.host_subnets()

    def make_bridge(self, net: Network) -> None:
        hostbridges.make(self.owner, self.firewall, net, self.bridges())

    def drop_bridge(self, net: Network) -> None:
        hostbridges.drop(self.owner, self.firewall, net, self.bridges())

    def refuse_if_used(self, net: Network, in_use: list[str] | None = None, *,
                       owed: bool = True) -> None:
        """409 while containers are on ``net``, or (``owed``) while a plugin is still owed
        the undoing of endpoints of containers that are gone (it did not answer yet)."""
        if net.endpoints or in_use:
            users = sorted(set(net.endpoints) | set(in_use or []))
            raise Conflict(f"network {net.name} has active endpoints: {', '.join(users)}")
        if owed and net.held:
            raise Conflict(f"network {net.name}: its plugins have not yet undone the "
                           f"endpoints of {len(net.held)} container(s) that are gone (they "
                           "do not answer); try again once they do")

    async def remove(self, net: Network, in_use: list[str]) -> None:
        """Delete a user network; 403 for a built-in one, 409 while containers use it."""
        if net.builtin:
            raise Forbidden(f"{net.name} is a pre-defined network and cannot be removed")
        if net.scope == "global" and self.overlay is not None:
            return await self.overlay.remove(net, in_use)
        self.refuse_if_used(net, in_use, owed=False)
        if net.plugged:
            return await self.plugged.remove(net)
        await self.bridgenets.remove(net)

    # -- containers ------------------------------------------------------------------------

    def plan(self, mode: str, net_config: dict[str, EndpointPlan],
             ) -> list[tuple[Network, EndpointPlan]]:
        """The networks a container with NetworkMode ``mode`` and per-network settings
        ``net_config`` (by network id) joins at start, its first network (the one of
        NetworkMode) first. None for host, none and container:<ref>."""
        if mode in ("host", "none") or mode.startswith("container:"):
            return []
        primary = self.default_bridge if mode in ("", "default", "bridge") else \
            self.resolve(mode)
        out = [(primary, net_config.get(primary.id, EndpointPlan()))]
        out += [(self.networks[nid], cfg) for nid, cfg in net_config.items()
                if nid != primary.id and nid in self.networks]
        return [(n, cfg) for n, cfg in out if not cfg.disconnected]

    def next_ifname(self, cid: str) -> str:
        used = {info.endpoint.ifname for _, info in self.of_container(cid, hidden=True)}
        return next(f"eth{i}" for i in range(100) if f"eth{i}" not in used)

    async def reserve(self, cid: str, name: str, net: Network, ifname: str, static: str = "",
                      aliases: list[str] | None = None, static6: str = "", *,
                      links: list[str] | None = None, mac: str = "",
                      ports: dict[str, Any] | None = None) -> EndpointInfo:
        """An address for container ``cid`` on ``net`` (freed by ``release``; on a global
        network claimed in the cluster store; from a plugin IPAM, recorded), and on a plugin
        network its endpoint; ``mac`` (the container's MacAddress, for its first network) or
        dockerd's from the address; ``ports`` as a plugin is told of them."""
        if cid in net.endpoints:
            return net.endpoints[cid]
        if not self._ready:
            raise SystemError_("the networks are not set up (see the daemon's log)")
        if net.plugged:
            return await self.plugged.endpoints.reserve(
                cid, name, net, ifname, static, static6, aliases=list(aliases or []),
                links=list(links or []), mac=mac, ports=ports)
        eid = secrets.token_hex(32)
        if net.scope == "global" and self.overlay is not None:
            claimed = await self.overlay.claim(net, eid, static)
            if cid in net.endpoints:  # reserved meanwhile: this claim is not needed
                await self.overlay.unclaim(net, eid, claimed)
                return net.endpoints[cid]
            address = claimed
        elif net.ipam_driver:
            with self.plugged.owed.setting_up(eid):
                held, cidr, cidr6, mac = await self.plugged.endpoints.bridge_addresses(
                    net, cid, eid, static, static6, mac)
                address, static6 = cidr.split("/")[0], cidr6.split("/")[0]
                return self._bridge_endpoint(cid, name, net, ifname, eid, address, static6,
                                             aliases, links, mac, held)
        else:
            address = pick_address(net, static)
        address6 = pick_address6(net, static6) if net.subnet6 else ""
        return self._bridge_endpoint(cid, name, net, ifname, eid, address, address6, aliases,
                                     links, mac, None)

    def _bridge_endpoint(self, cid: str, name: str, net: Network, ifname: str, eid: str,
                         address: str, address6: str, aliases: list[str] | None,
                         links: list[str] | None, mac: str, held: Held | None
                         ) -> EndpointInfo:
        ep = br.Endpoint(host_if=br.host_veth_name(ifname, cid), address=address,
                         prefixlen=net.prefixlen, gateway=net.gateway,
                         mac=mac or br.mac_for(address), ifname=ifname, address6=address6,
                         prefixlen6=net.prefixlen6, gateway6=net.gateway6 if address6 else "")
        info = EndpointInfo(container=name, endpoint_id=eid, endpoint=ep,
                            aliases=list(aliases or []), links=list(links or []),
                            plugged=Plugged(held) if held is not None else None)
        net.endpoints[cid] = info
        return info

    async def attach(self, cid: str, pid: int, net: Network, *, default_route: bool,
                     announce: bool = True) -> None:
        """Wire the reserved endpoint into the namespace of ``pid``; ``connect`` goes out
        unless the caller announces it itself, once its own part is done. On a plugin
        network the Join decides the default route (``default_route`` is for the others)."""
        info = net.endpoints[cid]
        if net.plugged:
            await self.plugged.endpoints.attach(cid, pid, net)
        else:
            await self._attach_bridge(cid, pid, net, info, default_route)
        if announce:
            self.announce("connect", cid, net)

    async def _attach_bridge(self, cid: str, pid: int, net: Network, info: EndpointInfo,
                             default_route: bool) -> None:
        try:
            if net.scope == "global" and self.overlay is not None:
                await self.overlay.attach(cid, pid, net, info, way_out=default_route)
            else:
                await trio.to_thread.run_sync(br.attach, net.bridge, pid, info.endpoint,
                                              default_route)
        except br.NetworkError as exc:
            net.endpoints.pop(cid, None)
            with trio.CancelScope(shield=True):
                if net.scope == "global" and self.overlay is not None:  # claim, sandbox
                    await self.overlay.detach(net, info)
                if info.plugged is not None:  # addresses of an IPAM plugin
                    await self.plugged.endpoints.release(net, info, None)
            raise SystemError_(str(exc)) from exc
        info.attached = True
        info.default_route = default_route and net.scope == "local"  # (an overlay: its leg)

    async def gateway_leg(self, cid: str, pid: int, name: str) -> None:
        """The container's way out through docker_gwbridge (made on first use), for a first
        network that gives none (an overlay, a plugin network without a gateway)."""
        async with self._gw_lock:  # two first containers make it once
            gw = next((n for n in self.networks.values() if n.name == GW_BRIDGE), None)
            if gw is None:
                gw, _ = await self.create(CreateSpec(GW_BRIDGE, options=dict(GW_OPTIONS)))
        leg = await self.reserve(cid, name, gw, self.next_ifname(cid))
        leg.hidden = True
        await self.attach(cid, pid, gw, default_route=True, announce=False)

    def announce(self, action: str, cid: str, net: Network) -> None:
        """The ``connect`` or ``disconnect`` event of container ``cid`` on ``net``."""
        self.events.publish("network", action, net.id,
                            {"container": cid, "name": net.name, "type": net.driver})

    async def publish(self, cid: str, bindings: list[Binding], nursery: trio.Nursery,
                      net: Network) -> None:
        """Publish the container's ports on its first network (for an overlay, on its way
        out: the host reaches it there)."""
        if net.scope == "global":
            net = next((n for n, i in self.of_container(cid, hidden=True) if i.hidden), net)
        await self.ports.publish(cid, bindings, nursery, net)

    def published(self, cid: str) -> list[Binding] | None:
        return self.ports.published(cid)

    async def release(self, cid: str, only: Network | None = None, *,
                      announce: bool = True, pid: int | None = None) -> list[Network]:
        """Stop the container's port proxy, delete its veth pairs (if still there), free its
        addresses and undo its plugin endpoints (on ``only``, or everywhere; ``pid``: the
        container keeps running, so a plugin's interface is handed back). Idempotent.
        Returns the networks it was attached to, whose ``disconnect`` went out unless the
        caller announces it itself."""
        left = []
        if only is None:
            self.dns.stop(cid)
            await self.ports.release(cid)
            self.plugged.owed.spare_no_more(cid)
        for net in [only] if only is not None else list(self.networks.values()):
            info = net.endpoints.get(cid)
            if info is None or info.host:
                continue
            del net.endpoints[cid]
            with trio.CancelScope(shield=True):
                await self._unwire(net, info, pid)
            if info.attached and not info.hidden:
                left.append(net)
                if announce:
                    self.announce("disconnect", cid, net)
        return left

    async def _unwire(self, net: Network, info: EndpointInfo, pid: int | None) -> None:
        try:
            if net.scope == "global" and self.overlay is not None:
                await self.overlay.detach(net, info)
            elif not net.plugged:
                await trio.to_thread.run_sync(br.detach, info.endpoint.host_if)
        except (OSError, SvcError) as exc:
            log.warning("removing %s: %s", info.endpoint.host_if, exc)
        if info.plugged is not None:
            await self.plugged.endpoints.release(net, info, pid)


async def _unset(*args: object) -> None:
    raise RuntimeError("the network records are not wired to a store")
