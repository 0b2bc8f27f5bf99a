"""The NetworkDriver protocol of the engines' remote drivers (libnetwork 0.7, Docker 1.11): the
request bodies svc sends and what a plugin's answers mean. Pure: no I/O.

The bodies are what Go's encoding/json made of libnetwork's structs, field for field: every
field present (``Interface`` with its three strings, ``IPv6Data`` as ``[]``), a MAC in an
option as base64 (a ``net.HardwareAddr`` is a byte slice), protocols as numbers. An answer may
carry ``Err``: a 200 with ``Err`` set is a refusal, as the engines' proxy read it.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from svc.network.bridge import parse_mac
from svc.plugins.client import PluginBadAnswer, remote_error

KIND = "NetworkDriver"
GENERIC = "com.docker.network.generic"
ENABLE_IPV6 = "com.docker.network.enable_ipv6"
INTERNAL = "com.docker.network.internal"
PORTMAP = "com.docker.network.portmap"
EXPOSED = "com.docker.network.endpoint.exposedports"
MAC_OPTION = "com.docker.network.endpoint.macaddress"
NODE_DISCOVERY = 1  # discoverapi.NodeDiscovery
NEXTHOP, CONNECTED = 0, 1  # a static route's RouteType
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17}
SCOPES = ("local", "global")
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
DEFAULT_PREFIX = "eth"


def check_err(method: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc``, unless it is a refusal (``Err`` set in a 200 answer)."""
    err = doc.get("Err")
    if err:
        raise remote_error(method, 200, str(err))
    return doc


def bad(method: str, what: str) -> PluginBadAnswer:
    return PluginBadAnswer(f"{KIND}.{method}: {what}")


def parse_scope(doc: dict[str, Any]) -> str:
    """``GetCapabilities``' ``Scope``: ``local`` or ``global``; anything else failed the
    driver's registration in libnetwork, and fails its use here."""
    check_err(f"{KIND}.GetCapabilities", doc)
    scope = doc.get("Scope")
    if scope not in SCOPES:
        raise bad("GetCapabilities", f"invalid capability: expecting 'local' or 'global', "
                                     f"got {scope!r}")
    return str(scope)


# -- networks ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolData:
    """One pool of a network as the driver is told of it (driverapi.IPAMData): addresses in
    CIDR form (the gateway and auxiliary addresses with the pool's prefix length)."""

    address_space: str
    pool: str
    gateway: str = ""
    aux: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, Any]:
        """IPAMData.MarshalJSON: AddressSpace always, the rest when set."""
        out: dict[str, Any] = {"AddressSpace": self.address_space}
        if self.pool:
            out["Pool"] = self.pool
        if self.gateway:
            out["Gateway"] = self.gateway
        if self.aux:
            out["AuxAddresses"] = dict(self.aux)
        return out


def create_network(nid: str, generic: dict[str, str] | None, *, enable_ipv6: bool,
                   internal: bool, v4: Sequence[PoolData], v6: Sequence[PoolData]
                   ) -> dict[str, Any]:
    """``CreateNetwork``: the user's ``-o`` options under ``com.docker.network.generic``,
    ``enable_ipv6`` always and ``internal`` when set, as the daemon of 1.11 put them."""
    options: dict[str, Any] = {GENERIC: dict(generic or {}), ENABLE_IPV6: enable_ipv6}
    if internal:
        options[INTERNAL] = True
    return {"NetworkID": nid, "Options": options, "IPv4Data": [p.body() for p in v4],
            "IPv6Data": [p.body() for p in v6]}


def network_only(nid: str) -> dict[str, Any]:
    return {"NetworkID": nid}


def endpoint_only(nid: str, eid: str) -> dict[str, Any]:
    """``DeleteEndpoint``, ``EndpointOperInfo``, ``Leave``, ``RevokeExternalConnectivity``."""
    return {"NetworkID": nid, "EndpointID": eid}


# -- endpoints --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Interface:
    """An endpoint's interface: addresses in CIDR form, the MAC in the kernel's form."""

    address: str = ""
    address6: str = ""
    mac: str = ""

    def body(self) -> dict[str, str]:
        return {"Address": self.address, "AddressIPv6": self.address6, "MacAddress": self.mac}


