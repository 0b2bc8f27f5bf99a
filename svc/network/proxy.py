"""The userland proxy behind published ports: host address and port -> container address.

``PortProxy.bind`` takes every host port a container asks for, or none (a port in use, or a
range with no free port, is an error and what was bound is closed again); ``serve`` then
forwards until it is cancelled, which closes the listeners and every connection.

TCP: one pair of copy tasks per connection, each direction half-closed on its own (a client's
EOF reaches the container as EOF). UDP: a socket per client address, connected to the
container, kept while datagrams flow (idle ones close after ``UDP_IDLE`` seconds).
"""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass, field
from typing import Any

import trio

# accept's errors that mean "no descriptor or memory now", not a broken listener
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RETRY_SECONDS = 0.1

COPY_SIZE = 256 * 1024
UDP_IDLE = 90.0
UDP_MAX = 65535
Address = tuple[Any, ...]


class PortInUse(Exception):
    """A host port cannot be bound; the message is dockerd's."""


@dataclass
class Binding:
    """One published port: ``proto`` (tcp or udp) ``host_ip:host_port`` -> ``port``."""

    proto: str
    host_ip: str
    host_range: tuple[int, int]  # (0, 0): any free port; (n, n): exactly n
    port: int
    host_port: int = 0  # the bound port, once bound
    sock: trio.socket.SocketType | None = field(default=None, repr=False)


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


async def _bind_one(b: Binding) -> None:
    ip = b.host_ip or "0.0.0.0"
    kind = socket.SOCK_STREAM if b.proto == "tcp" else socket.SOCK_DGRAM
    low, high = b.host_range
    candidates = [0] if (low, high) == (0, 0) else list(range(low, high + 1))
    last: OSError | None = None
    for port in candidates:
        sock = trio.socket.socket(_family(ip), kind)
        try:
            if kind == socket.SOCK_STREAM:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            await sock.bind((ip, port))
        except OSError as exc:
            sock.close()
            last = exc
            continue
        if kind == socket.SOCK_STREAM:
            sock.listen(128)
        b.sock, b.host_port = sock, sock.getsockname()[1]
        return
    what = f"{ip}:{low}" if low == high else f"{ip}:{low}-{high}"
    reason = "port is already allocated" if last is not None and last.errno == errno.EADDRINUSE \
        else (last.strerror if last is not None else "no port")
    raise PortInUse(f"Bind for {what} failed: {reason}")


class PortProxy:
    def __init__(self, bindings: list[Binding]) -> None:
        self.bindings = bindings

    @classmethod
    async def bind(cls, bindings: list[Binding]) -> PortProxy:
        """Bind every host port, or none (``PortInUse``)."""
        proxy = cls(bindings)
        try:
            for b in bindings:
                await _bind_one(b)
        except BaseException:
            proxy.close()
            raise
        return proxy

    def close(self) -> None:
        for b in self.bindings:
            if b.sock is not None:
                b.sock.close()
                b.sock = None

    async def serve(self, target_ip: str, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Forward to ``target_ip`` until cancelled; the sockets are closed at the end."""
        try:
            async with trio.open_nursery() as nursery:
                for b in self.bindings:
                    assert b.sock is not None
                    if b.proto == "tcp":
                        nursery.start_soon(self._serve_tcp, b.sock, target_ip, b.port)
                    else:
                        nursery.start_soon(self._serve_udp, b.sock, target_ip, b.port)
                task_status.started()
        finally:
            self.close()

    async def _serve_tcp(self, listener: trio.socket.SocketType, ip: str, port: int) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    conn, _ = await listener.accept()
                except OSError as exc:  # no descriptor left: the client waits in the backlog
                    if exc.errno not in CAPACITY_ERRNOS:
                        raise
                    await trio.sleep(RETRY_SECONDS)
                    continue
                nursery.start_soon(self._tcp_pair, trio.SocketStream(conn), ip, port)

    async def _tcp_pair(self, client: trio.SocketStream, ip: str, port: int) -> None:
        async with client:
            try:
                upstream = await trio.open_tcp_stream(ip, port)
            except OSError:
                return  # nothing listens in the container: the client sees the close
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_copy, client, upstream)
                nursery.start_soon(_copy, upstream, client)

    async def _serve_udp(self, sock: trio.socket.SocketType, ip: str, port: int) -> None:
        peers: dict[Address, trio.socket.SocketType] = {}
        async with trio.open_nursery() as nursery:
            while True:
                data, addr = await sock.recvfrom(UDP_MAX)
                up = peers.get(addr)
                if up is None:
                    try:
                        up = trio.socket.socket(_family(ip), socket.SOCK_DGRAM)
                    except OSError:  # no descriptor left: the datagram is lost
                        continue
                    await up.connect((ip, port))
                    peers[addr] = up
                    nursery.start_soon(_udp_replies, up, sock, addr, peers)
                with contextlib.suppress(OSError):  # refused (ICMP): as if lost
                    await up.send(data)


async def _udp_replies(up: trio.socket.SocketType, sock: trio.socket.SocketType,
                       addr: Address, peers: dict[Address, trio.socket.SocketType]) -> None:
    try:
        while True:
            with trio.move_on_after(UDP_IDLE) as idle:
                try:
                    data = await up.recv(UDP_MAX)
                except OSError:
                    continue
                await sock.sendto(data, addr)
            if idle.cancelled_caught:
                return
    finally:
        peers.pop(addr, None)
        up.close()


async def _copy(src: trio.SocketStream, dst: trio.SocketStream) -> None:
    """One direction until EOF, which is passed on as a half-close."""
    try:
        while data := await src.receive_some(COPY_SIZE):
            await dst.send_all(data)
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await dst.aclose()
