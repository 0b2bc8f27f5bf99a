"""The pump between a container's output and its driver (svc.logdrivers.pump): order kept,
nothing lost while the receiver is down in blocking mode, drops counted in non-blocking mode,
a bounded buffer either way, and a close that flushes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from svc.logdrivers.base import Message, OptionError, ReceiverDown
from svc.logdrivers.pump import LogPump, buffer_options


class Receiver:
    """A driver whose receiver can be taken down and brought back."""

    def __init__(self) -> None:
        self.up = True
        self.got: list[bytes] = []
        self.closed = False

    async def send(self, batch: Sequence[Message]) -> None:
        await trio.lowlevel.checkpoint()
        if not self.up:
            raise ReceiverDown("connection refused")
        self.got.extend(m.line for m in batch)

    async def aclose(self) -> None:
        self.closed = True


def msg(i: int, size: int = 10) -> Message:
    return Message(line=b"%d" % i + b"x" * size, source="stdout", time_ns=i)


async def test_blocking_mode_waits_while_down_and_delivers_everything_in_order(
        autojump_clock: trio.abc.Clock) -> None:
    rx = Receiver()
    rx.up = False
    pump = LogPump(rx, mode="blocking", max_bytes=2000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.run)
        done = trio.Event()

        async def writer() -> None:
            for i in range(100):
                await pump.put(msg(i))
            done.set()

        nursery.start_soon(writer)
        await trio.sleep(30)
        assert not done.is_set()  # the buffer is full: the writer waits
        assert pump.buffered <= 2000
        rx.up = True
        await done.wait()
        await pump.close(timeout=10)
        nursery.cancel_scope.cancel()
    assert rx.got == [msg(i).line for i in range(100)]
    assert pump.dropped == 0 and rx.closed


async def test_non_blocking_mode_drops_and_counts(autojump_clock: trio.abc.Clock) -> None:
    rx = Receiver()
    rx.up = False
    pump = LogPump(rx, mode="non-blocking", max_bytes=1000)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.run)
        with trio.move_on_after(1) as scope:
            for i in range(100):
                await pump.put(msg(i))
        assert not scope.cancelled_caught  # never waited
        kept = 100 - pump.dropped
        assert 0 < kept < 100 and pump.buffered <= 1000
        rx.up = True
        await pump.close(timeout=10)
        nursery.cancel_scope.cancel()
    assert rx.got == [msg(i).line for i in range(kept)]


async def test_close_gives_up_after_its_timeout(autojump_clock: trio.abc.Clock) -> None:
    rx = Receiver()
    rx.up = False
    pump = LogPump(rx)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.run)
        for i in range(5):
            await pump.put(msg(i))
        t0 = trio.current_time()
        await pump.close(timeout=3)
        assert trio.current_time() - t0 < 5
        nursery.cancel_scope.cancel()
    assert pump.dropped == 5 and rx.got == [] and rx.closed


def test_buffer_options() -> None:
    assert buffer_options({}) == ("blocking", 1 << 20)
    assert buffer_options({"mode": "non-blocking", "max-buffer-size": "4m"}) == \
        ("non-blocking", 4_000_000)
    with pytest.raises(OptionError, match="unknown log mode: fast"):
        buffer_options({"mode": "fast"})
    with pytest.raises(OptionError, match="max-buffer-size"):
        buffer_options({"max-buffer-size": "lots"})
