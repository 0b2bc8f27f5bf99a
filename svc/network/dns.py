"""The embedded DNS server's socket: a UDP socket bound inside a container's network
namespace (the message codec is ``svc.wire.dns``).

Blocking: ``udp_socket_in`` makes the socket in a thread of its own that enters the namespace
and ends (see ``svc.network.netns``).
"""

from __future__ import annotations

import socket

from svc.network.netns import in_netns
from svc.wire.dns import ADDRESS, PORT


def udp_socket_in(pid: int, address: str = ADDRESS, port: int = PORT) -> socket.socket:
    """A UDP socket of the network namespace of ``pid``, bound to ``address:port`` there."""
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((address, port))
        except OSError:
            sock.close()
            raise
        return sock

    return in_netns(pid, make)
