"""The embedded DNS server: containers on a user network resolve each other by name.

A container whose first network is a user network gets ``nameserver 127.0.0.11`` in its
resolv.conf, and the daemon serves that address inside the container's network namespace: a
UDP socket made there (``network/dns.py``) and read by a trio task in the engine's nursery,
from the start until the teardown. A question for a container's name, one of its aliases or
its short id, on a user network the asking container is on, is answered with the addresses on
those networks (A; AAAA gets an empty answer, as there is no IPv6); anything else is forwarded
from the host's namespace to the upstream servers (``--dns``, the container's own Dns, else the
host's resolv.conf) and the first reply relayed.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from pathlib import Path

import trio

from svc.engine.networks.ipam import EndpointInfo, Network
from svc.network.dns import udp_socket_in
from svc.wire import dns as wire

log = logging.getLogger("svc.dns")

FORWARD_TIMEOUT = 2.0
HOST_RESOLV = Path("/etc/resolv.conf")
_NS = re.compile(r"^\s*nameserver\s+(\S+)", re.MULTILINE)
Lookup = Callable[[str, str], list[str] | None]  # (asking container id, name) -> addresses


def host_nameservers(source: Path = HOST_RESOLV) -> list[str]:
    try:
        return _NS.findall(source.read_text(errors="replace"))
    except OSError:
        return []


class EmbeddedDNS:
    def __init__(self, lookup: Lookup, upstream: list[str]) -> None:
        self.lookup = lookup
        self.upstream = list(upstream)
        self._servers: dict[str, trio.CancelScope] = {}

    async def start(self, cid: str, pid: int, nursery: trio.Nursery,
                    upstream: list[str] | None = None) -> None:
        """Serve 127.0.0.11:53 in the namespace of ``pid`` until ``stop(cid)``."""
        raw = await trio.to_thread.run_sync(udp_socket_in, pid)
        sock = trio.socket.from_stdlib_socket(raw)
        scope = trio.CancelScope()
        self._servers[cid] = scope
        servers = list(upstream or self.upstream or host_nameservers())
        nursery.start_soon(self._serve, cid, sock, scope, servers)

    def stop(self, cid: str) -> None:
        scope = self._servers.pop(cid, None)
        if scope is not None:
            scope.cancel()

    async def _serve(self, cid: str, sock: trio.socket.SocketType, scope: trio.CancelScope,
                     servers: list[str]) -> None:
        with scope, sock:
            async with trio.open_nursery() as nursery:
                while True:
                    try:
                        msg, addr = await sock.recvfrom(4096)
                    except OSError:
                        continue
                    nursery.start_soon(self._reply, cid, sock, msg, addr, servers)

    async def _reply(self, cid: str, sock: trio.socket.SocketType, msg: bytes, addr: object,
                     servers: list[str]) -> None:
        out = await self.resolve(cid, msg, servers)
        if out is not None:
            with contextlib.suppress(OSError):
                await sock.sendto(out, addr)  # type: ignore[call-overload]

    async def resolve(self, cid: str, msg: bytes, servers: list[str]) -> bytes | None:
        """The response to one query message from container ``cid``."""
        try:
            q = wire.parse_query(msg)
        except wire.DNSFormatError:
            return wire.failure(msg, wire.FORMERR)
        if q.qclass == wire.CLASS_IN and q.qtype in (wire.TYPE_A, wire.TYPE_AAAA):
            found = self.lookup(cid, q.name)
            if found:
                return wire.answer(q, found if q.qtype == wire.TYPE_A else [])
        reply = await forward(msg, servers)
        return reply if reply is not None else wire.failure(msg, wire.SERVFAIL)


async def forward(msg: bytes, servers: list[str]) -> bytes | None:
    """Ask each upstream server in turn (from the host's namespace); the first reply."""
    for server in servers:
        family = trio.socket.AF_INET6 if ":" in server else trio.socket.AF_INET
        try:  # a socket may not be had (no descriptor left): the query fails, nothing more
            with trio.socket.socket(family, trio.socket.SOCK_DGRAM) as s:
                await s.connect((server, wire.PORT))
                await s.send(msg)
                with trio.move_on_after(FORWARD_TIMEOUT):
                    while True:
                        reply = await s.recv(65535)
                        if reply[:2] == msg[:2]:
                            return reply
        except OSError as exc:
            log.debug("DNS upstream %s: %s", server, exc)
    return None


def lookup(mine: list[tuple[Network, EndpointInfo]], name: str) -> list[str] | None:
    """Addresses, on the user networks of the asking container (``mine``: its networks and
    its endpoint on each), of the containers called ``name``: their name, an alias or their
    short id, or a link's alias of the asking container's own endpoint."""
    found = []
    for net, own in mine:
        if net.builtin:
            continue
        wanted = name
        for entry in own.links:  # a link's alias, seen by the linking container only
            target, _, alias = entry.partition(":")  # checked (links.parse_link) when made
            if name == (alias or target).lstrip("/").lower():
                wanted = target.lstrip("/").lower()  # on this network only
        for other, info in net.endpoints.items():
            names = {info.container.lstrip("/").lower(), other[:12],
                     *(a.lower() for a in info.aliases)}
            if info.attached and wanted in names:
                found.append(info.endpoint.address)
    return found or None
