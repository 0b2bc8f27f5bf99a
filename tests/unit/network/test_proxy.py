"""The userland port proxy on its own, against echo servers on loopback."""

from __future__ import annotations

import socket

import pytest
import trio

from svc.network.proxy import Binding, PortInUse, PortProxy


async def _tcp_echo(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while chunk := await stream.receive_some():
                data += chunk
            await stream.send_all(data.upper())  # after the client's half-close

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def _udp_echo(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        await sock.bind(("127.0.0.1", 0))
        task_status.started(sock.getsockname()[1])
        while True:
            data, addr = await sock.recvfrom(65535)
            await sock.sendto(b"echo:" + data, addr)


async def test_tcp_half_close_and_udp() -> None:
    async with trio.open_nursery() as nursery:
        tcp_port = await nursery.start(_tcp_echo)
        udp_port = await nursery.start(_udp_echo)
        proxy = await PortProxy.bind([Binding("tcp", "127.0.0.1", (0, 0), tcp_port),
                                      Binding("udp", "127.0.0.1", (0, 0), udp_port)])
        await nursery.start(proxy.serve, "127.0.0.1")
        tcp_b, udp_b = proxy.bindings
        stream = await trio.open_tcp_stream("127.0.0.1", tcp_b.host_port)
        async with stream:
            await stream.send_all(b"x" * 300_000)
            await stream.send_eof()
            got = b""
            while chunk := await stream.receive_some():
                got += chunk
        assert got == b"X" * 300_000
        client = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with client:
            await client.sendto(b"ping", ("127.0.0.1", udp_b.host_port))
            with trio.fail_after(5):
                data, _ = await client.recvfrom(100)
        assert data == b"echo:ping"
        nursery.cancel_scope.cancel()
    assert all(b.sock is None for b in proxy.bindings)  # closed with the serve task


async def test_ports_in_use_and_ranges() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(PortInUse, match=f"Bind for 127.0.0.1:{port} failed: port is "
                                            "already allocated"):
            await PortProxy.bind([Binding("tcp", "127.0.0.1", (port, port), 80)])
        proxy = await PortProxy.bind([Binding("tcp", "127.0.0.1", (port, port + 5), 80)])
        assert port < proxy.bindings[0].host_port <= port + 5  # the next free one
        proxy.close()
