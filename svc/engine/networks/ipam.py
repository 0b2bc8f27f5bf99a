"""A network's record and its addresses: what ``NetworkService`` keeps per network and per
container endpoint, and the IPAM checks (``--bip``, a new network's subnet, gateway and range,
a container's IPv4 and IPv6 address) with dockerd's messages: 400 for a bad value, 409 for an
overlap or an exhausted pool."""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from svc.engine.networks.held import Held, Plugged, PoolInfo
from svc.errors import Conflict, InvalidParameter
from svc.network import bridge as br

# dockerd's default address pools: 172.17-31.0.0/16 (172.17 is the default bridge's) and
# 192.168.0.0/16 in /20s
BUILTIN_DRIVERS = ("bridge", "host", "null", "overlay")
AUTO_POOL = [ipaddress.IPv4Network(f"172.{n}.0.0/16") for n in range(18, 32)] + \
    list(ipaddress.IPv4Network("192.168.0.0/16").subnets(new_prefix=20))


@dataclass
class EndpointInfo:
    """A container's place on a network."""

    container: str  # its name, with the leading /
    endpoint_id: str
    endpoint: br.Endpoint
    aliases: list[str] = field(default_factory=list)
    attached: bool = False
    # endpoint links (``target:alias``): names only this container resolves on the network
    links: list[str] = field(default_factory=list)
    host: str = ""  # on a global network: the address of the host it lives on, if not this
    hidden: bool = False  # a container's way out of an overlay (docker_gwbridge): not shown
    default_route: bool = False  # it gives the container its default route
    plugged: Plugged | None = None  # on a network whose driver or IPAM is a plugin


@dataclass
class Network:
    id: str
    name: str
    driver: str
    subnet: str = ""
    gateway: str = ""
    ip_range: str = ""
    bridge: str = ""
    internal: bool = False
    builtin: bool = False
    subnet6: str = ""  # with EnableIPv6
    gateway6: str = ""
    options: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    ipam_options: dict[str, str] = field(default_factory=dict)
    aux: dict[str, str] = field(default_factory=dict)  # AuxiliaryAddresses: never given out
    # an IPv6 pool declared without EnableIPv6: shown, not used (as dockerd)
    declared6: dict[str, str] = field(default_factory=dict)
    # the IPv4 pool as the create gave it (Subnet, IPRange, Gateway; empty: none given), which
    # inspect shows as the engines did; without one it shows the pool chosen and its gateway
    configured: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, EndpointInfo] = field(default_factory=dict)  # by container id
    scope: str = "local"  # global: an overlay network in the cluster store
    vni: int = 0  # its VXLAN id
    # plugins: the IPAM's name ("" for the built-in one), its address space and pools; the
    # driver plugin's scope; what the plugins may hold per endpoint (by endpoint id)
    ipam_driver: str = ""
    address_space: str = ""
    pool4: PoolInfo | None = None
    pool6: PoolInfo | None = None
    plugin_scope: str = ""
    held: dict[str, Held] = field(default_factory=dict)
    removing: bool = False  # a removal is under way (its plugin calls)

    @property
    def plugged(self) -> bool:
        """Whether the network's driver is a plugin."""
        return self.driver not in BUILTIN_DRIVERS

    @property
    def with_plugins(self) -> bool:
        """Whether its driver or its IPAM is a plugin (its endpoints are recorded)."""
        return self.plugged or bool(self.ipam_driver)

    def record(self) -> dict[str, Any]:
        out = {"Name": self.name, "Id": self.id, "Driver": self.driver,
               "Subnet": self.subnet, "Gateway": self.gateway, "IPRange": self.ip_range,
               "Bridge": self.bridge, "Internal": self.internal, "Builtin": self.builtin,
               "Subnet6": self.subnet6, "Gateway6": self.gateway6,
               "IPAMOptions": self.ipam_options, "Aux": self.aux, "Declared6": self.declared6,
               "Configured": self.configured, "Options": self.options, "Labels": self.labels}
        if self.with_plugins:
            out.update({"IPAMDriver": self.ipam_driver, "AddressSpace": self.address_space,
                        "Pool4": self.pool4.record() if self.pool4 else None,
                        "Pool6": self.pool6.record() if self.pool6 else None,
                        "PluginScope": self.plugin_scope,
                        "Endpoints": {eid: h.record() for eid, h in self.held.items()}})
        return out

    @classmethod
    def from_record(cls, oid: str, r: dict[str, Any]) -> Network:
        """A user network from its record (``record``; keys an older svc left out default)."""
        return cls(
            oid, str(r["Name"]), str(r.get("Driver") or "bridge"),
            subnet=str(r.get("Subnet") or ""), gateway=str(r.get("Gateway") or ""),
            ip_range=str(r.get("IPRange") or ""), bridge=str(r.get("Bridge") or ""),
            internal=bool(r.get("Internal")), options=dict(r.get("Options") or {}),
            labels=dict(r.get("Labels") or {}), subnet6=str(r.get("Subnet6") or ""),
            gateway6=str(r.get("Gateway6") or ""),
            ipam_options=dict(r.get("IPAMOptions") or {}),
            aux=dict(r.get("Aux") or {}), declared6=dict(r.get("Declared6") or {}),
            configured=dict(r.get("Configured") or {}),
            ipam_driver=str(r.get("IPAMDriver") or ""),
            address_space=str(r.get("AddressSpace") or ""),
            pool4=PoolInfo.from_record(r.get("Pool4")),
            pool6=PoolInfo.from_record(r.get("Pool6")),
            plugin_scope=str(r.get("PluginScope") or ""),
            held={str(k): Held.from_record(v) for k, v in (r.get("Endpoints") or {}).items()})

    @property
    def prefixlen(self) -> int:
        return ipaddress.IPv4Network(self.subnet).prefixlen

    @property
    def prefixlen6(self) -> int:
        return ipaddress.IPv6Network(self.subnet6).prefixlen if self.subnet6 else 0


