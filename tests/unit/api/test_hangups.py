"""The hangup watch (svc.api.hangups): one task tells each watched socket's owner, once, that
its client went; bytes the client sends are dropped without a word; a forgotten socket is
never told."""

from __future__ import annotations

import socket

import pytest
import trio

from svc.api.hangups import HangupWatch
from tests.unit.api.socketpairs import pair, settle


async def test_each_owner_is_told_once_when_its_client_goes() -> None:
    watch = HangupWatch()
    told: list[str] = []
    pairs = {name: pair() for name in ("closes", "half-closes", "resets", "stays")}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        await settle()
        for name, (ours, _) in pairs.items():
            watch.watch(ours.fileno(), lambda name=name: told.append(name))
        pairs["closes"][1].close()
        pairs["half-closes"][1].shutdown(socket.SHUT_WR)
        theirs = pairs["resets"][1]
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        theirs.close()
        pairs["stays"][1].sendall(b"x" * 200_000)  # dropped, several reads' worth
        await settle()
        assert sorted(told) == ["closes", "half-closes", "resets"]
        assert len(watch) == 1
        pairs["stays"][1].close()
        await settle()
        assert sorted(told) == ["closes", "half-closes", "resets", "stays"]
        nursery.cancel_scope.cancel()
    for ours, theirs in pairs.values():
        ours.close()
        theirs.close()
    assert not watch.running


async def test_a_forgotten_socket_is_never_told() -> None:
    watch = HangupWatch()
    told: list[int] = []
    ours, theirs = pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        await settle()
        watch.watch(ours.fileno(), lambda: told.append(1))
        watch.forget(ours.fileno())
        watch.forget(ours.fileno())  # (twice: nothing)
        theirs.close()
        await settle()
        assert told == []
        nursery.cancel_scope.cancel()
    ours.close()


def test_watching_needs_the_watch_running() -> None:
    ours, theirs = pair()
    with ours, theirs, pytest.raises(RuntimeError, match="not running"):
        HangupWatch().watch(ours.fileno(), lambda: None)
