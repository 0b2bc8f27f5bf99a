"""An interface's address by its name (``--cluster-advertise eth0:2376``). Blocking, one
netlink round trip."""

from __future__ import annotations

import socket

from pyroute2 import IPRoute


def interface_address(name: str) -> str | None:
    """The first IPv4 address of interface ``name`` (else its first IPv6 one); None if
    there is no such interface or it has no address."""
    with IPRoute() as ip:
        found = ip.link_lookup(ifname=name)
        if not found:
            return None
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ip.get_addr(index=found[0], family=family):
                address = msg.get_attr("IFA_ADDRESS")
                if address:
                    return str(address)
    return None
