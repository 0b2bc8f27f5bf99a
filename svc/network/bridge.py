"""Linux bridges and veth pairs through netlink (pyroute2), and IPv4 forwarding. (The iptables
rules are built in ``netrules`` and applied by ``firewall``.)

Everything blocks (netlink round trips, iptables runs); the engine calls it from worker
threads. A container's end of a veth pair lives in the container's network namespace, so it
disappears with the namespace when the container's last process exits: the host end goes with
it, and a daemon crash leaves no veth behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from svc.network import addr_dump
from svc.network.netns import in_netns

IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
IFNAME_MAX = 15


class NetworkError(Exception):
    """A netlink or iptables operation failed; the message names what and why."""


class InterfaceTaken(NetworkError):
    """An interface of the wanted name exists and is not a bridge."""


@dataclass(frozen=True)
class Endpoint:
    """A container's interface on a bridge."""

    host_if: str
    address: str
    prefixlen: int
    gateway: str
    mac: str
    ifname: str = "eth0"  # its name in the container
    address6: str = ""  # an IPv6 address too, on a network with EnableIPv6
    prefixlen6: int = 0
    gateway6: str = ""


def host_veth_name(ifname: str, cid: str) -> str:
    """The host end of container ``cid``'s veth for its interface ``ifname`` (``eth3``):
    ``s<n><id>h`` within the kernel's 15 characters, the id shortened for each digit of
    ``n`` beyond the first, so that eth1 and eth11 never share a name."""
    number = ifname[3:] if ifname.startswith("eth") and ifname[3:].isdigit() else ifname[-1]
    return f"s{number}{cid[:13 - len(number)]}h"


def mac_for(address: str) -> str:
    """dockerd's MAC for an IPv4 address: 02:42 and the address's four bytes."""
    octets = ipaddress.IPv4Address(address).packed
    return "02:42:" + ":".join(f"{b:02x}" for b in octets)


def parse_mac(text: str) -> str:
    """A MAC address as Go's net.ParseMAC takes a 6-byte one (``:`` or ``-`` separated, or
    three dot-separated groups of four hex digits), in the kernel's lower-case form.

    Raises:
        ValueError: not such an address.
    """
    t = text.strip().lower()
    if "." in t:
        groups = t.split(".")
        if len(groups) != 3 or any(len(g) != 4 for g in groups):
            raise ValueError(text)
        t = "".join(groups)
        parts = [t[i:i + 2] for i in range(0, 12, 2)]
    else:
        parts = t.replace("-", ":").split(":")
    if len(parts) != 6 or any(len(p) != 2 for p in parts):
        raise ValueError(text)
    int("".join(parts), 16)
    return ":".join(parts)


IFA_F_NODAD = 0x02  # an IPv6 address usable at once, without duplicate address detection


def ensure_bridge(name: str, gateway: str, prefixlen: int, gateway6: str = "",
                  prefixlen6: int = 0, alias: str = "", staging: str = "") -> None:
    """The bridge ``name`` with ``gateway/prefixlen`` (and ``gateway6/prefixlen6``) on it,
    up; made if missing. ``alias`` (the interface's ifalias) marks it as the daemon's, so a
    start can find the bridges a crash left (``owned_bridges``).

    The kernel takes no alias in the message that creates a link, so a new bridge is made as
    ``staging`` (a name the daemon recognises as its own), given its alias and only then
    renamed: a crash at any point leaves a link that ``owned_bridges`` or the staging name
    identifies, never an anonymous one.

    Raises:
        NetworkError: ``name`` is another kind of interface, or netlink refused.
    """
    try:
        with IPRoute() as ip:
            found = ip.link_lookup(ifname=name)
            fresh = not found  # (no address to look for: the dump of them all is skipped)
            if fresh:
                found = _create_bridge(ip, name, alias, staging)
            elif _kind(ip, found[0]) != "bridge":
                raise InterfaceTaken(f"the interface {name} exists and is not a bridge")
            idx = found[0]
            if alias and not (fresh and staging):  # (a staged one got it before its name)
                ip.link("set", index=idx, ifalias=alias)
            _ensure_addr(ip, idx, gateway, prefixlen, 2, fresh)
            if gateway6:
                _ensure_addr(ip, idx, gateway6, prefixlen6, 10, fresh)
            ip.link("set", index=idx, state="up")
    except NetlinkError as exc:
        raise NetworkError(f"setting up the bridge {name} ({gateway}/{prefixlen}) failed: "
                           f"{exc}") from exc


