"""An overlay network's data plane on this host, through netlink (pyroute2): one network
namespace per overlay network holding a bridge (``br0``, with the network's gateway address)
and a VXLAN device (``vxlan0``) on it, and the containers' veths into that bridge.

The VXLAN device is created in the daemon's own namespace and moved into the overlay's, so
its UDP socket (port 4789) stays on the host's underlay while its traffic is switched inside.
It learns nothing and floods nothing: every remote endpoint is programmed from the cluster
store, a forwarding entry (its MAC behind the VTEP of its host) and a neighbour entry (its
address at that MAC) that the device answers ARP from (``proxy``).

Everything blocks (netlink round trips); the engine calls it from worker threads. A
sandbox's namespace is named after the daemon and the VNI and lives in ``/run/netns``, so a
restarted daemon finds it again; ``remove_sandbox`` deletes it with everything in it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from svc.network.bridge import Endpoint, NetworkError, configure_inside, detach
from svc.network.netns import (
    NETNS_DIR,
    create_named,
    in_named,
    in_netns,
    named_path,
    remove_named,
)

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
NUD_PERMANENT = 0x80
NTF_SELF = 0x02  # an entry of the VXLAN device itself (its remote), not of the bridge


@dataclass(frozen=True)
class Sandbox:
    """Where an overlay network lives on this host."""

    netns: str
    vni: int
    gateway: str
    prefixlen: int
    mtu: int


def sandbox_name(owner: str, vni: int) -> str:
    """The namespace's name: the daemon (several share a machine in tests) and the VNI."""
    return f"svo-{owner[:8]}-{vni}"


def underlay_mtu(address: str) -> int:
    """The MTU of the interface holding ``address`` (1500 if none is found)."""
    with IPRoute() as ip:
        for msg in ip.get_addr():
            if msg.get_attr("IFA_ADDRESS") == address:
                links = ip.get_links(msg["index"])
                if links:
                    return int(links[0].get_attr("IFLA_MTU") or 1500)
    return 1500


def sandbox_exists(name: str) -> bool:
    return os.path.exists(named_path(name))


def ensure_sandbox(sb: Sandbox, local_ip: str) -> None:
    """The namespace, its bridge and VXLAN device, up (idempotent)."""
    try:
        if not sandbox_exists(sb.netns):
            create_named(sb.netns)
        if not in_named(sb.netns, _has_vxlan):
            _make_vxlan(sb, local_ip)
        in_named(sb.netns, lambda: _wire_sandbox(sb))
    except (NetlinkError, OSError, IndexError) as exc:
        raise NetworkError(f"setting up overlay {sb.vni} ({sb.netns}) failed: {exc}") from exc


def _has_vxlan() -> bool:
    with IPRoute() as ns:
        return bool(ns.link_lookup(ifname="vxlan0"))


def _wire_sandbox(sb: Sandbox) -> None:
    """Inside the sandbox: lo up, the bridge with the gateway address, vxlan0 on it."""
    with IPRoute() as ns:
        for lo in ns.link_lookup(ifname="lo"):
            ns.link("set", index=lo, state="up")
        if not ns.link_lookup(ifname="br0"):
            ns.link("add", ifname="br0", kind="bridge")
        br = ns.link_lookup(ifname="br0")[0]
        if not ns.get_addr(index=br, address=sb.gateway):
            ns.addr("add", index=br, address=sb.gateway, prefixlen=sb.prefixlen)
        ns.link("set", index=br, mtu=sb.mtu, state="up")
        vx = ns.link_lookup(ifname="vxlan0")[0]
        ns.link("set", index=vx, master=br, mtu=sb.mtu, state="up")


