"""Linux bridges and veth pairs through netlink (pyroute2), and the iptables rules that let a
bridge's containers reach out (masquerade) and be forwarded.

Everything blocks (netlink round trips, iptables runs); the engine calls it from worker
threads. A container's end of a veth pair lives in the container's network namespace, so it
disappears with the namespace when the container's last process exits: the host end goes with
it, and a daemon crash leaves no veth behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from svc.network.netns import in_netns

IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
IFNAME_MAX = 15


class NetworkError(Exception):
    """A netlink or iptables operation failed; the message names what and why."""


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


def mac_for(address: str) -> str:
    """dockerd's MAC for an IPv4 address: 02:42 and the address's four bytes."""
    octets = ipaddress.IPv4Address(address).packed
    return "02:42:" + ":".join(f"{b:02x}" for b in octets)


IFA_F_NODAD = 0x02  # an IPv6 address usable at once, without duplicate address detection


def ensure_bridge(name: str, gateway: str, prefixlen: int, gateway6: str = "",
                  prefixlen6: int = 0) -> None:
    """The bridge ``name`` with ``gateway/prefixlen`` (and ``gateway6/prefixlen6``) on it,
    up; made if missing."""
    try:
        with IPRoute() as ip:
            found = ip.link_lookup(ifname=name)
            if not found:
                ip.link("add", ifname=name, kind="bridge")
                found = ip.link_lookup(ifname=name)
            idx = found[0]
            have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                    for a in ip.get_addr(index=idx, family=2)}
            if (gateway, prefixlen) not in have:
                ip.addr("add", index=idx, address=gateway, prefixlen=prefixlen)
            if gateway6:
                have6 = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                         for a in ip.get_addr(index=idx, family=10)}
                if (gateway6, prefixlen6) not in have6:
                    ip.addr("add", index=idx, address=gateway6, prefixlen=prefixlen6,
                            family=10, flags=IFA_F_NODAD)
            ip.link("set", index=idx, state="up")
    except NetlinkError as exc:
        raise NetworkError(f"setting up the bridge {name} ({gateway}/{prefixlen}) failed: "
                           f"{exc}") from exc


def delete_bridge(name: str) -> None:
    with IPRoute() as ip, contextlib.suppress(NetlinkError):
        for idx in ip.link_lookup(ifname=name):
            ip.link("del", index=idx)


def attach(bridge: str, pid: int, ep: Endpoint, default_route: bool = True) -> None:
    """A veth pair: ``ep.host_if`` on ``bridge``, its peer moved into the network namespace
    of ``pid`` as ``ep.ifname`` with the address and MAC of ``ep`` (and the default route
    through its gateway, for a container's first network).

    On failure the host end is deleted (taking its peer along) and NetworkError is raised.
    """
    peer = ep.host_if[:-1] + "p"
    try:
        with IPRoute() as ip:
            br = ip.link_lookup(ifname=bridge)
            if not br:
                raise NetworkError(f"the bridge {bridge} does not exist")
            ip.link("add", ifname=ep.host_if, kind="veth", peer={"ifname": peer})
            host = ip.link_lookup(ifname=ep.host_if)[0]
            inner = ip.link_lookup(ifname=peer)[0]
            ip.link("set", index=host, master=br[0], state="up")
            ip.link("set", index=inner, net_ns_pid=pid)
        in_netns(pid, lambda: _configure_inside(peer, ep, default_route))
    except (NetlinkError, OSError, IndexError) as exc:
        detach(ep.host_if)
        raise NetworkError(f"connecting the container (pid {pid}) to {bridge} failed: "
                           f"{exc}") from exc
    except NetworkError:
        detach(ep.host_if)
        raise


def _configure_inside(peer: str, ep: Endpoint, default_route: bool) -> None:
    """In the container's namespace: name, MAC and addresses of its end, lo up, routes."""
    with IPRoute() as ns:
        idx = ns.link_lookup(ifname=peer)[0]
        ns.link("set", index=idx, ifname=ep.ifname, address=ep.mac)
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


# -- iptables ---------------------------------------------------------------------------------


def nat_rules(bridge: str, subnet: str) -> list[list[str]]:
    """dockerd's rules for a bridge: masquerade what leaves the host from its subnet, forward
    to and from it."""
    return [
        ["-t", "nat", "POSTROUTING", "-s", subnet, "!", "-o", bridge, "-j", "MASQUERADE"],
        ["-t", "filter", "FORWARD", "-o", bridge, "-m", "conntrack", "--ctstate",
         "RELATED,ESTABLISHED", "-j", "ACCEPT"],
        ["-t", "filter", "FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "ACCEPT"],
        ["-t", "filter", "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"],
    ]


def dnat_rules(bridge: str, proto: str, host_ip: str, host_port: int, ip: str,
               port: int) -> list[list[str]]:
    """dockerd's rules for a published port beside the userland proxy: traffic to the host
    port from elsewhere (and from this host to a non-loopback address of its own) is DNATed
    straight to the container, and accepted on its way into the bridge. Loopback traffic
    goes through the proxy, so a port bound on a loopback address has no rules."""
    if host_ip and ipaddress.ip_address(host_ip).is_loopback:
        return []
    anywhere = not host_ip or host_ip in ("0.0.0.0", "::")
    dest = ["-m", "addrtype", "--dst-type", "LOCAL"] if anywhere else ["-d", host_ip]
    local = ["!", "-d", "127.0.0.0/8"] if anywhere else []
    to = ["-j", "DNAT", "--to-destination", f"{ip}:{port}"]
    match = ["-p", proto, "--dport", str(host_port)]
    return [
        ["-t", "nat", "PREROUTING", *dest, "!", "-i", bridge, *match, *to],
        ["-t", "nat", "OUTPUT", *dest, *local, *match, *to],
        ["-t", "filter", "FORWARD", "-d", ip, "!", "-i", bridge, "-o", bridge, "-p", proto,
         "--dport", str(port), "-j", "ACCEPT"],
    ]


def remove_stale_dnat(bridges: list[str], subnets: list[str]) -> int:
    """Delete published-port rules left by a crash: DNATs and per-port ACCEPTs that name one
    of ``bridges`` or send to an address of ``subnets``. Returns how many went."""
    nets = [ipaddress.ip_network(n) for n in subnets if n]
    removed = 0
    for table, chain in (("nat", "PREROUTING"), ("nat", "OUTPUT"), ("filter", "FORWARD")):
        listing = subprocess.run(["iptables", "-w", "-t", table, "-S", chain],
                                 capture_output=True, text=True, check=False).stdout
        for line in listing.splitlines():
            words = line.split()
            if words[:2] != ["-A", chain]:
                continue
            if chain == "FORWARD":
                ours = "--dport" in words and "-d" in words and any(
                    w in bridges for w in words) and words[-1] == "ACCEPT"
            else:
                target = words[words.index("--to-destination") + 1] \
                    if "--to-destination" in words else ""
                ours = "DNAT" in words and (any(w in bridges for w in words) or _in(
                    target.rsplit(":", 1)[0], nets))
            if ours and _iptables("-D", ["-t", table, chain, *words[2:]]).returncode == 0:
                removed += 1
    return removed


def _in(address: str, nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in n for n in nets)


def internal_rules(bridge: str) -> list[list[str]]:
    """An internal network: nothing in or out but between its own containers."""
    return [
        ["-t", "filter", "FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "DROP"],
        ["-t", "filter", "FORWARD", "!", "-i", bridge, "-o", bridge, "-j", "DROP"],
    ]


def isolation_rules(bridges: list[str]) -> list[list[str]]:
    """Drop what one of our bridges would forward to another (inserted first, before the
    per-network ACCEPTs)."""
    return [["-t", "filter", "FORWARD", "-i", a, "-o", b, "-j", "DROP"]
            for a in bridges for b in bridges if a != b]


def host_subnets() -> list[ipaddress.IPv4Network]:
    """The IPv4 subnets of the host's interfaces (a new network must not overlap them)."""
    with IPRoute() as ip:
        return [ipaddress.IPv4Network(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}",
                                      strict=False) for a in ip.get_addr(family=2)]


def _iptables(action: str, rule: list[str]) -> subprocess.CompletedProcess[str]:
    table, chain, spec = rule[:2], rule[2], rule[3:]
    where = [chain, "1"] if action == "-I" else [chain]
    return subprocess.run(["iptables", "-w", *table, action, *where, *spec],
                          capture_output=True, text=True, check=False)


def ensure_rules(rules: list[list[str]]) -> None:
    """Add each rule unless it is there already: DROPs first in their chain, others last."""
    for rule in rules:
        if _iptables("-C", rule).returncode != 0:
            r = _iptables("-I" if rule[-1] == "DROP" else "-A", rule)
            if r.returncode != 0:
                raise NetworkError(f"iptables {' '.join(rule)}: {r.stderr.strip()}")


def remove_rules(rules: list[list[str]]) -> None:
    for rule in rules:
        while _iptables("-C", rule).returncode == 0:
            if _iptables("-D", rule).returncode != 0:
                break


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
