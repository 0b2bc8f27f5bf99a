"""The trash emptier: the one task that deletes what removals threw into the trash.

``rmi`` and ``rm`` answer once the object is out of reach (``svc.storage.trash.Trash.throw``:
a durable rename); the files go here, in the engine's nursery, one entry at a time, in a
worker thread (never on the event loop). The deletes are paced so that they never take the
disk from running containers: after each ``BATCH`` files the thread sleeps as long again as
the batch took (a duty cycle of ``DUTY``), and at least ``MIN_PAUSE``. An ext4 that deletes
~4,000 files a second alone thus gives at least half of its time to everyone else.

At start the entries a previous run left (a crash mid-delete, or a stop before the trash was
empty) are found and emptied the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from svc.storage.trash import Trash

log = logging.getLogger("svc.engine.trash")

BATCH = 256  # files or directories deleted between pauses
DUTY = 0.5  # the share of time spent deleting, at most
MIN_PAUSE = 0.002  # seconds; even a batch the page cache made instant yields the disk
# How long the emptier waits, once woken, before it deletes: the removal that woke it answers
# first, with the GIL and the cores to itself (under CPU contention, a deleting thread
# started at once made an rmi's answer 8x slower), and a burst of removals is emptied in one go.
SETTLE = 0.2


class Pacer:
    """Called by the deleting thread after each entry it removed: sleeps after each ``batch``
    so that deleting takes at most ``duty`` of the time. ``sleep`` is how to pause (the
    emptier's goes through trio, so that a cancellation stops the thread there)."""

    def __init__(self, sleep: Callable[[float], object] = time.sleep, *, batch: int = BATCH,
                 duty: float = DUTY, min_pause: float = MIN_PAUSE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sleep = sleep
        self.batch = batch
        self.rest = (1 - duty) / duty  # seconds of pause per second of work
        self.min_pause = min_pause
        self.clock = clock
        self.removed = 0
        self.paused = 0.0
        self._since = clock()

    def __call__(self) -> None:
        self.removed += 1
        if self.removed % self.batch:
            return
        pause = max(self.min_pause, (self.clock() - self._since) * self.rest)
        self.sleep(pause)
        self.paused += pause
        self._since = self.clock()


class TrashEmptier:
    """Empties ``trash`` in the background; ``run`` is its task."""

    def __init__(self, trash: Trash, *, batch: int = BATCH, duty: float = DUTY,
                 settle: float = SETTLE) -> None:
        self.trash = trash
        self.batch = batch
        self.duty = duty
        self.settle = settle
        self._more = trio.Event()
        self._stuck: set[str] = set()  # entries that could not be deleted (until next start)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Empty the trash until cancelled, waking when something is thrown in.

        Cancellation: the entry being deleted stays in the trash, part-deleted; the next
        start finishes it. Nothing else is left behind.
        """
        token = trio.lowlevel.current_trio_token()
        self.trash.notify = lambda: token.run_sync_soon(self._wake)
        task_status.started()
        try:
            while True:
                self._more = trio.Event()
                names = await trio.to_thread.run_sync(self.trash.entries)
                todo = [n for n in names if n not in self._stuck]
                if not todo:
                    await self._more.wait()
                    await trio.sleep(self.settle)
                    continue
                for name in todo:
                    await self._empty(name)
        finally:
            self.trash.notify = lambda: None

    def _wake(self) -> None:
        self._more.set()

    async def _empty(self, name: str) -> None:
        pacer = Pacer(lambda seconds: trio.from_thread.run(trio.sleep, seconds),
                      batch=self.batch, duty=self.duty)
        t0 = time.monotonic()
        done = await trio.to_thread.run_sync(self.trash.empty, name, pacer)
        if done:
            log.debug("trash entry %s deleted: %d entries in %.2f s", name, pacer.removed,
                      time.monotonic() - t0)
        else:
            self._stuck.add(name)