def _create_bridge(ip: IPRoute, name: str, alias: str, staging: str) -> list[int]:
    if not (alias and staging):
        ip.link("add", ifname=name, kind="bridge")
        return list(ip.link_lookup(ifname=name))
    for old in ip.link_lookup(ifname=staging):  # a crash's half-made bridge
        ip.link("del", index=old)
    ip.link("add", ifname=staging, kind="bridge")
    idx = ip.link_lookup(ifname=staging)[0]
    try:
        ip.link("set", index=idx, ifalias=alias)
        ip.link("set", index=idx, ifname=name)
    except NetlinkError:
        with contextlib.suppress(NetlinkError):
            ip.link("del", index=idx)
        raise
    return [idx]


def delete_links_named(prefix: str) -> list[str]:
    """Delete every link whose name starts with ``prefix`` (half-made bridges); the names."""
    removed = []
    with IPRoute() as ip:
        for link in ip.get_links():
            ifname = str(link.get_attr("IFLA_IFNAME"))
            if ifname.startswith(prefix):
                with contextlib.suppress(NetlinkError):
                    ip.link("del", index=link["index"])
                    removed.append(ifname)
    return removed


def _kind(ip: IPRoute, idx: int) -> str:
    info = ip.get_links(idx)[0].get_attr("IFLA_LINKINFO")
    return str(info.get_attr("IFLA_INFO_KIND")) if info is not None else ""


