"""Taking back the network side of a container that ran on while the daemon was away (live
restore): its interfaces, read from the kernel (``svc.network.adopt``), become its endpoints
again, so that its addresses are taken, inspect shows them, names resolve to it and its ports
can be published again. Nothing is made: the veths, addresses and routes are there."""

from __future__ import annotations

import logging
import secrets

from svc.engine.networks.endpoints import EndpointPlan
from svc.engine.networks.ipam import EndpointInfo, Network
from svc.network import bridge as br
from svc.network.adopt import FoundInterface

log = logging.getLogger("svc.networks")


def adopt_endpoints(networks: dict[str, Network], cid: str, name: str,
                    found: list[FoundInterface], plans: dict[str, EndpointPlan]
                    ) -> list[Network]:
    """Register the endpoints of container ``cid`` (named ``name``) on the local bridge
    networks its interfaces ``found`` are on, with the aliases and links of ``plans`` (by
    network id); returns those networks, its first network (the default route's) first."""
    by_bridge = {n.bridge: n for n in networks.values()
                 if n.bridge and n.scope == "local" and not n.plugged}
    adopted: list[Network] = []
    for f in sorted(found, key=lambda f: not f.default_route):
        net = by_bridge.get(f.bridge)
        if net is None or not f.address:
            log.warning("container %s: its interface %s (on %s) is on no network svc knows",
                        cid[:12], f.ifname, f.bridge)
            continue
        plan = plans.get(net.id, EndpointPlan())
        ep = br.Endpoint(host_if=br.host_veth_name(f.ifname, cid), address=f.address,
                         prefixlen=f.prefixlen or net.prefixlen, gateway=net.gateway,
                         mac=f.mac, ifname=f.ifname, address6=f.address6,
                         prefixlen6=f.prefixlen6, gateway6=net.gateway6 if f.address6 else "")
        net.endpoints[cid] = EndpointInfo(container=name, endpoint_id=secrets.token_hex(32),
                                          endpoint=ep, aliases=list(plan.aliases),
                                          links=list(plan.links), attached=True,
                                          default_route=f.default_route)
        adopted.append(net)
    return adopted
