"""What a running container's network looks like, read back from the kernel: the daemon that
takes back a container it did not start (live restore) learns its interfaces there, not from a
record that a live connect or disconnect may have made stale.

Blocking (netlink round trips in the host's and the container's namespaces); call from a
worker thread.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from svc.network.bridge import host_veth_name
from svc.network.netns import in_netns


@dataclass(frozen=True)
class FoundInterface:
    """One of a container's interfaces on a bridge: its name and MAC inside, its addresses,
    the bridge its host end is on, and whether the default route goes through it."""

    ifname: str
    bridge: str
    mac: str
    address: str = ""
    prefixlen: int = 0
    address6: str = ""
    prefixlen6: int = 0
    default_route: bool = False


def container_interfaces(pid: int, cid: str) -> list[FoundInterface]:
    """The interfaces of container ``cid`` (running as ``pid``) whose host end (named as
    ``bridge.host_veth_name`` names it) is on a bridge.

    Raises:
        OSError: the container's namespace cannot be entered (it is gone).
    """
    inside = in_netns(pid, _inside)
    out = []
    with IPRoute() as ip:
        names = {link["index"]: str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()}
        for ifname, (mac, v4, v6, default) in sorted(inside.items()):
            found = ip.link_lookup(ifname=host_veth_name(ifname, cid))
            if not found:
                continue
            master = ip.get_links(found[0])[0].get_attr("IFLA_MASTER")
            if master is None or master not in names:
                continue
            out.append(FoundInterface(ifname, names[master], mac, *v4, *v6, default))
    return out


def _inside() -> dict[str, tuple[str, tuple[str, int], tuple[str, int], bool]]:
    """In the container's namespace: per interface (not lo), its MAC, first IPv4 and global
    IPv6 address, and whether the default IPv4 route leaves through it."""
    with IPRoute() as ns:
        links = {link["index"]: (str(link.get_attr("IFLA_IFNAME")),
                                 str(link.get_attr("IFLA_ADDRESS") or ""))
                 for link in ns.get_links()}
        v4: dict[int, tuple[str, int]] = {}
        v6: dict[int, tuple[str, int]] = {}
        for addr in ns.get_addr():
            idx, family = addr["index"], addr["family"]
            value = (str(addr.get_attr("IFA_ADDRESS")), int(addr["prefixlen"]))
            if family == socket.AF_INET:
                v4.setdefault(idx, value)
            elif family == socket.AF_INET6 and not value[0].startswith("fe80"):
                v6.setdefault(idx, value)
        default_if = None
        try:
            for route in ns.get_default_routes(family=socket.AF_INET):
                default_if = route.get_attr("RTA_OIF")
        except NetlinkError:
            pass
    return {name: (mac, v4.get(idx, ("", 0)), v6.get(idx, ("", 0)), idx == default_if)
            for idx, (name, mac) in links.items() if name != "lo"}
