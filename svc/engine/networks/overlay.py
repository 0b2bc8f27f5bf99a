"""The overlay driver: global networks, shared by every daemon of a cluster, on this host.

The store is the truth (``engine/cluster/globalnets``); this host follows it through two
mirrors. Each global network appears in ``NetworkService.networks`` like a local one
(``scope`` global, no Linux bridge of the host's own); every endpoint of another host appears
in its ``endpoints`` with ``host`` set, so that inspect shows what the cluster knows and the
embedded DNS answers names of every host. A host builds a network's sandbox (namespace,
bridge, VXLAN device: ``svc.network.overlay``) when its first container joins and removes it
when its last one leaves; remote endpoints are programmed into the sandboxes as the watch
delivers them, in order, by one task.

A container whose first network is a global one that is not ``--internal`` also gets a leg on
``docker_gwbridge``, a local bridge network made on first use, which gives it its way out (and
its published ports), as with the engines.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from svc.engine.cluster.globalnets import GlobalNetworks, StoreUnavailable
from svc.engine.cluster.session import ClusterSession
from svc.engine.networks.ipam import CreateSpec, EndpointInfo, Network
from svc.errors import Conflict, InvalidParameter
from svc.network import bridge as br
from svc.network import overlay as ov

if TYPE_CHECKING:
    from svc.engine.networks.service import NetworkService

log = logging.getLogger("svc.networks")

GW_BRIDGE = "docker_gwbridge"
GW_OPTIONS = {"com.docker.network.bridge.name": GW_BRIDGE,
              "com.docker.network.bridge.enable_icc": "false",
              "com.docker.network.bridge.enable_ip_masquerade": "true"}
NEEDS_STORE = ("the overlay driver needs a cluster store: start svcd with --cluster-store "
               "etcd://host:port and --cluster-advertise <ip|interface>:<port>")
Change = Callable[[], Awaitable[None]]


class Overlay:
    def __init__(self, service: NetworkService, session: ClusterSession) -> None:
        self.service = service
        self.session = session
        self.scope = trio.CancelScope()  # what follows the store: cancelled at leave
        self.store: GlobalNetworks | None = None
        if session.etcd is not None:
            self.store = GlobalNetworks(session.etcd, session.key())
            self.store.networks.listeners.append(self._network_changed)
            self.store.endpoints.listeners.append(self._endpoint_changed)
            session.followers += [self.store.networks, self.store.endpoints]
            session.stoppers.append(self.scope)
            session.on_join.append(self._rejoin)  # before the first registration
        # unbounded: a listener never blocks (one per change, however many at once)
        self._send, self._receive = trio.open_memory_channel[Change](math.inf)
        self.mtu = 1450
        self._locks: dict[str, trio.Lock] = {}  # one per network: its sandbox's make and end

    def lock(self, net: Network) -> trio.Lock:
        return self._locks.setdefault(net.id, trio.Lock())

    @property
    def local_ip(self) -> str:
        """This host's VTEP: the advertise address without its port."""
        return self.session.advertise.rpartition(":")[0]

    @property
    def enabled(self) -> bool:
        return self.store is not None

    def _need(self, *, advertise: bool = False) -> GlobalNetworks:
        if self.store is None:
            raise InvalidParameter(NEEDS_STORE)
        if advertise and not self.session.advertise:
            raise InvalidParameter("joining an overlay network needs --cluster-advertise: "
                                   "the address other hosts reach this one at")
        if not self.session.reachable:
            raise StoreUnavailable(f"the cluster store is unreachable ({self.session.error});"
                                   " global networks cannot change now")
        return self.store

    # -- following the store -----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Follow the store and program the sandboxes until cancelled."""
        if self.store is None:
            task_status.started()
            return
        if self.session.advertise:
            self.mtu = await trio.to_thread.run_sync(ov.underlay_mtu, self.local_ip) - \
                ov.VXLAN_OVERHEAD
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._apply_changes)
                await nursery.start(self.store.networks.run)
                await nursery.start(self.store.endpoints.run)
                task_status.started()

    async def _apply_changes(self) -> None:
        """Program the sandboxes as the store changes, in order. A change that fails is
        logged (a record of another host this one cannot use, a sandbox in trouble): the
        next ones still run."""
        async for change in self._receive:
            try:
                await change()
            except Exception as exc:  # never the end of the daemon's nursery
                log.warning("overlay: %s", exc)

    def _network_changed(self, nid: str, record: dict[str, Any] | None) -> None:
        nets = self.service.networks
        if record is None:
            gone = nets.get(nid)
            if gone is not None and gone.scope == "global":
                del nets[nid]
                self._send.send_nowait(partial(self._drop_sandbox, gone))
            return
        net = nets.get(nid)
        fresh = network_from_record(record)
        if net is None:
            nets[nid] = fresh
            known = self.store.endpoints.items if self.store is not None else {}
            for key, value in list(known.items()):  # endpoints seen before their network
                if key.startswith(nid + "/"):
                    self._endpoint_changed(key, value)
        else:  # the record changes only in what it carries, never in its addresses
            net.labels, net.options = fresh.labels, fresh.options

    def _endpoint_changed(self, key: str, record: dict[str, Any] | None) -> None:
        nid, _, eid = key.partition("/")
        net = self.service.networks.get(nid)
        if net is None:
            return
        if record is None:
            for cid, info in list(net.endpoints.items()):
                if info.endpoint_id == eid and info.host:
                    del net.endpoints[cid]
                    self._send.send_nowait(partial(self._peer, net, info, False))
            return
        if record.get("Host") == self.session.advertise:
            return  # one of ours: known locally
        # known (a sandbox made meanwhile programs it) but not answered by the DNS until its
        # entries are in: a name never resolves to an address that cannot be reached yet
        info = EndpointInfo(container=str(record.get("Name") or ""), endpoint_id=eid,
                            endpoint=br.Endpoint(host_if="", address=record["Address"],
                                                 prefixlen=net.prefixlen, gateway=net.gateway,
                                                 mac=record["Mac"]),
                            aliases=list(record.get("Aliases") or []), attached=False,
                            host=str(record["Host"]).rpartition(":")[0])
        net.endpoints[str(record["Container"])] = info
        self._send.send_nowait(partial(self._peer, net, info, True))

    async def _peer(self, net: Network, info: EndpointInfo, present: bool) -> None:
        """Program (or forget) a remote endpoint in the network's sandbox, if this host has
        one; a present one is answered by the DNS once that is done."""
        name = self.sandbox(net).netns
        async with self.lock(net):
            if await trio.to_thread.run_sync(ov.sandbox_exists, name):
                ep = info.endpoint
                fn = ov.set_peer if present else ov.drop_peer
                await trio.to_thread.run_sync(fn, name, ep.mac, ep.address, info.host)
        info.attached = present

    # -- networks ----------------------------------------------------------------------------

    async def create_network(self, spec: CreateSpec) -> Network:
        """An overlay network, recorded in the cluster store for every host."""
        store = self._need()
        name = spec.name
        if spec.check_duplicate and any(n.name == name for n in self.service.networks.values()):
            raise Conflict(f"network with name {name} already exists")
        record = new_record(name, internal=spec.internal, options=spec.options,
                            labels=spec.labels, ipam_options=spec.ipam_options, aux=spec.aux,
                            configured=spec.configured)
        stored = await store.create(record, subnet=spec.subnet, ip_range=spec.ip_range,
                                    gateway=spec.gateway, check_duplicate=spec.check_duplicate)
        net = self.service.networks.setdefault(stored["Id"], network_from_record(stored))
        self.service.events.publish("network", "create", net.id,
                                    {"name": name, "type": "overlay"})
        return net

    async def remove(self, net: Network, in_use: list[str]) -> None:
        """Remove an overlay network from the cluster; 409 while a container of any host
        is on it."""
        if in_use:
            raise Conflict(f"network {net.name} has active endpoints: "
                           f"{', '.join(sorted(in_use))}")
        await self._need().remove(net.id)
        self.service.networks.pop(net.id, None)
        await self._drop_sandbox(net)
        self.service.events.publish("network", "destroy", net.id,
                                    {"name": net.name, "type": "overlay"})

    def sandbox(self, net: Network) -> ov.Sandbox:
        return ov.Sandbox(ov.sandbox_name(self.service.owner, net.vni), net.vni, net.gateway,
                          net.prefixlen, self.mtu)

    async def _drop_sandbox(self, net: Network) -> None:
        await trio.to_thread.run_sync(ov.remove_sandbox, self.sandbox(net).netns)

    # -- endpoints ---------------------------------------------------------------------------

    async def claim(self, net: Network, eid: str, static: str) -> str:
        """An address for a new endpoint, unique across the cluster."""
        store = self._need(advertise=True)
        local = {i.endpoint.address for i in net.endpoints.values()}
        with trio.CancelScope(shield=True):  # claimed and known, or neither
            address = await store.claim_address(network_record(net), eid, static, local,
                                                self.session.lease)
        return address

    async def unclaim(self, net: Network, eid: str, address: str) -> None:
        """Give back an address claimed for an endpoint that did not come to be."""
        if self.store is not None and self.session.reachable:
            with trio.CancelScope(shield=True):
                await self.store.drop_endpoint(net.id, eid, address)

    async def attach(self, cid: str, pid: int, net: Network, info: EndpointInfo, *,
                     way_out: bool) -> None:
        """Wire the endpoint into its sandbox (made, with every known peer, if it is the
        first here), record it in the store, and give the container its way out."""
        store = self._need(advertise=True)
        sb = self.sandbox(net)
        async with self.lock(net):  # never beside a detach removing the sandbox
            await trio.to_thread.run_sync(ov.ensure_sandbox, sb, self.local_ip)
            for other in list(net.endpoints.values()):  # idempotent: a half-made one too
                if other.host:
                    await trio.to_thread.run_sync(ov.set_peer, sb.netns, other.endpoint.mac,
                                                  other.endpoint.address, other.host)
            await trio.to_thread.run_sync(ov.attach, sb, pid, info.endpoint, False)
        await store.put_endpoint(net.id, info.endpoint_id, self.endpoint_record(cid, info),
                                 self.session.lease)
        if way_out and not net.internal:
            await self.service.gateway_leg(cid, pid, info.container)

    def endpoint_record(self, cid: str, info: EndpointInfo) -> dict[str, Any]:
        return {"Container": cid, "Name": info.container, "Aliases": info.aliases,
                "Address": info.endpoint.address, "Mac": info.endpoint.mac,
                "Host": self.session.advertise}

    async def detach(self, net: Network, info: EndpointInfo) -> None:
        """Unwire a local endpoint, forget it in the store, and remove the sandbox once its
        last container has left (cancellation-shielded by the caller)."""
        name = self.sandbox(net).netns
        async with self.lock(net):
            try:
                await trio.to_thread.run_sync(ov.detach_from, name, info.endpoint.host_if)
            except OSError as exc:
                log.warning("removing %s: %s", info.endpoint.host_if, exc)
            if not any(not i.host for i in net.endpoints.values()) and \
                    await trio.to_thread.run_sync(ov.ports_in_use, name) == 0:
                await trio.to_thread.run_sync(ov.remove_sandbox, name)
        if self.store is not None and self.session.reachable:  # else its lease frees it
            await self.store.drop_endpoint(net.id, info.endpoint_id, info.endpoint.address)

    async def _rejoin(self) -> None:
        """After (re)registration: this host's live endpoints put again under the new lease,
        and the store's endpoints of this host that no container holds any more removed (a
        crash, or containers that ended while the store was away)."""
        store = self.store
        if store is None:
            return
        for net in list(self.service.networks.values()):
            if net.scope != "global":
                continue
            for cid, info in list(net.endpoints.items()):
                if info.host or not info.attached:
                    continue
                if not await store.hold(net.id, info.endpoint_id, info.endpoint.address,
                                        self.endpoint_record(cid, info), self.session.lease):
                    log.error("overlay: the address %s of %s on %s was taken by another "
                              "host while this one was away", info.endpoint.address,
                              info.container, net.name)
        kvs, _ = await store.etcd.range(store.key("endpoints") + "/")
        for kv in kvs:
            nid, _, eid = kv.key.removeprefix(store.key("endpoints") + "/").partition("/")
            record = kv.json()
            if record.get("Host") == self.session.advertise and not self._holds(nid, eid):
                await store.drop_endpoint(nid, eid, str(record.get("Address")))

    def _holds(self, nid: str, eid: str) -> bool:
        """Whether a container of this host has (or is getting) endpoint ``eid`` now."""
        net = self.service.networks.get(nid)
        return net is not None and any(i.endpoint_id == eid and not i.host
                                       for i in net.endpoints.values())

    async def forget_sandboxes(self) -> None:
        """At start: sandboxes a crash left (their containers died with the daemon)."""
        for name in await trio.to_thread.run_sync(ov.list_sandboxes, self.service.owner):
            await trio.to_thread.run_sync(ov.remove_sandbox, name)


