"""Interfaces a network plugin made, handed over to a container: moved into its network
namespace, renamed, addressed, brought up and routed (libnetwork's ``AddInterface`` and
``AddStaticRoute``); and handed back to the host under the plugin's name when the container
leaves the network while it runs, so that the plugin can delete what it made.

Blocking (netlink round trips); the engine calls these from worker threads. An interface in a
container's namespace dies with the namespace: a container that exits takes it along.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from svc.network.bridge import IFA_F_NODAD, NetworkError
from svc.network.netns import in_netns

RT_SCOPE_LINK = 253


@dataclass(frozen=True)
class Inside:
    """How the interface ``src_name`` is to look in the container."""

    src_name: str
    ifname: str
    mac: str = ""  # "" keeps the MAC the plugin gave it
    address: str = ""  # CIDR
    address6: str = ""
    connected: tuple[str, ...] = ()  # destinations bound to the interface (scope link)
    via: tuple[tuple[str, str], ...] = ()  # (destination, next hop)
    gateway: str = ""  # the default route through it, if set
    gateway6: str = ""


def move_in(pid: int, spec: Inside) -> str:
    """Move ``spec.src_name`` from this namespace into the one of ``pid`` and set it up as
    ``spec`` says; returns its MAC. On failure it is handed back under its own name (or
    deleted if it cannot be), so nothing of it stays in the container.

    Raises:
        NetworkError: the interface is not there, or netlink refused a step (the message
            says which).
    """
    try:
        with IPRoute() as ip:
            found = ip.link_lookup(ifname=spec.src_name) if spec.src_name else [0]
            if not found:
                raise NetworkError(f"failed to add interface {spec.src_name} to sandbox: the "
                                   "plugin's interface does not exist")
            if spec.src_name:
                ip.link("set", index=found[0], state="down")
                ip.link("set", index=found[0], net_ns_pid=pid)
    except NetlinkError as exc:
        raise NetworkError(f"failed to move the interface {spec.src_name} into the "
                           f"container (pid {pid}): {exc}") from exc
    host = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return in_netns(pid, lambda: _configure(spec, host))
    finally:
        os.close(host)


def _configure(spec: Inside, host: int) -> str:
    with IPRoute() as ns:
        if not spec.src_name:  # no interface: the routes only (through the others)
            _routes(ns, None, spec)
            return ""
        idx = ns.link_lookup(ifname=spec.src_name)[0]
        step = f"renaming interface {spec.src_name} to {spec.ifname}"
        try:
            ns.link("set", index=idx, ifname=spec.ifname)
            if spec.mac:
                step = f"setting interface {spec.ifname} MAC to {spec.mac}"
                ns.link("set", index=idx, address=spec.mac)
            if spec.address:
                step = f"setting interface {spec.ifname} IP to {spec.address}"
                addr, _, plen = spec.address.partition("/")
                ns.addr("add", index=idx, address=addr, prefixlen=int(plen))
            if spec.address6:
                step = f"setting interface {spec.ifname} IPv6 to {spec.address6}"
                addr, _, plen = spec.address6.partition("/")
                ns.addr("add", index=idx, address=addr, prefixlen=int(plen), family=10,
                        flags=IFA_F_NODAD)
            step = f"setting interface {spec.ifname} up"
            ns.link("set", index=idx, state="up")
            for lo in ns.link_lookup(ifname="lo"):
                ns.link("set", index=lo, state="up")
            _routes(ns, idx, spec)
            return str(ns.get_links(idx)[0].get_attr("IFLA_ADDRESS"))
        except (NetlinkError, ValueError) as exc:
            _give_back(ns, idx, spec.src_name, host)
            raise NetworkError(f"error {step}: {exc}") from exc
        except NetworkError:
            _give_back(ns, idx, spec.src_name, host)
            raise


def _routes(ns: IPRoute, idx: int | None, spec: Inside) -> None:
    for dest in spec.connected if idx is not None else ():
        try:
            ns.route("add", dst=dest, oif=idx, scope=RT_SCOPE_LINK,
                     family=10 if ":" in dest else 2)
        except NetlinkError as exc:
            raise NetworkError(f"error setting interface {spec.ifname} routes to {dest}: "
                               f"{exc}") from exc
    for dest, hop in spec.via:
        try:
            ns.route("add", dst=dest, gateway=hop, family=10 if ":" in dest else 2)
        except NetlinkError as exc:
            raise NetworkError(f"failed to add static route {dest} via {hop}: {exc}") from exc
    for gw, family, default in ((spec.gateway, 2, "0.0.0.0/0"), (spec.gateway6, 10, "::/0")):
        if not gw:
            continue
        try:
            ns.route("add", dst=default, gateway=gw, family=family)
        except NetlinkError as exc:
            raise NetworkError(f"failed to set gateway {gw}: {exc}") from exc


def _give_back(ns: IPRoute, idx: int, src_name: str, host: int) -> None:
    """The interface back in the host's namespace as ``src_name``, down; deleted if that
    fails (a veth takes its peer along)."""
    try:
        ns.link("set", index=idx, state="down")
        ns.link("set", index=idx, ifname=src_name)
        ns.link("set", index=idx, net_ns_fd=host)
    except NetlinkError:
        with contextlib.suppress(NetlinkError):
            ns.link("del", index=idx)


def move_out(pid: int, ifname: str, src_name: str) -> None:
    """Hand ``ifname`` of the container ``pid`` back to this namespace under its plugin's
    name ``src_name`` (libnetwork's ``Remove``), deleting it if that fails. Gone already (the
    namespace or the interface): nothing to do.

    Raises:
        OSError: the namespace cannot be entered (``pid`` is gone).
    """
    host = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def back() -> None:
        with IPRoute() as ns:
            found = ns.link_lookup(ifname=ifname)
            if found:
                _give_back(ns, found[0], src_name, host)

    try:
        in_netns(pid, back)
    finally:
        os.close(host)


def link_exists(name: str) -> bool:
    with IPRoute() as ip:
        return bool(ip.link_lookup(ifname=name))
