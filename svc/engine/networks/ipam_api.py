"""The IpamDriver protocol of the engines' remote IPAM (libnetwork 0.7, Docker 1.11): request
bodies and what the answers mean. Pure: no I/O.

An IPAM plugin of that generation says a refusal in ``Error`` (not ``Err``: libnetwork's IPAM
responses named it so) in a 200 answer, or in ``Err`` with another status (the plugin client
reads that one); both are the same refusal here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from svc.plugins.client import PluginBadAnswer, remote_error

KIND = "IpamDriver"
GATEWAY = "com.docker.network.gateway"  # a pool's Data key, and the gateway's request type
REQUEST_TYPE = "RequestAddressType"
MAC = "com.docker.network.endpoint.macaddress"
LOCAL_SPACE, GLOBAL_SPACE = "LocalDefault", "GlobalDefault"  # the built-in IPAM's spaces


def check_error(method: str, doc: dict[str, Any]) -> dict[str, Any]:
    err = doc.get("Error") or doc.get("Err")
    if err:
        raise remote_error(f"{KIND}.{method}", 200, str(err))
    return doc


def bad(method: str, what: str) -> PluginBadAnswer:
    return PluginBadAnswer(f"{KIND}.{method}: {what}")


def parse_capabilities(doc: dict[str, Any]) -> bool:
    """``GetCapabilities``: whether the plugin needs each endpoint's MAC."""
    check_error("GetCapabilities", doc)
    return bool(doc.get("RequiresMACAddress"))


def parse_spaces(doc: dict[str, Any]) -> tuple[str, str]:
    """``GetDefaultAddressSpaces``: (local, global)."""
    check_error("GetDefaultAddressSpaces", doc)
    local, glob = doc.get("LocalDefaultAddressSpace"), doc.get("GlobalDefaultAddressSpace")
    if not isinstance(local, str | None) or not isinstance(glob, str | None):
        raise bad("GetDefaultAddressSpaces", f"address spaces {local!r}, {glob!r} are not "
                                             "strings")
    return local or "", glob or ""


def request_pool(space: str, pool: str, sub_pool: str, options: dict[str, str] | None,
                 v6: bool) -> dict[str, Any]:
    return {"AddressSpace": space, "Pool": pool, "SubPool": sub_pool, "Options": options,
            "V6": v6}


@dataclass(frozen=True)
class Pool:
    """A pool the plugin handed out: its id, the pool (a CIDR) and its data (where a
    ``com.docker.network.gateway`` says the gateway, in CIDR form)."""

    pool_id: str
    pool: str
    data: dict[str, str] = field(default_factory=dict)

    @property
    def gateway(self) -> str:
        """The gateway the pool's data names ("" if none), as an address in CIDR form."""
        return self.data.get(GATEWAY, "")


def parse_pool(doc: dict[str, Any], v6: bool) -> Pool:
    check_error("RequestPool", doc)
    pool_id, text, data = doc.get("PoolID"), doc.get("Pool"), doc.get("Data") or {}
    if not isinstance(pool_id, str) or not pool_id:
        raise bad("RequestPool", f"PoolID {pool_id!r} is not a pool's id")
    version = 6 if v6 else 4
    try:
        net = ipaddress.ip_network(str(text), strict=False)
    except ValueError:
        net = None
    if net is None or "/" not in str(text) or net.version != version:
        raise bad("RequestPool", f"Pool {text!r} is not an IPv{version} pool in CIDR form")
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise bad("RequestPool", f"Data {data!r} is not an object of strings")
    if data.get(GATEWAY):
        gw = parse_cidr("RequestPool", f"Data[{GATEWAY}]", data[GATEWAY], version)
        if gw.ip not in net:
            raise bad("RequestPool", f"the gateway {gw} is not in the pool {net}")
    return Pool(pool_id, str(net), {str(k): v for k, v in data.items()})


def release_pool(pool_id: str) -> dict[str, Any]:
    return {"PoolID": pool_id}


def request_address(pool_id: str, address: str, options: dict[str, str] | None
                    ) -> dict[str, Any]:
    return {"PoolID": pool_id, "Address": address, "Options": options}


def gateway_options() -> dict[str, str]:
    """The options of the gateway's request, as libnetwork sent them."""
    return {REQUEST_TYPE: GATEWAY}


def parse_cidr(method: str, what: str, text: Any, version: int
               ) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    try:
        iface = ipaddress.ip_interface(str(text))
    except ValueError:
        iface = None
    if iface is None or "/" not in str(text) or iface.version != version:
        raise bad(method, f"{what} {text!r} is not an IPv{version} address in CIDR form")
    return iface


def parse_address(doc: dict[str, Any], pool: str) -> str:
    """``RequestAddress``' address, in CIDR form, checked to be in ``pool``."""
    check_error("RequestAddress", doc)
    net = ipaddress.ip_network(pool)
    text = doc.get("Address")
    if not text:
        raise bad("RequestAddress", "the plugin answered no Address")
    iface = parse_cidr("RequestAddress", "Address", text, net.version)
    if iface.ip not in net:
        raise bad("RequestAddress", f"the address {iface} is not in the pool {net}")
    return str(iface)


def release_address(pool_id: str, address: str) -> dict[str, Any]:
    """``ReleaseAddress``: the address without its prefix, as libnetwork sent ``net.IP``."""
    return {"PoolID": pool_id, "Address": address.split("/")[0]}