def port_options(exposed: Sequence[tuple[int, str]],
                 published: Sequence[tuple[str, str, int, int, int]]) -> dict[str, Any]:
    """The ports as libnetwork's generic options carried them: ``exposed`` as (port, proto),
    ``published`` as (proto, host ip, container port, first host port, last host port)."""
    return {
        EXPOSED: [{"Proto": PROTOCOLS.get(proto, 0), "Port": port} for port, proto in exposed],
        PORTMAP: [{"Proto": PROTOCOLS.get(proto, 0), "IP": "", "Port": port, "HostIP": host_ip,
                   "HostPort": low, "HostPortEnd": high}
                  for proto, host_ip, port, low, high in published],
    }


def endpoint_options(mac: str, ports: dict[str, Any] | None) -> dict[str, Any]:
    """``CreateEndpoint``'s ``Options`` (the endpoint's generic data): the container's own MAC
    (as Go encoded its bytes: base64) and, on a network that is not internal, its ports."""
    out: dict[str, Any] = dict(ports or {})
    if mac:
        out[MAC_OPTION] = base64.b64encode(bytes.fromhex(mac.replace(":", ""))).decode()
    return out


def create_endpoint(nid: str, eid: str, iface: Interface, options: dict[str, Any]
                    ) -> dict[str, Any]:
    return {"NetworkID": nid, "EndpointID": eid, "Interface": iface.body(), "Options": options}


def _cidr(method: str, field: str, text: str, version: int | None = None
          ) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    try:
        iface = ipaddress.ip_interface(text)
    except ValueError:
        raise bad(method, f"{field} {text!r} is not an address in CIDR form") from None
    if "/" not in text or (version is not None and iface.version != version):
        raise bad(method, f"{field} {text!r} is not an IPv{version or 4} address in CIDR form")
    return iface


def parse_create_endpoint(doc: dict[str, Any], given: Interface) -> Interface:
    """The endpoint's interface after ``CreateEndpoint``: what the daemon gave, completed by
    what the driver supplied where the daemon gave nothing.

    Raises:
        PluginCallError: the plugin refused.
        PluginBadAnswer: an answer that does not parse, or one that changes an address or
            the MAC the daemon gave (libnetwork: "driver modified interface address").
    """
    check_err(f"{KIND}.CreateEndpoint", doc)
    got = doc.get("Interface")
    if got is None:
        return given
    if not isinstance(got, dict):
        raise bad("CreateEndpoint", f"Interface {got!r} is not an object")
    fields = {"address": given.address, "address6": given.address6, "mac": given.mac}
    for key in ("Address", "AddressIPv6"):
        text = got.get(key) or ""
        if not isinstance(text, str):
            raise bad("CreateEndpoint", f"{key} {text!r} is not a string")
        if text:  # libnetwork put either by its family
            iface = _cidr("CreateEndpoint", key, text)
            _merge(fields, "address" if iface.version == 4 else "address6", str(iface))
    mac = got.get("MacAddress") or ""
    if mac:
        try:
            mac = parse_mac(str(mac))
        except ValueError:
            raise bad("CreateEndpoint", f"MacAddress {mac!r} is not a MAC address") from None
        _merge(fields, "mac", mac)
    return Interface(**fields)


def _merge(fields: dict[str, str], key: str, value: str) -> None:
    had = fields[key]
    if had and had != value:
        what = "MAC address" if key == "mac" else "address"
        raise bad("CreateEndpoint", f"driver modified interface {what}: the daemon gave {had}, "
                                    f"the driver answered {value}")
    fields[key] = value


# -- join -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    """A static route of a Join: via ``next_hop`` (RouteType 0) or connected (1: bound to the
    endpoint's interface)."""

    destination: str
    route_type: int
    next_hop: str = ""


@dataclass(frozen=True)
class JoinAnswer:
    src_name: str = ""  # "" if the driver gives no interface to move
    dst_prefix: str = DEFAULT_PREFIX
    gateway: str = ""
    gateway6: str = ""
    routes: tuple[Route, ...] = ()
    disable_gateway_service: bool = False

    @property
    def default_route(self) -> bool:
        """Whether the endpoint provides the container's way out (libnetwork's
        ``needDefaultGW``: a gateway, or a static route to 0.0.0.0/0)."""
        return bool(self.gateway) or any(r.destination == "0.0.0.0/0" for r in self.routes)


