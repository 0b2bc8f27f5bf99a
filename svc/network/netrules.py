"""The iptables rules of bridge networks, as data for ``firewall``: what dockerd installs for a
bridge (masquerade and forwarding), for an internal network, for isolation between networks
and for a published port."""

from __future__ import annotations

import ipaddress

from svc.network.firewall import Rule, rule


def nat_rules(bridge: str, subnet: str, *, icc: bool = True) -> list[Rule]:
    """Masquerade what leaves the host from the bridge's subnet; forward to and from it;
    between its own containers only with ``icc`` (dockerd's ``enable_icc``, false on
    ``docker_gwbridge``: two overlays' containers never meet on their way out)."""
    return [
        rule("nat", "POSTROUTING", "-s", subnet, "!", "-o", bridge, "-j", "MASQUERADE"),
        rule("filter", "FORWARD", "-o", bridge, "-m", "conntrack", "--ctstate",
             "RELATED,ESTABLISHED", "-j", "ACCEPT"),
        rule("filter", "FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "ACCEPT"),
        rule("filter", "FORWARD", "-i", bridge, "-o", bridge, "-j",
             "ACCEPT" if icc else "DROP"),
    ]


def internal_rules(bridge: str) -> list[Rule]:
    """An internal network: nothing in or out but between its own containers."""
    return [
        rule("filter", "FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "DROP", first=True),
        rule("filter", "FORWARD", "!", "-i", bridge, "-o", bridge, "-j", "DROP", first=True),
    ]


def isolation_jump(stage1: str) -> Rule:
    """FORWARD's jump to the first stage of isolation (while any bridge is isolated)."""
    return rule("filter", "FORWARD", "-j", stage1, first=True)


def bridge_isolation(bridge: str, stage1: str, stage2: str) -> list[Rule]:
    """One bridge's part of isolation: what leaves it for another interface goes to the
    second stage, and what any bridge sends to it is dropped there."""
    return [rule("filter", stage1, "-i", bridge, "!", "-o", bridge, "-j", stage2),
            rule("filter", stage2, "-o", bridge, "-j", "DROP")]


def dnat_rules(bridge: str, proto: str, host_ip: str, host_port: int, ip: str,
               port: int, *, loopback: bool = False) -> list[Rule]:
    """dockerd's rules for a published port beside the userland proxy: traffic to the host
    port from elsewhere (and from this host to a non-loopback address of its own) is DNATed
    straight to the container, and accepted on its way into the bridge. Loopback traffic
    goes through the proxy, so a port bound on a loopback address has no rules.

    With ``loopback`` (live restore: the proxy is gone while the daemon is) the rules carry
    loopback traffic too, as dockerd's ``--userland-proxy=false`` did: DNATed in OUTPUT and
    masqueraded out of the bridge, which needs the bridge's ``route_localnet``."""
    is_loopback = bool(host_ip) and ipaddress.ip_address(host_ip).is_loopback
    if is_loopback and not loopback:
        return []
    anywhere = not host_ip or host_ip in ("0.0.0.0", "::")
    dest = ["-m", "addrtype", "--dst-type", "LOCAL"] if anywhere else ["-d", host_ip]
    local = ["!", "-d", "127.0.0.0/8"] if anywhere and not loopback else []
    to = ["-j", "DNAT", "--to-destination", f"{ip}:{port}"]
    match = ["-p", proto, "--dport", str(host_port)]
    rules = [] if is_loopback else [rule("nat", "PREROUTING", *dest, "!", "-i", bridge,
                                         *match, *to)]
    rules += [
        rule("nat", "OUTPUT", *dest, *local, *match, *to),
        rule("filter", "FORWARD", "-d", ip, "!", "-i", bridge, "-o", bridge, "-p", proto,
             "--dport", str(port), "-j", "ACCEPT"),
    ]
    if loopback:
        rules.append(rule("nat", "POSTROUTING", "-s", "127.0.0.0/8", "-o", bridge, "-d", ip,
                          "-p", proto, "--dport", str(port), "-j", "MASQUERADE"))
    return rules


def route_localnet(bridge: str) -> None:
    """Let ``bridge`` route loopback-sourced packets (masqueraded on their way out): the
    loopback DNAT of ``dnat_rules(loopback=True)`` needs it. Blocking (a sysctl write)."""
    with open(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet", "w") as f:
        f.write("1")
