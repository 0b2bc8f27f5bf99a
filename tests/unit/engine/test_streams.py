"""``prefetching``: a worker thread reads a trio byte source with bounded read-ahead."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator

import pytest
import trio

from svc.engine.streams import PrefetchReader, prefetching


async def _chunks(n: int, size: int, produced: list[int]) -> AsyncIterator[bytes]:
    for i in range(n):
        produced.append(i)
        yield bytes([i % 256]) * size
        await trio.lowlevel.checkpoint()


async def test_reads_everything_in_order() -> None:
    produced: list[int] = []
    async with prefetching(_chunks(50, 1000, produced), limit=4000) as reader:
        data = await trio.to_thread.run_sync(lambda: reader.read(-1))
    assert data == b"".join(bytes([i]) * 1000 for i in range(50))


async def test_pump_stops_at_the_limit_until_the_reader_makes_room() -> None:
    produced: list[int] = []
    gate = threading.Event()

    def read(reader: PrefetchReader) -> bytes:
        gate.wait()
        return reader.read(-1)

    async with prefetching(_chunks(100, 1000, produced), limit=5000) as reader:
        async with trio.open_nursery() as nursery:
            result: list[bytes] = []

            async def run() -> None:
                result.append(await trio.to_thread.run_sync(read, reader))

            nursery.start_soon(run)
            await trio.sleep(0.2)
            # 5 chunks fill the queue; the pump holds a sixth while it waits for room
            assert len(produced) == 6
            gate.set()
    assert len(result[0]) == 100_000 and len(produced) == 100


async def test_a_failing_source_fails_the_reader() -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"abc"
        raise ValueError("body too large")

    async with prefetching(broken()) as reader:
        assert await trio.to_thread.run_sync(reader.read, 3) == b"abc"
        with pytest.raises(ValueError, match="body too large"):
            await trio.to_thread.run_sync(reader.read, 3)


async def test_cancellation_unblocks_the_thread_and_is_a_cancellation() -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b"x"
        await trio.sleep_forever()
        yield b""  # pragma: no cover

    reached_end = False
    with trio.move_on_after(0.2) as scope:
        async with prefetching(endless()) as reader:
            await trio.to_thread.run_sync(reader.read, -1)  # blocks until the pump is cancelled
            reached_end = True
    assert scope.cancelled_caught and not reached_end
