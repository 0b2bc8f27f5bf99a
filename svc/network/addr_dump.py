"""The host's IPv4 addresses from one netlink RTM_GETADDR dump, decoded only as far as needed.

Blocking; a dump of a few hundred addresses takes well under a millisecond.
"""

from __future__ import annotations

import socket
import struct

NETLINK_ROUTE = 0
RTM_GETADDR = 22
RTM_NEWADDR = 20
NLMSG_DONE = 3
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
IFA_ADDRESS = 1
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, seq, pid
_IFADDR = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_RTA = struct.Struct("=HH")  # length, type


def _align(n: int) -> int:
    return (n + 3) & ~3


def ipv4_addresses() -> list[tuple[int, bytes]]:
    """(prefix length, the 4 address bytes) of every IPv4 address on the host.

    Raises:
        OSError: the kernel refused the dump.
    """
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as s:
        s.bind((0, 0))
        body = _IFADDR.pack(socket.AF_INET, 0, 0, 0, 0)
        s.send(_NLMSG.pack(_NLMSG.size + len(body), RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP,
                           1, 0) + body)
        found: list[tuple[int, bytes]] = []
        while True:
            data = s.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, kind, _, _, _ = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    return found
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, off + _NLMSG.size)
                    if err:
                        raise OSError(-err, "netlink: the address dump failed")
                elif kind == RTM_NEWADDR:
                    found += _address(data, off + _NLMSG.size, off + length)
                off += _align(length)


def _address(data: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    family, prefixlen, _, _, _ = _IFADDR.unpack_from(data, start)
    if family != socket.AF_INET:
        return []
    off = start + _IFADDR.size
    while off + _RTA.size <= end:
        rlen, rtype = _RTA.unpack_from(data, off)
        if rlen < _RTA.size:
            break
        if rtype == IFA_ADDRESS and rlen >= _RTA.size + 4:
            return [(prefixlen, bytes(data[off + _RTA.size:off + _RTA.size + 4]))]
        off += _align(rlen)
    return []
