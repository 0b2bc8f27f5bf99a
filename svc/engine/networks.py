"""Networks: the built-in ``bridge``, ``host`` and ``none``, and the default bridge's wiring.

The ``bridge`` network is a Linux bridge (``--bridge``, ``svc0`` by default) holding the gateway
address of ``--bip`` (``172.17.0.1/16``). A container on it gets, between ``runc create`` and
``runc start``: an address from the subnet (the lowest free one; kept while it runs), a veth
pair whose container end is ``eth0`` in its network namespace with dockerd's MAC
(``02:42`` + the address) and a default route through the gateway. The address is reserved
before the container's /etc/hosts is written, so the file names it. At teardown the veth pair
is deleted and the address freed; a crash leaves nothing behind, as a namespace's veth dies
with it. The daemon masquerades the subnet's outbound traffic and turns IPv4 forwarding on
at start (iptables, as dockerd), and takes the rules away at shutdown.

Events: network ``connect`` and ``disconnect`` for each container on the bridge.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import trio

from svc.engine.events import EventBus
from svc.errors import Conflict, InvalidParameter, NotFound, SvcError, SystemError_
from svc.network import bridge as br
from svc.network.proxy import Binding, PortInUse, PortProxy

log = logging.getLogger("svc.networks")

BUILTIN = (("bridge", "bridge"), ("host", "host"), ("none", "null"))


@dataclass
class Network:
    id: str
    name: str
    driver: str
    subnet: str = ""
    gateway: str = ""
    bridge: str = ""
    endpoints: dict[str, EndpointInfo] = field(default_factory=dict)  # by container id


@dataclass
class EndpointInfo:
    """A container's place on a network."""

    container: str  # its name, with the leading /
    endpoint_id: str
    endpoint: br.Endpoint
    attached: bool = False


def check_bip(bip: str) -> tuple[str, int, str]:
    """``--bip``: (gateway, prefix length, subnet); the gateway is the given address."""
    try:
        iface = ipaddress.IPv4Interface(bip)
    except ValueError:
        raise InvalidParameter(f"invalid --bip {bip!r}: an IPv4 address with a prefix, "
                               "e.g. 172.17.0.1/16") from None
    if iface.network.prefixlen > 30 or iface.ip in (iface.network.network_address,
                                                     iface.network.broadcast_address):
        raise InvalidParameter(f"invalid --bip {bip!r}: the gateway must be a host address of "
                               "a subnet of /30 or larger")
    return str(iface.ip), iface.network.prefixlen, str(iface.network)