@dataclass(frozen=True)
class CreateSpec:
    """A network create as the API gave it (``driver`` and ``ipam_driver``: "" for the
    built-in ones)."""

    name: str
    driver: str = ""
    ipam_driver: str = ""
    subnet: str = ""
    ip_range: str = ""
    gateway: str = ""
    subnet6: str = ""
    gateway6: str = ""
    aux: dict[str, str] | None = None
    internal: bool = False
    enable_ipv6: bool = False
    options: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    ipam_options: dict[str, str] | None = None
    check_duplicate: bool = True

    def __post_init__(self) -> None:
        if self.ipam_driver == "default":
            object.__setattr__(self, "ipam_driver", "")

    @property
    def configured(self) -> dict[str, str]:
        """The IPv4 pool as asked for (shown by inspect as asked)."""
        return {k: v for k, v in (("Subnet", self.subnet), ("IPRange", self.ip_range),
                                  ("Gateway", self.gateway)) if v and self.subnet}


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


def pick_address6(net: Network, static: str) -> str:
    """The container's IPv6 address on ``net``: ``static``, checked, or the lowest free."""
    subnet = ipaddress.IPv6Network(net.subnet6)
    taken = {e.endpoint.address6 for e in net.endpoints.values()} | {net.gateway6} | \
        {a for h in net.held.values() for a in h.reserved}
    if static:
        try:
            ip = ipaddress.IPv6Address(static)
        except ValueError:
            raise InvalidParameter(f"invalid IPv6Address {static!r}") from None
        if ip not in subnet:
            raise InvalidParameter(f"invalid address {static}: not in {subnet} of network "
                                   f"{net.name}")
        if str(ip) in taken:
            raise Conflict(f"Address already in use: {static} on network {net.name}")
        return str(ip)
    for i, host in enumerate(subnet.hosts()):
        if str(host) not in taken:
            return str(host)
        if i > 65536:
            break
    raise Conflict(f"no available IPv6 addresses on network {net.name} ({subnet})")


def check_aux(aux: dict[str, str], subnet: str) -> dict[str, str]:
    """AuxiliaryAddresses: each an IPv4 address inside the network's subnet (400 if not)."""
    net = ipaddress.IPv4Network(subnet)
    for name, address in aux.items():
        try:
            ok = ipaddress.IPv4Address(address) in net
        except ValueError:
            ok = False
        if not ok:
            raise InvalidParameter(f"invalid auxiliary address {name}={address!r}: not an "
                                   f"address of {net}")
    return dict(aux)


def ula_subnet(taken: list[ipaddress.IPv6Network]) -> str:
    """A unique local /64 (RFC 4193: ``fd`` and a random 40-bit global id) for a network
    created with EnableIPv6 and no IPv6 pool, as later engines allocate one."""
    while True:
        prefix = (0xFD << 120) | (secrets.randbits(40) << 80)
        net = ipaddress.IPv6Network((prefix, 64))
        if not any(net.overlaps(t) for t in taken):
            return str(net)


def plan_ipam6(subnet: str, gateway: str,
                taken: list[ipaddress.IPv6Network]) -> tuple[str, str]:
    """(subnet, gateway) of a new network's IPv6 side ("" when it has none), checked."""
    if not subnet:
        return "", ""
    try:
        net = ipaddress.IPv6Network(subnet, strict=False)
        gw = ipaddress.IPv6Address(gateway) if gateway else next(net.hosts())
    except (ValueError, StopIteration):
        raise InvalidParameter(f"invalid IPv6 subnet {subnet!r} or gateway {gateway!r}") \
            from None
    if net.prefixlen > 126 or gw not in net:
        raise InvalidParameter(f"invalid IPv6 subnet {net} (at most /126) or gateway {gw}")
    for other in taken:
        if net.overlaps(other):
            raise Conflict(f"Pool overlaps with other one on this address space: {net} "
                           f"overlaps {other}")
    return str(net), str(gw)


