"""Connections waiting for their first bytes (svc.api.arrivals): each is handed on once,
with what its client sent (or ``b""`` when it went) and when it was accepted; it counts as an
open connection while it waits; its head deadline closes it; the server's end closes what
still waits; a failing hand-on loses that connection only."""

from __future__ import annotations

import socket

import pytest
import trio

from svc.api import accepting, limits
from svc.api.arrivals import Arrivals
from svc.api.clock import ConnectionClock
from tests.unit.api.socketpairs import pair, settle


async def test_each_connection_is_handed_on_once_with_its_first_bytes() -> None:
    arrivals = Arrivals(ConnectionClock())
    got: list[tuple[str, bytes, float | None]] = []
    pairs = {name: pair() for name in ("writes", "closes", "resets", "stays")}
    open_before = accepting.OPEN.value
    async with trio.open_nursery() as nursery:
        nursery.start_soon(arrivals.run)
        await settle()
        accepted = trio.current_time()
        for name, (ours, _) in pairs.items():
            assert arrivals.wait(ours, lambda s, first, at, name=name: got.append(
                (name, first, at)))
        waited = trio.current_time()
        assert accepting.OPEN.value == open_before + 4 and len(arrivals) == 4
        pairs["writes"][1].sendall(b"GET /_ping HTTP/1.1\r\n\r\n")
        pairs["closes"][1].close()
        theirs = pairs["resets"][1]
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        theirs.close()
        await settle()
        assert sorted((name, first) for name, first, _ in got) == [
            ("closes", b""), ("resets", b""), ("writes", b"GET /_ping HTTP/1.1\r\n\r\n")]
        assert all(at is not None and accepted <= at <= waited for _, _, at in got)
        assert accepting.OPEN.value == open_before + 1 and len(arrivals) == 1
        pairs["writes"][1].sendall(b"more")  # (handed on: not read here any more)
        await settle()
        assert pairs["writes"][0].recv(10) == b"more" and len(got) == 3
        nursery.cancel_scope.cancel()
    stays = pairs["stays"][0]
    assert stays.fileno() == -1  # closed at the watch's end: nothing was asked on it
    assert accepting.OPEN.value == open_before and not arrivals.running
    for ours, theirs in pairs.values():
        ours.close()
        theirs.close()


async def test_a_connection_that_sends_nothing_is_closed_at_its_head_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "HEAD_TIMEOUT", 0.3)
    clock = ConnectionClock()
    arrivals = Arrivals(clock)
    ours, theirs = pair()
    open_before = accepting.OPEN.value
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        nursery.start_soon(arrivals.run)
        await settle()
        assert arrivals.wait(ours, lambda *a: pytest.fail("handed on"))
        await trio.sleep(0.6)
        assert ours.fileno() == -1 and len(arrivals) == 0 and len(clock) == 0
        assert accepting.OPEN.value == open_before
        theirs.settimeout(1)
        assert theirs.recv(10) == b""  # closed without a word
        nursery.cancel_scope.cancel()
    theirs.close()


async def test_close_all_closes_what_waits_and_a_failing_hand_on_loses_only_its_own(
        caplog: pytest.LogCaptureFixture) -> None:
    arrivals = Arrivals(ConnectionClock())
    (a, a_peer), (b, b_peer), (c, c_peer) = pair(), pair(), pair()
    got: list[bytes] = []

    def broken(sock: socket.socket, first: bytes, at: float | None) -> None:
        raise RuntimeError("a bug")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(arrivals.run)
        await settle()
        arrivals.wait(a, broken)
        arrivals.wait(b, lambda s, first, at: got.append(first))
        a_peer.sendall(b"x")
        await settle()
        b_peer.sendall(b"y")
        await settle()
        assert a.fileno() == -1 and got == [b"y"]
        assert "taking on a connection's first bytes failed" in caplog.text
        arrivals.wait(c, lambda *args: pytest.fail("handed on"))
        arrivals.close_all()
        assert c.fileno() == -1 and len(arrivals) == 0
        nursery.cancel_scope.cancel()
    for sock in (a, a_peer, b, b_peer, c, c_peer):
        sock.close()


def test_nothing_waits_while_the_watch_is_not_running() -> None:
    ours, theirs = pair()
    assert not Arrivals(ConnectionClock()).wait(ours, lambda *a: None)
    ours.close()
    theirs.close()
