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

**The first event after a quiet spell goes out at once.** Waking the fan-out's task put each
event behind whatever its publisher did next on the event loop: a tag's answer, through
Quart and hypercorn, took 0.4-0.9 ms before the task's turn came, and under CPU contention
the event loop was often preempted in that stretch (3.5 ms more, a burner's slice). So
``publish`` delivers the event itself (``publish_now``) when no round is pending and none
started in the last ``QUIET_S``: the same non-blocking writes, only sooner (up to
``PUBLISH_NOW_MAX`` held subscribers: beyond that the writes would hold up the publisher's
own answer by milliseconds, and the task does them after it). It leaves a round
pending behind it, and events published before that round runs go in it, one write per
subscriber for the lot. A steady stream of events (one round after another) is delivered in
rounds as before: only the first event of a burst goes out on its own.

A subscriber may also be *adopted* (``adopt``): held with no task behind it at all (an events
stream opened in the server's accept loop, ``svc.api.taskless``). Its hand-back is a callback
instead, which starts the task that goes on from there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from svc.engine.events import Event, EventBus, Subscription

log = logging.getLogger("svc.events")

DirectWriter = Callable[[list["Event"]], bool]
QUIET_S = 0.002  # no round for this long: the next event goes out at once
PUBLISH_NOW_MAX = 128  # held subscribers the publisher writes to itself, at most


class FanOut:
    """The held subscribers of one bus and the task that writes to them."""

    def __init__(self) -> None:
        self._held: dict[Subscription, Callable[[], None]] = {}  # subscriber -> hand-back
        self._wake = trio.Event()
        self._delivered = -1  # the bus's sequence number at the last round's start
        self._delivered_at = -math.inf  # (trio's clock)
        self._delivering = False
        self.running = False

    def publish_now(self, bus: EventBus) -> None:
        """Something was published: deliver it to the held subscribers now, unless a round
        is pending already, one started less than ``QUIET_S`` ago, or more than
        ``PUBLISH_NOW_MAX`` subscribers are held (then it goes in the task's next round:
        the publisher's own answer is not held up by thousands of writes). No checkpoint."""
        if not self._held:
            return
        if self._wake.is_set() or self._delivering or not self.running \
                or len(self._held) > PUBLISH_NOW_MAX \
                or trio.current_time() - self._delivered_at < QUIET_S:
            self._wake.set()
            return
        self._wake.set()  # (the round behind it: events published until it runs)
        self.deliver(bus)

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
        """One round: each held subscriber's new events to its writer (no checkpoint).
        Nothing to do when nothing was published since the last round started. Never
        raises: a writer that does is logged, and its subscriber handed back to its task
        (the batch is lost to that subscriber alone)."""
        if bus.seq == self._delivered:
            return
        self._delivered = bus.seq
        self._delivered_at = trio.current_time()
        self._delivering = True
        try:
            for sub in list(self._held):
                if sub not in self._held:  # (let go by an earlier hand-back of this round)
                    continue
                batch = bus.take(sub)
                if not batch:
                    continue
                writer = sub.direct
                try:
                    written = writer is not None and writer(batch)
                except Exception:
                    log.exception("writing events to a subscriber failed")
                    written = False
                if not written:
                    self.release(sub)
        finally:
            self._delivering = False