def _make_vxlan(sb: Sandbox, local_ip: str) -> None:
    """The VXLAN device, made here and moved into the sandbox, where it is renamed."""
    tmp = f"svx{sb.vni}"[:15]
    fd = os.open(named_path(sb.netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        with IPRoute() as ip:
            for old in ip.link_lookup(ifname=tmp):  # a crash between add and move left it
                ip.link("del", index=old)
            ip.link("add", ifname=tmp, kind="vxlan", vxlan_id=sb.vni, vxlan_port=VXLAN_PORT,
                    vxlan_learning=0, vxlan_proxy=1, vxlan_local=local_ip)
            idx = ip.link_lookup(ifname=tmp)[0]
            ip.link("set", index=idx, net_ns_fd=fd)
    finally:
        os.close(fd)

    def rename() -> None:
        with IPRoute() as ns:
            ns.link("set", index=ns.link_lookup(ifname=tmp)[0], ifname="vxlan0")

    in_named(sb.netns, rename)


def remove_sandbox(name: str) -> None:
    """Delete a sandbox's namespace and everything in it (gone already: nothing to do)."""
    if sandbox_exists(name):
        with contextlib.suppress(OSError):
            remove_named(name)


def list_sandboxes(owner: str) -> list[str]:
    """The sandboxes of this daemon left in /run/netns (at start: what a crash left)."""
    prefix = f"svo-{owner[:8]}-"
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def set_peer(name: str, mac: str, address: str, vtep: str) -> None:
    """A remote endpoint: its MAC behind ``vtep`` and its address at that MAC."""
    def program() -> None:
        with IPRoute() as ns:
            vx = ns.link_lookup(ifname="vxlan0")[0]
            ns.fdb("replace", ifindex=vx, lladdr=mac, dst=vtep, state=NUD_PERMANENT,
                   flags=NTF_SELF)
            ns.neigh("replace", dst=address, lladdr=mac, ifindex=vx, state=NUD_PERMANENT)

    try:
        in_named(name, program)
    except (NetlinkError, OSError, IndexError) as exc:
        raise NetworkError(f"programming the peer {address} ({mac} at {vtep}) on "
                           f"{name} failed: {exc}") from exc


def drop_peer(name: str, mac: str, address: str, vtep: str) -> None:
    """Forget a remote endpoint (entries already gone: nothing to do)."""
    if not sandbox_exists(name):
        return

    def forget() -> None:
        with IPRoute() as ns:
            found = ns.link_lookup(ifname="vxlan0")
            if not found:
                return
            with contextlib.suppress(NetlinkError):
                ns.neigh("del", dst=address, lladdr=mac, ifindex=found[0])
            with contextlib.suppress(NetlinkError):
                ns.fdb("del", ifindex=found[0], lladdr=mac, dst=vtep, flags=NTF_SELF)

    in_named(name, forget)


def attach(sb: Sandbox, pid: int, ep: Endpoint, default_route: bool) -> None:
    """A veth pair: ``ep.host_if`` on the sandbox's bridge, its peer made in the network
    namespace of ``pid`` as ``ep.ifname`` (the overlay's MTU), given its addresses."""
    def veth() -> None:
        with IPRoute() as ns:
            br = ns.link_lookup(ifname="br0")
            if not br:
                raise NetworkError(f"overlay {sb.vni} has no bridge ({sb.netns})")
            ns.link("add", ifname=ep.host_if, kind="veth", master=br[0], state="up",
                    mtu=sb.mtu, peer={"ifname": ep.ifname, "address": ep.mac,
                                      "net_ns_pid": pid, "mtu": sb.mtu})

    try:
        in_named(sb.netns, veth)
        in_netns(pid, lambda: configure_inside(ep, default_route))
    except (NetlinkError, OSError, IndexError) as exc:
        detach_from(sb.netns, ep.host_if)
        raise NetworkError(f"connecting the container (pid {pid}) to overlay {sb.vni} "
                           f"failed: {exc}") from exc
    except NetworkError:
        detach_from(sb.netns, ep.host_if)
        raise


def detach_from(name: str, host_if: str) -> None:
    """Delete a veth pair by its end in sandbox ``name``."""
    if not sandbox_exists(name):
        detach(host_if)
        return

    def delete() -> None:
        with IPRoute() as ns, contextlib.suppress(NetlinkError):
            for idx in ns.link_lookup(ifname=host_if):
                ns.link("del", index=idx)

    in_named(name, delete)


def ports_in_use(name: str) -> int:
    """How many container veths the sandbox's bridge holds (0: it can go)."""
    if not sandbox_exists(name):
        return 0

    def count() -> int:
        with IPRoute() as ns:
            br = ns.link_lookup(ifname="br0")
            vx = ns.link_lookup(ifname="vxlan0")
            if not br:
                return 0
            return sum(1 for link in ns.get_links()
                       if link.get_attr("IFLA_MASTER") == br[0] and link["index"] not in vx)

    return in_named(name, count)

