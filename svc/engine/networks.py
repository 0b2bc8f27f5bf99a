"""Networks: the built-in ``bridge``, ``host`` and ``none``, user bridge networks, and wiring
containers into them.

Every bridge network is a Linux bridge holding its gateway address: the default one is
``--bridge`` (``svc0``) with ``--bip`` (``172.17.0.1/16``); a user network's is ``br-<id[:12]>``
with its IPAM subnet (given, or the first free /16 of 172.18-31 that no network and no host
interface uses). A container on a network gets, between ``runc create`` and ``runc start``, an
address (static from its endpoint config, else the lowest free one in the network's IPRange or
subnet; kept while it runs) and a veth pair whose container end is ``eth0``, ``eth1``... in its
network namespace with dockerd's MAC (``02:42`` + the address); its first network gives the
default route (unless it is internal: no way out). The first address is reserved before
/etc/hosts is written, so the file names it. At teardown the veth pairs are deleted and the
addresses freed; a crash leaves nothing, as a namespace's veths die with it.

iptables, as dockerd: each non-internal network masquerades its subnet's outbound traffic and
is forwarded; an internal one is cut off from everything but itself; traffic between two of
our bridges is dropped (isolation). IPv4 forwarding is turned on at start. The rules go at
shutdown or when the network is removed.

Events: network create, connect, disconnect, destroy.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.engine.dns import EmbeddedDNS
from svc.engine.events import EventBus
from svc.engine.network_ipam import (
    EndpointInfo,
    Network,
    check_bip,
    free_address,
    pick_address6,
    plan_ipam,
    plan_ipam6,
)
from svc.errors import Conflict, Forbidden, InvalidParameter, NotFound, SvcError, SystemError_
from svc.network import bridge as br
from svc.network.proxy import Binding, PortInUse, PortProxy

log = logging.getLogger("svc.networks")

BUILTIN = (("bridge", "bridge"), ("host", "host"), ("none", "null"))


class NetworkService:
    def __init__(self, events: EventBus, bridge_name: str, bip: str,
                 dns: list[str] | None = None) -> None:
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
        self._proxies: dict[str, tuple[PortProxy, trio.CancelScope]] = {}
        self._proxy_nets: dict[str, tuple[Network, EndpointInfo]] = {}
        self._lock = trio.Lock()
        self.dns = EmbeddedDNS(self._lookup, list(dns or []))

    def _lookup(self, cid: str, name: str) -> list[str] | None:
        """Addresses, on the user networks ``cid`` is on, of the containers called ``name``
        (their name, an alias or their short id)."""
        found = []
        for net, _ in self.of_container(cid):
            if net.builtin:
                continue
            for other, info in net.endpoints.items():
                names = {info.container.lstrip("/").lower(), other[:12],
                         *(a.lower() for a in info.aliases)}
                if info.attached and name in names:
                    found.append(info.endpoint.address)
        return found or None

    def open(self, records: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """Load the networks; returns records to save for built-in ones seen the first time."""
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
            self.networks[oid] = Network(
                oid, str(r["Name"]), str(r.get("Driver") or "bridge"),
                subnet=str(r.get("Subnet") or ""), gateway=str(r.get("Gateway") or ""),
                ip_range=str(r.get("IPRange") or ""), bridge=str(r.get("Bridge") or ""),
                internal=bool(r.get("Internal")), options=dict(r.get("Options") or {}),
                labels=dict(r.get("Labels") or {}), subnet6=str(r.get("Subnet6") or ""),
                gateway6=str(r.get("Gateway6") or ""),
                ipam_options=dict(r.get("IPAMOptions") or {}))
        return new

    @property
    def default_bridge(self) -> Network:
        return next(n for n in self.networks.values() if n.name == "bridge")

    def _bridges(self) -> list[Network]:
        return [n for n in self.networks.values() if n.bridge]

    # -- daemon start and stop -------------------------------------------------------------

    async def setup(self) -> None:
        """Every network's bridge, address and rules (at daemon start)."""
        try:
            await trio.to_thread.run_sync(self._setup)
        except (br.NetworkError, OSError) as exc:
            raise SystemError_(str(exc)) from exc
        self._ready = True

    def _setup(self) -> None:
        stale = br.remove_stale_dnat([n.bridge for n in self._bridges()],
                                     [n.subnet for n in self._bridges()])
        if stale:
            log.info("removed %d published-port rules left by a crash", stale)
        for net in self._bridges():
            br.ensure_bridge(net.bridge, net.gateway, net.prefixlen, net.gateway6,
                             net.prefixlen6)
            br.ensure_rules(self._rules(net))
        br.ensure_rules(self._isolation())
        self._forwarding_turned_on = br.enable_forwarding()

    def _rules(self, net: Network) -> list[list[str]]:
        if net.internal:
            return br.internal_rules(net.bridge)
        return br.nat_rules(net.bridge, net.subnet)

    def _isolation(self, nets: list[Network] | None = None) -> list[list[str]]:
        bridges = [n.bridge for n in (self._bridges() if nets is None else nets)]
        return br.isolation_rules(bridges)

    async def shutdown(self) -> None:
        """Take the rules away (the bridges stay, as dockerd's do)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._shutdown)

    def _shutdown(self) -> None:
        if not self._ready:
            return
        br.remove_rules(self._isolation())
        for net in self._bridges():
            br.remove_rules(self._rules(net))
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

    def of_container(self, cid: str) -> list[tuple[Network, EndpointInfo]]:
        """The networks the container is attached to now, in the order of its interfaces."""
        found = [(n, n.endpoints[cid]) for n in self.networks.values() if cid in n.endpoints]
        return sorted(found, key=lambda f: f[1].endpoint.ifname)

    # -- user networks ---------------------------------------------------------------------

    async def create(self, name: str, *, driver: str = "", subnet: str = "", ip_range: str = "",
                     gateway: str = "", internal: bool = False,
                     options: dict[str, str] | None = None,
                     labels: dict[str, str] | None = None, subnet6: str = "",
                     gateway6: str = "", ipam_options: dict[str, str] | None = None,
                     ) -> Network:
        """A user bridge network; nothing is left if any step fails."""
        if not name:
            raise InvalidParameter("Name is required: the network's name")
        if driver not in ("", "bridge"):
            raise NotFound(f"plugin not found: network driver {driver!r} (only bridge)")
        async with self._lock:
            if any(n.name == name for n in self.networks.values()):
                raise Conflict(f"network with name {name} already exists")
            taken = await trio.to_thread.run_sync(self._subnets_in_use)
            net_subnet, net_gateway, net_range = plan_ipam(subnet, ip_range, gateway, taken)
            v6 = plan_ipam6(subnet6, gateway6, [ipaddress.IPv6Network(n.subnet6) for n in
                                                 self.networks.values() if n.subnet6])
            nid = secrets.token_hex(32)
            net = Network(nid, name, "bridge", subnet=net_subnet, gateway=net_gateway,
                          ip_range=net_range, bridge=f"br-{nid[:12]}", internal=internal,
                          options=dict(options or {}), labels=dict(labels or {}),
                          subnet6=v6[0], gateway6=v6[1],
                          ipam_options=dict(ipam_options or {}))
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(self._make_bridge, net)
                except (br.NetworkError, OSError) as exc:
                    await trio.to_thread.run_sync(self._drop_bridge, net)
                    raise SystemError_(str(exc)) from exc
                await self.save(nid, net.record())
                self.networks[nid] = net
        self.events.publish("network", "create", nid, {"name": name, "type": "bridge"})
        return net

    def _subnets_in_use(self) -> list[ipaddress.IPv4Network]:
        nets = [ipaddress.IPv4Network(n.subnet) for n in self.networks.values() if n.subnet]
        return nets + br.host_subnets()

    def _make_bridge(self, net: Network) -> None:
        br.ensure_bridge(net.bridge, net.gateway, net.prefixlen, net.gateway6, net.prefixlen6)
        br.ensure_rules(self._rules(net))
        br.ensure_rules(self._isolation([*self._bridges(), net]))

    def _drop_bridge(self, net: Network) -> None:
        others = [n for n in self._bridges() if n.id != net.id]
        br.remove_rules(br.isolation_rules([net.bridge, *[n.bridge for n in others]]))
        br.ensure_rules(self._isolation(others))
        br.remove_rules(self._rules(net))
        br.delete_bridge(net.bridge)

    async def remove(self, net: Network, in_use: list[str]) -> None:
        """Delete a user network; 403 for a built-in one, 409 while containers use it."""
        if net.builtin:
            raise Forbidden(f"{net.name} is a pre-defined network and cannot be removed")
        async with self._lock:
            if net.endpoints or in_use:
                users = sorted(set(net.endpoints) | set(in_use))
                raise Conflict(f"network {net.name} has active endpoints: {', '.join(users)}")
            with trio.CancelScope(shield=True):
                await self.delete(net.id)
                del self.networks[net.id]
                await trio.to_thread.run_sync(self._drop_bridge, net)
        self.events.publish("network", "destroy", net.id, {"name": net.name, "type": "bridge"})

    # -- containers ------------------------------------------------------------------------

    def plan(self, mode: str, net_config: dict[str, dict[str, Any]],
             ) -> list[tuple[Network, dict[str, Any]]]:
        """The networks a container with NetworkMode ``mode`` and per-network settings
        ``net_config`` (by network id) joins at start, its first network (the one of
        NetworkMode) first. None for host, none and container:<ref>."""
        if mode in ("host", "none") or mode.startswith("container:"):
            return []
        primary = self.default_bridge if mode in ("", "default", "bridge") else \
            self.resolve(mode)
        out = [(primary, net_config.get(primary.id, {}))]
        out += [(self.networks[nid], cfg) for nid, cfg in net_config.items()
                if nid != primary.id and nid in self.networks]
        return [(n, cfg) for n, cfg in out if not cfg.get("Disconnected")]

    def next_ifname(self, cid: str) -> str:
        used = {info.endpoint.ifname for _, info in self.of_container(cid)}
        return next(f"eth{i}" for i in range(100) if f"eth{i}" not in used)

    def reserve(self, cid: str, name: str, net: Network, ifname: str, static: str = "",
                aliases: list[str] | None = None, static6: str = "") -> EndpointInfo:
        """An address for container ``cid`` on ``net`` (freed by ``release``)."""
        if cid in net.endpoints:
            return net.endpoints[cid]
        if not self._ready:
            raise SystemError_("the networks are not set up (see the daemon's log)")
        taken = {e.endpoint.address for e in net.endpoints.values()} | {net.gateway}
        address = static or free_address(net, taken)
        if static:
            ip = ipaddress.IPv4Address(static)
            if ip not in ipaddress.IPv4Network(net.subnet):
                raise InvalidParameter(f"invalid address {static}: not in {net.subnet} of "
                                       f"network {net.name}")
            if static in taken:
                raise Conflict(f"Address already in use: {static} on network {net.name}")
        address6 = pick_address6(net, static6) if net.subnet6 else ""
        ep = br.Endpoint(host_if=f"s{ifname[-1]}{cid[:12]}h", address=address,
                         prefixlen=net.prefixlen, gateway=net.gateway,
                         mac=br.mac_for(address), ifname=ifname, address6=address6,
                         prefixlen6=net.prefixlen6, gateway6=net.gateway6 if address6 else "")
        info = EndpointInfo(container=name, endpoint_id=secrets.token_hex(32), endpoint=ep,
                            aliases=list(aliases or []))
        net.endpoints[cid] = info
        return info

    async def attach(self, cid: str, pid: int, net: Network, *, default_route: bool) -> None:
        """Wire the reserved endpoint into the namespace of ``pid``."""
        info = net.endpoints[cid]
        try:
            await trio.to_thread.run_sync(br.attach, net.bridge, pid, info.endpoint,
                                          default_route)
        except br.NetworkError as exc:
            net.endpoints.pop(cid, None)
            raise SystemError_(str(exc)) from exc
        info.attached = True
        self.events.publish("network", "connect", net.id,
                            {"container": cid, "name": net.name, "type": net.driver})

    async def publish(self, cid: str, bindings: list[Binding], nursery: trio.Nursery,
                      net: Network) -> None:
        """Bind the container's published ports and forward them to its address on ``net``,
        in ``nursery`` until ``release``. A port that cannot be bound is a 409 and nothing
        stays bound."""
        info = net.endpoints[cid]
        try:
            proxy = await PortProxy.bind(bindings)
        except PortInUse as exc:
            raise Conflict(f"driver failed programming external connectivity on endpoint "
                           f"{info.container.lstrip('/')}: {exc}") from None
        if ":" not in info.endpoint.address and not net.internal:
            rules = self._dnat(net, info, proxy)
            try:
                await trio.to_thread.run_sync(br.ensure_rules, rules)
            except br.NetworkError as exc:
                proxy.close()
                await trio.to_thread.run_sync(br.remove_rules, rules)
                raise SystemError_(str(exc)) from exc
        scope = trio.CancelScope()
        self._proxies[cid] = (proxy, scope)
        self._proxy_nets[cid] = (net, info)

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                        ) -> None:
            with scope:
                await proxy.serve(info.endpoint.address, task_status=task_status)

        await nursery.start(serve)

    @staticmethod
    def _dnat(net: Network, info: EndpointInfo, proxy: PortProxy) -> list[list[str]]:
        return [rule for b in proxy.bindings if ":" not in b.host_ip
                for rule in br.dnat_rules(net.bridge, b.proto, b.host_ip, b.host_port,
                                          info.endpoint.address, b.port)]

    def published(self, cid: str) -> list[Binding] | None:
        found = self._proxies.get(cid)
        return None if found is None else found[0].bindings

    async def release(self, cid: str, only: Network | None = None) -> None:
        """Stop the container's port proxy, delete its veth pairs (if still there) and free
        its addresses (on ``only``, or everywhere). Idempotent."""
        if only is None:
            self.dns.stop(cid)
            proxied = self._proxies.pop(cid, None)
            if proxied is not None:
                proxied[1].cancel()
                net_info = self._proxy_nets.pop(cid, None)
                if net_info is not None:
                    rules = self._dnat(net_info[0], net_info[1], proxied[0])
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(br.remove_rules, rules)
                proxied[0].close()
        for net in [only] if only is not None else list(self.networks.values()):
            info = net.endpoints.pop(cid, None)
            if info is None:
                continue
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(br.detach, info.endpoint.host_if)
                except (OSError, SvcError) as exc:
                    log.warning("removing %s: %s", info.endpoint.host_if, exc)
            if info.attached:
                self.events.publish("network", "disconnect", net.id,
                                    {"container": cid, "name": net.name, "type": net.driver})


async def _unset(*args: object) -> None:
    raise RuntimeError("the network records are not wired to a store")