def join(nid: str, eid: str, sandbox_key: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"NetworkID": nid, "EndpointID": eid, "SandboxKey": sandbox_key, "Options": options}


def parse_join(doc: dict[str, Any]) -> JoinAnswer:
    """``Join``'s answer, checked as libnetwork checked it (``unable to parse Gateway``...);
    interface names must be names the kernel takes. An empty ``DstPrefix`` is ``eth``.

    Raises:
        PluginCallError: the plugin refused.
        PluginBadAnswer: a field that does not parse.
    """
    check_err(f"{KIND}.Join", doc)
    names = doc.get("InterfaceName")
    src, prefix = "", DEFAULT_PREFIX
    if names is not None:
        if not isinstance(names, dict):
            raise bad("Join", f"InterfaceName {names!r} is not an object")
        src = str(names.get("SrcName") or "")
        prefix = str(names.get("DstPrefix") or DEFAULT_PREFIX)
        if src and not IFNAME_RE.match(src):
            raise bad("Join", f"SrcName {src!r} is not an interface name")
        if not IFNAME_RE.match(prefix) or len(prefix) > 13:
            raise bad("Join", f"DstPrefix {prefix!r} is not the start of an interface name "
                              "(1 to 13 characters of [A-Za-z0-9_.:-])")
    gateway = _ip("Gateway", doc.get("Gateway"), 4)
    gateway6 = _ip("GatewayIPv6", doc.get("GatewayIPv6"), 6)
    raw = doc.get("StaticRoutes") or []
    if not isinstance(raw, list):
        raise bad("Join", f"StaticRoutes {raw!r} is not a list")
    return JoinAnswer(src, prefix, gateway, gateway6, tuple(_route(r) for r in raw),
                      bool(doc.get("DisableGatewayService")))


def _ip(field: str, value: Any, version: int) -> str:
    if not value:
        return ""
    try:
        ip = ipaddress.ip_address(str(value))
    except ValueError:
        raise bad("Join", f'unable to parse {field} "{value}"') from None
    if ip.version != version:
        raise bad("Join", f'{field} "{value}" is not an IPv{version} address')
    return str(ip)


def _route(raw: Any) -> Route:
    if not isinstance(raw, dict):
        raise bad("Join", f"static route {raw!r} is not an object")
    dest = str(raw.get("Destination") or "")
    try:
        net = ipaddress.ip_network(dest, strict=False)
    except ValueError:
        raise bad("Join", f"static route destination {dest!r} is not a CIDR") from None
    if "/" not in dest:
        raise bad("Join", f"static route destination {dest!r} is not a CIDR")
    kind = raw.get("RouteType") or 0
    if not isinstance(kind, int) or isinstance(kind, bool):
        raise bad("Join", f"static route to {dest}: RouteType {kind!r} is not a number")
    hop = str(raw.get("NextHop") or "")
    if kind == NEXTHOP:  # (libnetwork took any other number as a connected route)
        if not hop:
            raise bad("Join", f"static route to {dest} of RouteType 0 (next hop) has no "
                              "NextHop")
        try:
            hop_ip = ipaddress.ip_address(hop)
        except ValueError:
            raise bad("Join", f"failed to parse nexthop IP {hop}") from None
        if hop_ip.version != net.version:
            raise bad("Join", f"static route to {dest}: NextHop {hop} is of another family")
        return Route(str(net), NEXTHOP, str(hop_ip))
    return Route(str(net), CONNECTED)


def external(nid: str, eid: str, options: dict[str, Any]) -> dict[str, Any]:
    """``ProgramExternalConnectivity``: the sandbox's labels (its ports) as options."""
    return {"NetworkID": nid, "EndpointID": eid, "Options": options}


def discovery(address: str, self_: bool) -> dict[str, Any]:
    """``DiscoverNew``/``DiscoverDelete`` of a node (NodeDiscoveryData: Go's field names)."""
    return {"DiscoveryType": NODE_DISCOVERY, "DiscoveryData": {"Address": address,
                                                              "Self": self_}}
