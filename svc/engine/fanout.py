"""Events to many subscribers without a task switch per subscriber.

A subscriber whose consumer can write without waiting (``Subscription.direct``: the API's
writer for a plain socket) and that has taken every event so far is *held* here instead of
parked on the bus. After a publish, one task, the fan-out, takes each held subscriber's new
events and hands them to its writer, which writes them to the client's socket without
blocking: the events were encoded once, and the event loop pays one system call per
subscriber instead of waking a task (and its stream's generators) for each. A writer that
cannot write it all (the client is not reading fast enough) or that fails keeps the rest and
says so; the subscriber is then handed back to its own task, which writes the rest, waiting
as long as the client needs, and delivers events itself until it has caught up again.

A subscriber may also be *adopted* (``adopt``): held with no task behind it at all (an events
stream opened in the server's accept loop, ``svc.api.taskless``). Its hand-back is a callback
instead, which starts the task that goes on from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from svc.engine.events import Event, EventBus, Subscription

DirectWriter = Callable[[list["Event"]], bool]


class FanOut:
    """The held subscribers of one bus and the task that writes to them."""

    def __init__(self) -> None:
        self._held: dict[Subscription, Callable[[], None]] = {}  # subscriber -> hand-back
        self._wake = trio.Event()
        self.running = False

    def poke(self) -> None:
        """Something was published (no checkpoint)."""
        if self._held:
            self._wake.set()

    async def hold(self, sub: Subscription) -> None:
        """Hold ``sub`` until it is handed back: its writer could not write all, or the
        subscription ended. Cancellation: ``sub`` is no longer held."""
        back = trio.Event()
        self._held[sub] = back.set
        try:
            await back.wait()
        finally:
            if self._held.get(sub) == back.set:
                del self._held[sub]

    def adopt(self, sub: Subscription, on_back: Callable[[], None]) -> None:
        """Hold ``sub`` (caught up) with no task waiting: when it would be handed back,
        ``on_back`` is called instead (synchronously, from the fan-out or whoever ended the
        subscription), and takes it from there. ``forget`` it to let it go without a call."""
        self._held[sub] = on_back

    def forget(self, sub: Subscription) -> None:
        """Stop holding ``sub``, without handing it back (its stream is gone)."""
        self._held.pop(sub, None)

    def release(self, sub: Subscription) -> None:
        """Hand ``sub`` back to its task (it ended, or it was cut off)."""
        back = self._held.pop(sub, None)
        if back is not None:
            back()

    def release_all(self) -> None:
        for sub in list(self._held):
            self.release(sub)

    async def run(self, bus: EventBus) -> None:
        """Deliver to the held subscribers after each publish, until cancelled; then hand
        every one back (their tasks deliver from there)."""
        self.running = True
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                self.deliver(bus)
        finally:
            self.running = False
            self.release_all()

    def deliver(self, bus: EventBus) -> None:
        """One round: each held subscriber's new events to its writer (no checkpoint)."""
        for sub in list(self._held):
            batch = bus.take(sub)
            writer = sub.direct
            if batch and (writer is None or not writer(batch)):
                self.release(sub)
