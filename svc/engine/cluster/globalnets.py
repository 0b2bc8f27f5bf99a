"""Global (overlay) networks in the cluster store: their records, names, address pools,
VNIs, endpoints and addresses, each allocated by compare-and-swap so that two hosts acting at
once never get the same name, subnet, VNI or address.

Keys under ``/<prefix>/``::

    networks/<id>              the network's record (JSON)
    names/<name>               its id: a name is unique cluster-wide
    ipam                       {"Pools": {subnet: id}, "VNIs": {vni: id}}: one document, so
                               that a pool never overlaps another however two creates race
    joins/<id>                 bumped by every join: a removal that raced one fails and looks
                               again (etcd 3.4 cannot compare a range's emptiness)
    endpoints/<id>/<endpoint>  an endpoint: container, names, address, MAC, host (lease)
    addresses/<id>/<address>   the endpoint holding the address (lease)

Endpoints and addresses live under the node's lease: a host that dies takes them with it
once its TTL has passed; a host that comes back puts its own again (``Overlay.rejoin``).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from typing import Any

from svc.cluster.etcd import Compare, Etcd, EtcdError, delete_op, put_op
from svc.engine.cluster.mirror import Mirror, dumps
from svc.engine.networks.ipam import check_aux, plan_ipam
from svc.errors import Conflict, InvalidParameter, NotFound, SystemError_

log = logging.getLogger("svc.cluster")

# libnetwork's defaults for global address spaces and VXLAN ids
GLOBAL_POOL = ipaddress.IPv4Network("10.0.0.0/8")
GLOBAL_PREFIX = 24
VNI_FIRST, VNI_LAST = 256, (1 << 24) - 1
CAS_TRIES = 50


class StoreUnavailable(SystemError_):
    """The cluster store did not answer: a global network cannot be changed now."""


class GlobalNetworks:
    def __init__(self, etcd: Etcd, root: str) -> None:
        self.etcd = etcd
        self.root = root.rstrip("/")
        self.networks = Mirror(etcd, self.key("networks") + "/")
        self.endpoints = Mirror(etcd, self.key("endpoints") + "/")

    def key(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    # -- networks ----------------------------------------------------------------------------

    async def create(self, record: dict[str, Any], *, subnet: str, ip_range: str,
                     gateway: str, check_duplicate: bool) -> dict[str, Any]:
        """Record ``record`` (Id, Name and the rest) with a subnet (``subnet`` or the first
        free /24 of 10.0.0.0/8), its gateway and range, and a VNI; 409 for a taken name or
        an overlapping pool. Returns the record as stored."""
        nid, name = record["Id"], record["Name"]
        for _ in range(CAS_TRIES):
            ipam, ipam_rev = await self._ipam()
            pools = [ipaddress.IPv4Network(p) for p in ipam["Pools"]]
            net, gw, rng = plan_ipam(subnet, ip_range, gateway, pools,
                                     defaults=GLOBAL_POOL.subnets(new_prefix=GLOBAL_PREFIX),
                                     defaults_name="the global defaults (10.0.0.0/8)")
            vni = next(v for v in range(VNI_FIRST, VNI_LAST) if str(v) not in ipam["VNIs"])
            stored = dict(record, Subnet=net, Gateway=gw, IPRange=rng, VNI=vni,
                          Aux=check_aux(dict(record.get("Aux") or {}), net),
                          Created=int(time.time()))
            ipam["Pools"][net] = nid
            ipam["VNIs"][str(vni)] = nid
            compare = [Compare(self.key("ipam"), "MOD", ipam_rev)]
            if check_duplicate:
                compare.append(Compare(self.key("names", name), "CREATE", 0))
            try:
                done = await self.etcd.txn(compare, [
                    put_op(self.key("ipam"), dumps(ipam)),
                    put_op(self.key("names", name), nid.encode()),
                    put_op(self.key("networks", nid), dumps(stored))])
            except EtcdError as exc:
                raise StoreUnavailable(f"cluster store: {exc}") from None
            if done.succeeded:
                return stored
            if check_duplicate and await self.etcd.get(self.key("names", name)) is not None:
                raise Conflict(f"network with name {name} already exists")
        raise Conflict("the cluster's address pools changed too often to allocate one")

    async def _ipam(self) -> tuple[dict[str, dict[str, str]], int]:
        try:
            kv = await self.etcd.get(self.key("ipam"))
        except EtcdError as exc:
            raise StoreUnavailable(f"cluster store: {exc}") from None
        if kv is None:
            return {"Pools": {}, "VNIs": {}}, 0
        doc = kv.json()
        return {"Pools": dict(doc.get("Pools") or {}), "VNIs": dict(doc.get("VNIs") or {})}, \
            kv.mod_revision

    async def remove(self, nid: str) -> None:
        """Delete the network and free its pool and VNI; 409 while any host has an endpoint
        on it (the message names them)."""
        for _ in range(CAS_TRIES):
            try:
                joins = await self.etcd.get(self.key("joins", nid))
                eps, _ = await self.etcd.range(self.key("endpoints", nid) + "/")
                net = await self.etcd.get(self.key("networks", nid))
            except EtcdError as exc:
                raise StoreUnavailable(f"cluster store: {exc}") from None
            if net is None:
                raise NotFound(f"network {nid} not found")
            record = net.json()
            if eps:
                users = sorted({f"{e.json().get('Name', '?').lstrip('/')} on "
                                f"{e.json().get('Host', '?')}" for e in eps})
                raise Conflict(f"network {record['Name']} has active endpoints: "
                               f"{', '.join(users)}")
            ipam, ipam_rev = await self._ipam()
            ipam["Pools"] = {p: i for p, i in ipam["Pools"].items() if i != nid}
            ipam["VNIs"] = {v: i for v, i in ipam["VNIs"].items() if i != nid}
            name_key = self.key("names", record["Name"])
            ops = [delete_op(self.key("networks", nid)), put_op(self.key("ipam"), dumps(ipam)),
                   delete_op(self.key("joins", nid)),
                   delete_op(self.key("addresses", nid) + "/", prefix=True)]
            owner = await self.etcd.get(name_key)
            if owner is not None and owner.value.decode() == nid:
                ops.append(delete_op(name_key))
            try:
                done = await self.etcd.txn(
                    [Compare(self.key("joins", nid), "MOD", joins.mod_revision if joins else 0),
                     Compare(self.key("ipam"), "MOD", ipam_rev),
                     Compare(self.key("networks", nid), "MOD", net.mod_revision)], ops)
            except EtcdError as exc:
                raise StoreUnavailable(f"cluster store: {exc}") from None
            if done.succeeded:
                return
        raise Conflict("the network changed too often to remove it")

    # -- endpoints ---------------------------------------------------------------------------

    async def claim_address(self, net: dict[str, Any], eid: str, static: str,
                            taken_locally: set[str], lease: int) -> str:
        """An address of the network for endpoint ``eid`` (``static`` if given), held under
        ``lease``; 409 if it is taken or the pool is exhausted."""
        nid = net["Id"]
        prefix = self.key("addresses", nid) + "/"
        pool = ipaddress.IPv4Network(net.get("IPRange") or net["Subnet"])
        reserved = {net["Gateway"], *(net.get("Aux") or {}).values()} | taken_locally
        for _ in range(CAS_TRIES):
            try:
                kvs, _ = await self.etcd.range(prefix)
            except EtcdError as exc:
                raise StoreUnavailable(f"cluster store: {exc}") from None
            taken = {kv.key.removeprefix(prefix) for kv in kvs} | reserved
            if static:
                _check_static(static, net, pool)
                if static in taken:
                    raise Conflict(f"Address already in use: {static} on network "
                                   f"{net['Name']}")
                address = static
            else:
                address = next((str(h) for h in pool.hosts() if str(h) not in taken), "")
                if not address:
                    raise Conflict(f"no available IPv4 addresses on network {net['Name']} "
                                   f"({pool})")
            try:
                if await self.etcd.create(prefix + address, eid.encode(), lease=lease):
                    return address
            except EtcdError as exc:
                raise StoreUnavailable(f"cluster store: {exc}") from None
        raise Conflict(f"could not claim an address on network {net['Name']}")

    async def put_endpoint(self, nid: str, eid: str, record: dict[str, Any],
                           lease: int) -> None:
        """Record an endpoint (and bump the network's joins); 404 if the network went."""
        try:
            done = await self.etcd.txn(
                [Compare(self.key("networks", nid), "CREATE", 0, "GREATER")],
                [put_op(self.key("endpoints", nid, eid), dumps(record), lease),
                 put_op(self.key("joins", nid), eid.encode())])
        except EtcdError as exc:
            raise StoreUnavailable(f"cluster store: {exc}") from None
        if not done.succeeded:
            raise NotFound(f"network {nid} not found")

    async def drop_endpoint(self, nid: str, eid: str, address: str) -> None:
        """Forget an endpoint and free its address (best effort: the lease frees them
        anyway once this host is gone)."""
        try:
            await self.etcd.txn([], [delete_op(self.key("endpoints", nid, eid)),
                                     delete_op(self.key("addresses", nid, address))])
        except EtcdError as exc:
            log.warning("cluster store: endpoint %s of %s not removed yet: %s",
                        eid[:12], nid[:12], exc)

    async def hold(self, nid: str, eid: str, address: str, record: dict[str, Any],
                   lease: int) -> bool:
        """Put a live endpoint and its address again under a new lease (after the store
        or this host was away); False if another endpoint took the address meanwhile."""
        try:
            key = self.key("addresses", nid, address)
            done = await self.etcd.txn(
                [Compare(key, "VALUE", eid.encode())],
                [put_op(key, eid.encode(), lease)])
            if not done.succeeded and not await self.etcd.create(key, eid.encode(),
                                                                 lease=lease):
                return False
            await self.put_endpoint(nid, eid, record, lease)
        except EtcdError as exc:
            raise StoreUnavailable(f"cluster store: {exc}") from None
        return True


def _check_static(static: str, net: dict[str, Any], pool: ipaddress.IPv4Network) -> None:
    """A static address must be a host address of the network's pool (400 if not)."""
    subnet = ipaddress.IPv4Network(net["Subnet"])
    try:
        address = ipaddress.IPv4Address(static)
    except ValueError:
        raise InvalidParameter(f"invalid IPv4 address {static!r}") from None
    if address not in pool or address in (subnet.network_address, subnet.broadcast_address):
        raise InvalidParameter(f"invalid address {static}: not a host address of {pool} on "
                               f"network {net['Name']}")