def pick_address(net: Network, static: str, *, check: bool = True) -> str:
    """The container's IPv4 address on ``net`` with the built-in IPAM: ``static`` (checked
    to be in the subnet and free, if ``check``) or the lowest free one."""
    taken = {e.endpoint.address for e in net.endpoints.values()} | {net.gateway} | \
        set(net.aux.values()) | {a for h in net.held.values() for a in h.reserved}
    if not static:
        return free_address(net, taken)
    if check:
        if ipaddress.IPv4Address(static) not in ipaddress.IPv4Network(net.subnet):
            raise InvalidParameter(f"invalid address {static}: not in {net.subnet} of "
                                   f"network {net.name}")
        if static in taken:
            raise Conflict(f"Address already in use: {static} on network {net.name}")
    return static


def free_address(net: Network, taken: set[str]) -> str:
    pool = ipaddress.IPv4Network(net.ip_range or net.subnet)
    for host in pool.hosts():
        if str(host) not in taken:
            return str(host)
    raise Conflict(f"no available IPv4 addresses on network {net.name} ({pool})")


def plan_ipam(subnet: str, ip_range: str, gateway: str,
              taken: list[ipaddress.IPv4Network], *,
              defaults: Iterable[ipaddress.IPv4Network] = AUTO_POOL,
              defaults_name: str = "the defaults") -> tuple[str, str, str]:
    """(subnet, gateway, ip range) of a new network, checked; without ``subnet`` the first of
    ``defaults`` that overlaps nothing ``taken``; 400 for a bad CIDR, 409 for an overlap or
    an exhausted pool."""
    if subnet:
        try:
            net = ipaddress.IPv4Network(subnet, strict=False)
        except ValueError:
            raise InvalidParameter(f"invalid subnet {subnet!r}: an IPv4 CIDR such as "
                                   "10.10.0.0/24") from None
        if net.prefixlen > 30:
            raise InvalidParameter(f"invalid subnet {subnet}: /30 or larger")
        for other in taken:
            if net.overlaps(other):
                raise Conflict(f"Pool overlaps with other one on this address space: {net} "
                               f"overlaps {other}")
    else:
        free = next((p for p in defaults if not any(p.overlaps(t) for t in taken)), None)
        if free is None:
            raise Conflict("could not find an available, non-overlapping IPv4 address pool "
                           f"among {defaults_name} to assign to the network")
        net = free
    try:
        rng = ipaddress.IPv4Network(ip_range, strict=False) if ip_range else None
        gw = ipaddress.IPv4Address(gateway) if gateway else next(net.hosts())
    except ValueError:
        raise InvalidParameter(f"invalid IPRange {ip_range!r} or Gateway {gateway!r}") from None
    if rng is not None and not rng.subnet_of(net):
        raise InvalidParameter(f"invalid IPRange {rng}: not inside the subnet {net}")
    if gw not in net or gw in (net.network_address, net.broadcast_address):
        raise InvalidParameter(f"invalid Gateway {gw}: not a host address of {net}")
    return str(net), str(gw), str(rng) if rng else ""


NAME_MAX = 255
BRIDGE_NAME = "com.docker.network.bridge.name"
IFNAME_RE = re.compile(r"^[a-zA-Z0-9_.-]{1,15}$")


def check_network_name(name: str) -> None:
    """As the engines of this generation: any name but a blank one (``test 01``, ``a/b`` and
    ``c:d`` are names; the docker SDK's own suite makes the first). svc also bounds its length
    and refuses control characters, which no client could show or type."""
    if not name:
        raise InvalidParameter("Name is required: the network's name")
    shown = name[:64] + ("..." if len(name) > 64 else "")
    if len(name) > NAME_MAX:
        raise InvalidParameter(f"invalid network name {shown!r}: longer than {NAME_MAX} "
                               "characters")
    if not name.isprintable():
        raise InvalidParameter(f"invalid network name {shown!r}: it holds a control character")


def bridge_name_option(options: dict[str, str] | None) -> str:
    """The interface name the ``com.docker.network.bridge.name`` option asks for ("" if
    none), checked as an interface name."""
    name = str((options or {}).get(BRIDGE_NAME) or "")
    if name and (not IFNAME_RE.match(name) or name in (".", "..")):
        raise InvalidParameter(f"invalid {BRIDGE_NAME} {name[:32]!r}: an interface name of 1 "
                               "to 15 characters from [a-zA-Z0-9_.-]")
    return name
