"""The Linux bridges and iptables rules of this host's local bridge networks: made at a
network's create, removed at its removal, and reconciled with the records at daemon start
(what a crash left goes). Blocking; the network service calls these from worker threads.

Names: a new bridge is made under a staging name (``svx`` + owner + network id, 15
characters) and gets its alias ``svc:<owner>:<network id>`` before its real name, so that a
crash in between leaves a bridge the next start recognises as half made.
"""

from __future__ import annotations

import logging

from svc.engine.networks.ipam import Network
from svc.engine.networks.publish import is_ports_scope
from svc.network import bridge as br
from svc.network import netrules
from svc.network.firewall import Firewall, Rule

log = logging.getLogger("svc.networks")
ICC_OPTION = "com.docker.network.bridge.enable_icc"


def staging_prefix(owner: str) -> str:
    return f"svx{owner[:7]}"


def staging(owner: str, net: Network) -> str:
    """The name a new bridge has until its alias is set (``x`` keeps it apart from
    hex-named bridges)."""
    return f"{staging_prefix(owner)}{net.id[:5]}"


def alias(owner: str, net: Network) -> str:
    return f"svc:{owner}:{net.id[:12]}"


ISO_SCOPE = "iso"  # the jump to the isolation chains, while any bridge network exists


def rule_scope(net: Network) -> str:
    """The firewall scope of one network's rules (its id is hex: nothing in it needs
    quoting in a rule's comment)."""
    return f"net-{net.id[:12]}"


def bridge_rules(firewall: Firewall, net: Network) -> list[Rule]:
    """One network's rules: its own NAT and forwarding, and its part of the isolation. Each
    network's are a scope of their own, so a create or a removal changes (and computes)
    only its own, whatever the number of networks."""
    icc = net.options.get(ICC_OPTION, "true").lower() != "false"
    own = (netrules.internal_rules(net.bridge) if net.internal
           else netrules.nat_rules(net.bridge, net.subnet, icc=icc))
    return own + netrules.bridge_isolation(net.bridge, firewall.iso1, firewall.iso2)


def jump_rules(firewall: Firewall, any_network: bool) -> list[Rule]:
    """The ``iso`` scope: the jump, while any bridge network exists."""
    return [netrules.isolation_jump(firewall.iso1)] if any_network else []


def net_scopes(firewall: Firewall, nets: list[Network]) -> dict[str, list[Rule]]:
    """Every network's rules, by scope."""
    scopes = {rule_scope(net): bridge_rules(firewall, net) for net in nets}
    scopes[ISO_SCOPE] = jump_rules(firewall, bool(nets))
    return scopes


def setup(owner: str, firewall: Firewall, bridges: list[Network], *,
          keep_ports: bool = False) -> bool:
    """Every network's bridge, address and rules, and what a crash left removed; whether
    IPv4 forwarding had to be turned on. ``keep_ports`` (live restore): published ports'
    rules stay, for the containers taken back (the others' go after the restore)."""
    if half := br.delete_links_named(staging_prefix(owner)):
        log.info("removed half-made bridges a crash left: %s", ", ".join(half))
    for net in bridges:
        br.ensure_bridge(net.bridge, net.gateway, net.prefixlen, net.gateway6,
                         net.prefixlen6, alias=alias(owner, net), staging=staging(owner, net))
    known = {n.bridge for n in bridges}
    if stray := br.remove_stray_veths(known):
        log.info("removed veths a crash left on the bridges: %s", ", ".join(stray))
    for name in br.owned_bridges(f"svc:{owner}:"):
        if name not in known:
            log.info("removing the bridge %s, which no network names (a crash left it)", name)
            br.delete_bridge(name)
    removed = firewall.reconcile(net_scopes(firewall, bridges),
                                 keep=is_ports_scope if keep_ports else None)
    if removed:
        log.info("removed %d iptables rules left by a crash", removed)
    return br.enable_forwarding()


def make(owner: str, firewall: Firewall, net: Network, bridges: list[Network]) -> None:
    """``net``'s bridge and rules (and the jump to isolation, if it is the first)."""
    br.ensure_bridge(net.bridge, net.gateway, net.prefixlen, net.gateway6, net.prefixlen6,
                     alias=alias(owner, net), staging=staging(owner, net))
    firewall.change({rule_scope(net): bridge_rules(firewall, net),
                     ISO_SCOPE: jump_rules(firewall, True)})


def drop(owner: str, firewall: Firewall, net: Network, bridges: list[Network]) -> None:
    """``net``'s rules (and the jump to isolation, if it was the last), then its bridge."""
    others = [n for n in bridges if n.id != net.id]
    firewall.change({rule_scope(net): [], ISO_SCOPE: jump_rules(firewall, bool(others))})
    br.delete_bridge(net.bridge)