class NetworkService:
    def __init__(self, events: EventBus, bridge_name: str, bip: str) -> None:
        if not 0 < len(bridge_name) <= br.IFNAME_MAX:
            raise InvalidParameter(f"invalid --bridge {bridge_name!r}: 1 to 15 characters")
        self.events = events
        self.gateway, self.prefixlen, self.subnet = check_bip(bip)
        self.bridge_name = bridge_name
        self.networks: dict[str, Network] = {}
        self._forwarding_turned_on = False
        self._ready = False
        self._proxies: dict[str, tuple[PortProxy, trio.CancelScope]] = {}

    def open(self, records: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """Load the built-in networks' ids; returns records to save for new ones."""
        by_name = {str(r.get("Name")): (oid, r) for oid, r in records.items()}
        new: list[tuple[str, dict[str, Any]]] = []
        for name, driver in BUILTIN:
            found = by_name.get(name)
            nid = found[0] if found else secrets.token_hex(32)
            if found is None:
                new.append((nid, {"Name": name, "Id": nid, "Driver": driver}))
            net = Network(nid, name, driver)
            if name == "bridge":
                net.subnet, net.gateway, net.bridge = self.subnet, self.gateway, self.bridge_name
            self.networks[nid] = net
        return new

    @property
    def default_bridge(self) -> Network:
        return next(n for n in self.networks.values() if n.name == "bridge")

    async def setup(self) -> None:
        """The bridge, its address and the outbound rules (at daemon start)."""
        try:
            await trio.to_thread.run_sync(self._setup)
        except (br.NetworkError, OSError) as exc:
            raise SystemError_(str(exc)) from exc
        self._ready = True

    def _setup(self) -> None:
        br.ensure_bridge(self.bridge_name, self.gateway, self.prefixlen)
        br.ensure_rules(br.nat_rules(self.bridge_name, self.subnet))
        self._forwarding_turned_on = br.enable_forwarding()

    async def shutdown(self) -> None:
        """Take the outbound rules away (the bridge stays, as dockerd's does)."""
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._shutdown)

    def _shutdown(self) -> None:
        if not self._ready:
            return
        br.remove_rules(br.nat_rules(self.bridge_name, self.subnet))
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

    def of_container(self, cid: str) -> tuple[Network, EndpointInfo] | None:
        for n in self.networks.values():
            if cid in n.endpoints:
                return n, n.endpoints[cid]
        return None

    # -- containers on the bridge ----------------------------------------------------------

    def reserve(self, cid: str, name: str) -> EndpointInfo:
        """An address for container ``cid`` on the default bridge (freed by ``release``)."""
        net = self.default_bridge
        if cid in net.endpoints:
            return net.endpoints[cid]
        if not self._ready:
            raise SystemError_("the default bridge is not set up")
        taken = {e.endpoint.address for e in net.endpoints.values()} | {self.gateway}
        network = ipaddress.IPv4Network(self.subnet)
        for host in network.hosts():
            address = str(host)
            if address not in taken:
                break
        else:
            raise SystemError_(f"no free address left in {self.subnet} on {self.bridge_name}")
        ep = br.Endpoint(host_if=f"sv{cid[:12]}h", address=address, prefixlen=self.prefixlen,
                         gateway=self.gateway, mac=br.mac_for(address))
        info = EndpointInfo(container=name, endpoint_id=secrets.token_hex(32), endpoint=ep)
        net.endpoints[cid] = info
        return info

    async def attach(self, cid: str, pid: int) -> None:
        """Wire the reserved endpoint into the namespace of ``pid``."""
        net = self.default_bridge
        info = net.endpoints[cid]
        try:
            await trio.to_thread.run_sync(br.attach, self.bridge_name, pid, info.endpoint)
        except br.NetworkError as exc:
            raise SystemError_(str(exc)) from exc
        info.attached = True
        self.events.publish("network", "connect", net.id,
                            {"container": cid, "name": net.name, "type": net.driver})

    async def publish(self, cid: str, bindings: list[Binding], nursery: trio.Nursery) -> None:
        """Bind the container's published ports and forward them to its address, in
        ``nursery`` until ``release``. A port that cannot be bound is a 409 and nothing stays
        bound."""
        info = self.default_bridge.endpoints[cid]
        try:
            proxy = await PortProxy.bind(bindings)
        except PortInUse as exc:
            raise Conflict(f"driver failed programming external connectivity on endpoint "
                           f"{info.container.lstrip('/')}: {exc}") from None
        scope = trio.CancelScope()
        self._proxies[cid] = (proxy, scope)

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                        ) -> None:
            with scope:
                await proxy.serve(info.endpoint.address, task_status=task_status)

        await nursery.start(serve)

    def published(self, cid: str) -> list[Binding] | None:
        found = self._proxies.get(cid)
        return None if found is None else found[0].bindings

    async def release(self, cid: str) -> None:
        """Stop the container's port proxy, delete its veth pair (if still there) and free
        its address. Idempotent."""
        proxied = self._proxies.pop(cid, None)
        if proxied is not None:
            proxied[1].cancel()
            proxied[0].close()
        net = self.default_bridge
        info = net.endpoints.pop(cid, None)
        if info is None:
            return
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(br.detach, info.endpoint.host_if)
            except (OSError, SvcError) as exc:
                log.warning("removing %s: %s", info.endpoint.host_if, exc)
        if info.attached:
            self.events.publish("network", "disconnect", net.id,
                                {"container": cid, "name": net.name, "type": net.driver})
