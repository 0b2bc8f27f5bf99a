"""One clock for every connection's deadlines (``svc.api.refusals``), run by one task.

A connection's deadline (its request head overdue, a refused connection's linger) used to be
kept by a task of its own, sleeping under a cancel scope whose deadline moved with each
request: a task to start and cancel per connection, and a deadline to move twice per request.
Here a connection is filed under the tenth of a second its deadline falls in, and one task
sleeps until the earliest such tenth; arming, moving and disarming a deadline are a set
insertion and removal. A deadline fires at most ``RESOLUTION`` late.

Firing calls the connection's own ``on_deadline`` synchronously, in the clock's task, so it
must not raise (the clock would end, and the daemon with it). A connection with a task group
has it start the work there (answer 408, close), under the connection's cancellation; one
with nothing to do but close (a first read's deadline, a connection still waiting for its
first bytes in ``svc.api.arrivals``) does that at once. A connection that is gone is simply
not there to fire.
"""

from __future__ import annotations

import heapq
import math
from typing import Protocol

import trio

RESOLUTION = 0.1  # seconds per slot


class Timed(Protocol):
    """A connection the clock keeps: where it is filed, and what its deadline is now."""

    clock_slot: int | None

    def deadline(self) -> float: ...

    def on_deadline(self) -> None: ...


class ConnectionClock:
    """Deadlines of many connections, filed by slot (see the module)."""

    def __init__(self) -> None:
        self._slots: dict[int, set[Timed]] = {}
        self._order: list[int] = []  # the slots' numbers, a heap (an emptied one may linger)
        self._sleep: trio.CancelScope | None = None

    def __len__(self) -> int:
        return sum(len(s) for s in self._slots.values())

    def arm(self, conn: Timed, deadline: float) -> None:
        """File ``conn`` under ``deadline`` (``inf``: nothing is due, it is taken off)."""
        slot = None if deadline == math.inf else math.ceil(deadline / RESOLUTION)
        old = conn.clock_slot
        if slot == old:
            return
        if old is not None:
            members = self._slots.get(old)
            if members is not None:
                members.discard(conn)
        conn.clock_slot = slot
        if slot is None:
            return
        members = self._slots.get(slot)
        if members is None:
            members = self._slots[slot] = set()
            heapq.heappush(self._order, slot)
            if self._sleep is not None and slot * RESOLUTION < self._sleep.deadline:
                self._sleep.deadline = slot * RESOLUTION
        members.add(conn)

    def disarm(self, conn: Timed) -> None:
        self.arm(conn, math.inf)

    async def run(self) -> None:
        """Fire deadlines as they come, until cancelled (with the server)."""
        while True:
            with trio.move_on_at(self._next()) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            self._fire_due(trio.current_time())

    def _next(self) -> float:
        while self._order and not self._slots.get(self._order[0]):
            self._slots.pop(heapq.heappop(self._order), None)
        return self._order[0] * RESOLUTION if self._order else math.inf

    def _fire_due(self, now: float) -> None:
        while self._order and self._order[0] * RESOLUTION <= now:
            slot = heapq.heappop(self._order)
            for conn in self._slots.pop(slot, None) or ():
                conn.clock_slot = None
                deadline = conn.deadline()
                if deadline != math.inf and math.ceil(deadline / RESOLUTION) <= slot:
                    conn.on_deadline()
                else:  # (moved without being filed again: file it where it is due now)
                    self.arm(conn, deadline)