def _ensure_addr(ip: IPRoute, idx: int, address: str, prefixlen: int, family: int,
                 fresh: bool = False) -> None:
    """``address/prefixlen`` on the link ``idx``; a ``fresh`` link (just made) has none yet.
    (The kernel answers an address query with every link's: the dump grows with them.)"""
    have = set() if fresh else {(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                                for a in ip.get_addr(index=idx, family=family)}
    if (address, prefixlen) not in have:
        extra = {"family": 10, "flags": IFA_F_NODAD} if family == 10 else {}
        ip.addr("add", index=idx, address=address, prefixlen=prefixlen, **extra)


def owned_bridges(alias_prefix: str) -> dict[str, str]:
    """The bridges whose ifalias starts with ``alias_prefix``: name -> alias."""
    with IPRoute() as ip:
        return {str(link.get_attr("IFLA_IFNAME")): str(link.get_attr("IFLA_IFALIAS"))
                for link in ip.get_links()
                if str(link.get_attr("IFLA_IFALIAS") or "").startswith(alias_prefix)}


def delete_bridge(name: str) -> None:
    with IPRoute() as ip, contextlib.suppress(NetlinkError):
        for idx in ip.link_lookup(ifname=name):
            ip.link("del", index=idx)


def attach(bridge: str, pid: int, ep: Endpoint, default_route: bool = True) -> None:
    """A veth pair: ``ep.host_if`` on ``bridge``, its peer made right in the network namespace
    of ``pid`` as ``ep.ifname`` with the MAC of ``ep``, then given its addresses (and the
    default route through its gateway, for a container's first network).

    The peer is created in the namespace rather than moved there: moving a link between
    namespaces waits for an RCU grace period in the kernel (some 18 ms here), creating it
    there does not, and it needs no rename either; the host end is made on the bridge and up
    in the same request.

    On failure the host end is deleted (taking its peer along) and NetworkError is raised.
    """
    try:
        with IPRoute() as ip:
            br = ip.link_lookup(ifname=bridge)
            if not br:
                raise NetworkError(f"the bridge {bridge} does not exist")
            ip.link("add", ifname=ep.host_if, kind="veth", master=br[0], state="up",
                    peer={"ifname": ep.ifname, "address": ep.mac, "net_ns_pid": pid})
        in_netns(pid, lambda: configure_inside(ep, default_route))
    except (NetlinkError, OSError, IndexError) as exc:
        detach(ep.host_if)
        raise NetworkError(f"connecting the container (pid {pid}) to {bridge} failed: "
                           f"{exc}") from exc
    except NetworkError:
        detach(ep.host_if)
        raise


def configure_inside(ep: Endpoint, default_route: bool) -> None:
    """In the container's namespace: addresses of its end, it and lo up, routes."""
    with IPRoute() as ns:
        idx = ns.link_lookup(ifname=ep.ifname)[0]
        ns.addr("add", index=idx, address=ep.address, prefixlen=ep.prefixlen)
        if ep.address6:
            ns.addr("add", index=idx, address=ep.address6, prefixlen=ep.prefixlen6,
                    family=10, flags=IFA_F_NODAD)
        ns.link("set", index=idx, state="up")
        for lo in ns.link_lookup(ifname="lo"):
            ns.link("set", index=lo, state="up")
        if default_route:
            ns.route("add", dst="default", gateway=ep.gateway)
            if ep.gateway6:
                ns.route("add", dst="::/0", gateway=ep.gateway6, family=10)


def detach(host_if: str) -> None:
    """Delete a veth pair by its host end (gone already when the namespace died)."""
    with IPRoute() as ip, contextlib.suppress(NetlinkError):
        for idx in ip.link_lookup(ifname=host_if):
            ip.link("del", index=idx)


def links_on(bridge: str) -> list[str]:
    """The names of the interfaces enslaved to ``bridge``."""
    with IPRoute() as ip:
        br = ip.link_lookup(ifname=bridge)
        if not br:
            return []
        return [str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()
                if link.get_attr("IFLA_MASTER") == br[0]]


def remove_stray_veths(bridges: Iterable[str]) -> list[str]:
    """Delete the veths on ``bridges`` whose peer never left this namespace (an attach cut off
    by a crash between creating the pair and moving its end into the container); the names.

    A veth whose peer is in another namespace belongs to a process that still lives (the
    pair dies with the namespace), so it is kept. One dump of the links serves every bridge.
    """
    removed: list[str] = []
    with IPRoute() as ip:
        links = ip.get_links()
        wanted = set(bridges)
        masters = {link["index"] for link in links
                   if link.get_attr("IFLA_IFNAME") in wanted}
        for link in links:
            if link.get_attr("IFLA_MASTER") not in masters or \
                    link.get_attr("IFLA_LINK_NETNSID") is not None:
                continue
            info = link.get_attr("IFLA_LINKINFO")
            if info is None or info.get_attr("IFLA_INFO_KIND") != "veth":
                continue
            with contextlib.suppress(NetlinkError):
                ip.link("del", index=link["index"])
                removed.append(str(link.get_attr("IFLA_IFNAME")))
    return removed


def host_subnets() -> list[ipaddress.IPv4Network]:
    """The IPv4 subnets of the host's interfaces (a new network must not overlap them).

    One RTM_GETADDR dump read with a bare netlink socket: pyroute2 decodes every attribute
    of every address, which cost 8 ms with 100 bridges on every network create; only the
    prefix length and IFA_ADDRESS are needed here.
    """
    out = []
    for prefixlen, addr in addr_dump.ipv4_addresses():
        out.append(ipaddress.IPv4Network((addr, prefixlen), strict=False))
    return out


def enable_forwarding() -> bool:
    """Turn IPv4 forwarding on; whether it was off (so that the caller may turn it back)."""
    try:
        was_on = IP_FORWARD.read_text().strip() == "1"
        if not was_on:
            IP_FORWARD.write_text("1\n")
        return not was_on
    except OSError as exc:
        raise NetworkError(f"enabling IPv4 forwarding failed: {exc}") from exc


def disable_forwarding() -> None:
    with contextlib.suppress(OSError):
        IP_FORWARD.write_text("0\n")
