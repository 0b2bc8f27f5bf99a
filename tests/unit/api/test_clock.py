"""The connections' clock (svc.api.clock): one task fires each connection's deadline, once,
in order, at most a slot late; moved and cleared deadlines never fire."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from svc.api.clock import RESOLUTION, ConnectionClock


class Conn:
    def __init__(self, clock: ConnectionClock, fired: list[tuple[str, float]], name: str) -> None:
        self.clock_slot: int | None = None
        self.due = math.inf
        self._clock = clock
        self._fired = fired
        self.name = name

    def set(self, due: float) -> None:
        self.due = due
        self._clock.arm(self, due)

    def deadline(self) -> float:
        return self.due

    def on_deadline(self) -> None:
        self._fired.append((self.name, trio.current_time()))
        self.due = math.inf


@asynccontextmanager
async def running() -> AsyncIterator[tuple[ConnectionClock, list[tuple[str, float]], float]]:
    """A clock whose task runs for the block: (clock, what fired, the time it started)."""
    clock = ConnectionClock()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.run)
        await trio.testing.wait_all_tasks_blocked()
        yield clock, [], trio.current_time()
        nursery.cancel_scope.cancel()


async def test_deadlines_fire_in_order_and_at_most_a_slot_late(
        autojump_clock: trio.abc.Clock) -> None:
    async with running() as (clock, fired, now):
        a, b, c = (Conn(clock, fired, n) for n in "abc")
        c.set(now + 3.0)
        a.set(now + 1.0)
        b.set(now + 2.0)
        await trio.sleep(5)
    assert [n for n, _ in fired] == ["a", "b", "c"]
    for (_, at), due in zip(fired, (1.0, 2.0, 3.0), strict=True):
        assert now + due <= at <= now + due + RESOLUTION + 1e-6
    assert len(clock) == 0


async def test_moved_and_cleared_deadlines(autojump_clock: trio.abc.Clock) -> None:
    async with running() as (clock, fired, now):
        later, cleared, earlier = (Conn(clock, fired, n) for n in ("later", "cleared", "earlier"))
        later.set(now + 1.0)
        cleared.set(now + 1.0)
        earlier.set(now + 10.0)
        later.set(now + 4.0)  # moved later: not at 1 s
        clock.disarm(cleared)  # nothing due any more
        cleared.due = math.inf
        earlier.set(now + 0.5)  # moved earlier than what the clock sleeps for
        await trio.sleep(2)
        assert [n for n, _ in fired] == ["earlier"]
        assert fired[0][1] <= now + 0.5 + RESOLUTION + 1e-6
        await trio.sleep(3)
    assert [n for n, _ in fired] == ["earlier", "later"]
    assert now + 4.0 <= fired[1][1]


async def test_a_deadline_moved_without_refiling_is_filed_again(
        autojump_clock: trio.abc.Clock) -> None:
    async with running() as (clock, fired, now):
        conn = Conn(clock, fired, "x")
        conn.set(now + 1.0)
        conn.due = now + 3.0  # changed behind the clock's back: looked at when the slot comes
        await trio.sleep(2)
        assert fired == []
        await trio.sleep(2)
    assert [n for n, _ in fired] == ["x"]