def network_from_record(r: dict[str, Any]) -> Network:
    return Network(
        str(r["Id"]), str(r["Name"]), "overlay", subnet=str(r["Subnet"]),
        gateway=str(r["Gateway"]), ip_range=str(r.get("IPRange") or ""),
        internal=bool(r.get("Internal")), options=dict(r.get("Options") or {}),
        labels=dict(r.get("Labels") or {}), ipam_options=dict(r.get("IPAMOptions") or {}),
        aux=dict(r.get("Aux") or {}), configured=dict(r.get("Configured") or {}),
        scope="global", vni=int(r["VNI"]))


def network_record(net: Network) -> dict[str, Any]:
    return {"Id": net.id, "Name": net.name, "Driver": "overlay", "Subnet": net.subnet,
            "Gateway": net.gateway, "IPRange": net.ip_range, "Internal": net.internal,
            "Options": net.options, "Labels": net.labels, "IPAMOptions": net.ipam_options,
            "Aux": net.aux, "Configured": net.configured, "VNI": net.vni}


def new_record(name: str, *, internal: bool, options: dict[str, str] | None,
               labels: dict[str, str] | None, ipam_options: dict[str, str] | None,
               aux: dict[str, str] | None, configured: dict[str, str]) -> dict[str, Any]:
    return {"Id": secrets.token_hex(32), "Name": name, "Driver": "overlay",
            "Internal": internal, "Options": dict(options or {}), "Labels": dict(labels or {}),
            "IPAMOptions": dict(ipam_options or {}), "Aux": dict(aux or {}),
            "Configured": configured}

