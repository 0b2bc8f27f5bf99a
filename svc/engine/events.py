"""The event bus: one publisher API for the whole engine, one cursor per subscriber.

Policy (see docs/architecture.md):
* ``publish`` never blocks and never waits on a subscriber: it appends the event to one shared,
  bounded log and wakes the subscribers that are waiting. Memory does not grow with the
  number of subscribers: they share the log and each holds only a cursor into it. The
  subscribers the fan-out holds (caught up, on plain sockets) get the first event after a
  quiet spell at once, one non-blocking write each (``svc.engine.fanout``); the rest of a
  burst goes in one round behind it.
* A subscriber more than ``SUBSCRIBER_LAG`` events behind (its client is not reading) is cut
  off: its stream ends with an error object that says why, instead of stalling the others.
* ``subscribe`` is synchronous: the replay snapshot and the live cursor are taken with no
  checkpoint between them: a subscriber misses nothing and sees nothing twice.
* The newest ``REPLAY_EVENTS`` events are replayable (``since``/``until``), across restarts.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from svc.engine.eventfilter import EventFilter
from svc.engine.fanout import DirectWriter, FanOut

log = logging.getLogger("svc.events")

REPLAY_EVENTS = 1024
SUBSCRIBER_LAG = 4096
SCAN_EVERY = 256  # how often publishing looks for subscribers whose clients stopped reading
FLUSH_INTERVAL = 0.5
BATCH_EVENTS = 1024


@dataclass(eq=False, slots=True)
class Event:
    """One thing that happened. Wire shapes are derived from it per API version."""

    type: str
    action: str
    actor_id: str
    attributes: dict[str, str]
    time_nano: int
    # Encoded forms, keyed by wire shape, filled on first use by the API layer.
    wire: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def time(self) -> int:
        return self.time_nano // 1_000_000_000

    def to_record(self) -> dict[str, Any]:
        return {"type": self.type, "action": self.action, "id": self.actor_id,
                "attributes": self.attributes, "timeNano": self.time_nano}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Event:
        attrs = dict(rec.get("attributes") or {})
        return cls(type=str(rec["type"]), action=str(rec["action"]), actor_id=str(rec["id"]),
                   attributes={str(k): str(v) for k, v in attrs.items()},
                   time_nano=int(rec["timeNano"]))


class EventSink(Protocol):
    """Where the bus persists recent events (the storage event log)."""

    def load(self) -> list[dict[str, Any]]: ...
    def append(self, records: list[dict[str, Any]]) -> None: ...


class Subscription:
    """A subscriber: a replay backlog, then live events until ``until``, a cut-off or the end."""

    def __init__(self, bus: EventBus, filt: EventFilter, backlog: list[Event],
                 since_ns: int | None, until_ns: int | None, live: bool) -> None:
        self._bus = bus
        self.filter = filt
        self.backlog = backlog
        self.since_ns = since_ns
        self.until_ns = until_ns
        self.error: str | None = None
        self.live = live
        self.cursor = bus._seq  # sequence number of the next live event to deliver
        # True while the consumer is writing a batch it took (its client has not read it
        # all): the bus itself cuts such a laggard off, and calls ``on_cut``.
        self.sending = False
        self.on_cut: Callable[[], None] | None = None
        # Set by a consumer that can write without waiting: the bus's fan-out then writes
        # its events while it is caught up (``svc.engine.fanout``).
        self.direct: DirectWriter | None = None

    def wants(self, ev: Event) -> bool:
        if self.since_ns is not None and ev.time_nano < self.since_ns:
            return False
        if self.until_ns is not None and ev.time_nano > self.until_ns:
            return False
        return self.filter.match(ev)

    def lag(self) -> int:
        return self._bus._seq - self.cursor if self.live else 0

    def end(self, reason: str | None = None) -> None:
        """Stop live delivery (shutdown); events already published still drain."""
        if reason and self.error is None:
            self.error = reason
        self.live = False
        self._bus._discard(self)

    def cut_off(self) -> None:
        """The client fell too far behind: unregister, with the reason as the stream's last
        word. A consumer whose write waits for the client is told (``on_cut``): it lets the
        write finish for a while, then shuts the connection."""
        if self.error is None:
            self.error = (f"event stream cut off: the client fell more than {SUBSCRIBER_LAG} "
                          f"events behind; reconnect with since= to resume")
            log.warning("cutting off a slow event subscriber (%d events behind)",
                        self._bus._seq - self.cursor)
        self.close()
        if self.sending and self.on_cut is not None:
            on_cut, self.on_cut = self.on_cut, None
            on_cut()

    def close(self) -> None:
        """The consumer is done: unregister."""
        self.live = False
        self._bus._discard(self)

    async def batches(self, max_events: int = BATCH_EVENTS) -> AsyncGenerator[list[Event], None]:
        """Yield events in batches: the backlog, then live events as they come.

        Ends at ``until`` (wall clock), when the subscriber is cut off or ended (shutdown),
        or never. Cancellation: a checkpoint; the caller's ``close()`` (in a finally)
        unregisters the subscription.
        """
        for i in range(0, len(self.backlog), max_events):
            yield self.backlog[i : i + max_events]
        self.backlog = []
        deadline = float("inf")
        if self.until_ns is not None:
            deadline = trio.current_time() + max(0.0, (self.until_ns - time.time_ns()) / 1e9)
        bus = self._bus
        while True:
            if self.cursor == bus._seq:
                if not self.live:
                    return
                held = self.direct is not None and bus.fanout.running
                if deadline == math.inf:  # (no scope to enter and leave at each wait)
                    await (bus.fanout.hold(self) if held else bus._lot.park())
                else:
                    with trio.move_on_at(deadline) as scope:
                        await (bus.fanout.hold(self) if held else bus._lot.park())
                    if scope.cancelled_caught:
                        return  # until reached
                if held:
                    yield []  # handed back: the consumer writes what its writer kept
                continue
            if bus._seq - self.cursor > SUBSCRIBER_LAG:
                self.cut_off()
                return
            start = self.cursor - bus._base
            batch = bus._log[start : start + max_events]
            self.cursor += len(batch)
            if self.filter or self.since_ns is not None or self.until_ns is not None:
                batch = [ev for ev in batch if self.wants(ev)]
            if batch:
                yield batch
            else:
                await trio.lowlevel.checkpoint()


class EventBus:
    """Publish/subscribe for engine events over one shared, bounded log."""

    def __init__(self, sink: EventSink | None = None, *, keep: int = REPLAY_EVENTS) -> None:
        self._sink = sink
        self._keep = keep
        # The shared log: events with sequence numbers _base .. _seq-1. It keeps the newest
        # ``keep`` (replay) and whatever a live subscriber has still to read, never more than
        # max(keep, SUBSCRIBER_LAG) of those; it is trimmed in amortized O(1) (``_trim``).
        self._log: list[Event] = []
        self._base = 0
        self._seq = 0
        self._retain = max(keep, SUBSCRIBER_LAG)
        self._trim_at = 2 * keep  # the log's length at which ``_append`` trims it
        self._lot = trio.lowlevel.ParkingLot()
        self._subs: list[Subscription] = []
        self._pending: deque[Event] = deque(maxlen=keep)  # not yet persisted (newest only)
        self.fanout = FanOut()
        self.closed = False

    @property
    def seq(self) -> int:
        """How many events have been published: it changes with every event."""
        return self._seq

    @property
    def listeners(self) -> int:
        return len(self._subs)

    def load(self) -> int:
        """Fill the replay log from the sink (blocking; call before serving)."""
        if self._sink is None:
            return 0
        for rec in self._sink.load()[-self._keep :]:
            try:
                self._append(Event.from_record(rec))
            except (KeyError, TypeError, ValueError):
                log.warning("skipping a damaged event record: %r", rec)
        return len(self._log)

    def _append(self, ev: Event) -> None:
        self._log.append(ev)
        self._seq += 1
        if len(self._log) >= self._trim_at:
            self._trim()

    def _trim(self) -> None:
        """Drop the events neither replay nor a live subscriber needs (a log that always
        kept SUBSCRIBER_LAG events, up to twice that between trims, held 3-4 MiB after a
        stream had ended). One more than SUBSCRIBER_LAG behind is cut off on its next read,
        before it reads the log. After ``close``, ended streams drain from outside
        ``_subs``: only that bound holds then. O(log + subscribers) per ``keep`` events."""
        floor = self._seq - self._keep
        if self.closed:
            floor = self._seq - self._retain
        for sub in self._subs:
            floor = min(floor, sub.cursor)
        floor = max(floor, self._seq - self._retain)
        if floor > self._base:
            del self._log[: floor - self._base]
            self._base = floor
        self._trim_at = len(self._log) + self._keep

    def publish(self, type: str, action: str, actor_id: str,
                attributes: Mapping[str, str] | None = None, *, at_ns: int | None = None
                ) -> Event:
        """Record an event (``at_ns``: when it happened, if not now) and wake the subscribers.
        Never blocks. The subscribers the fan-out holds may get it now, by non-blocking
        writes (``FanOut.publish_now``); for the others it is O(1)."""
        ev = Event(type, action, actor_id, dict(attributes or {}), at_ns or time.time_ns())
        self._append(ev)
        if self._seq % SCAN_EVERY == 0:
            self._cut_stalled()
        if self._sink is not None:
            self._pending.append(ev)
        if self._lot:
            self._lot.unpark_all()
        self.fanout.publish_now(self)
        return ev

    def subscribe(self, filters: Mapping[str, Iterable[str]] | None = None, *,
                  since_ns: int | None = None, until_ns: int | None = None) -> Subscription:
        """Register a subscriber now (no checkpoint); replay matching events since ``since``."""
        filt = EventFilter(filters)
        now = time.time_ns()
        backlog: list[Event] = []
        if since_ns is not None or until_ns is not None:
            lo = since_ns if since_ns is not None else 0
            backlog = [e for e in self._log[-self._keep :]
                       if e.time_nano >= lo and (until_ns is None or e.time_nano <= until_ns)
                       and filt.match(e)]
        live = not self.closed and (until_ns is None or until_ns > now)
        sub = Subscription(self, filt, backlog, since_ns, until_ns, live)
        if live:
            self._subs.append(sub)
        return sub

    def max_lag(self) -> int:
        """How far the slowest live subscriber is behind (for pacing benchmarks)."""
        return max((self._seq - s.cursor for s in self._subs), default=0)

    def _cut_stalled(self) -> None:
        """Cut off the subscribers whose clients stopped reading: their writes wait, so they
        never look at their own lag. Runs every ``SCAN_EVERY`` events: each event pays
        ``listeners / SCAN_EVERY`` checks, nothing per write."""
        limit = self._seq - SUBSCRIBER_LAG
        for sub in [s for s in self._subs if s.sending and s.cursor < limit]:
            sub.cut_off()

    def take(self, sub: Subscription) -> list[Event]:
        """``sub``'s events from its cursor to the newest, filtered; the cursor moves past
        them (for the fan-out, which only holds subscribers that are caught up)."""
        batch = self._log[sub.cursor - self._base:]
        sub.cursor = self._seq
        if sub.filter or sub.since_ns is not None or sub.until_ns is not None:
            batch = [ev for ev in batch if sub.wants(ev)]
        return batch

    def _discard(self, sub: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self._subs.remove(sub)
        self.fanout.release(sub)
        if self._lot:
            self._lot.unpark_all()

    def close(self, reason: str = "the daemon is shutting down") -> None:
        """End every live stream (they drain, then finish); later subscribers get replay only."""
        self.closed = True
        for sub in list(self._subs):
            sub.end(reason)
        self._lot.unpark_all()
        self.fanout.release_all()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Persist pending events in batches until cancelled, a final flush on the way out;
        and run the fan-out (``svc.engine.fanout``).

        Cancellation: the last batch is written in a shielded scope, so events published before
        shutdown are on disk when the daemon exits.
        """
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.fanout.run, self)
            task_status.started()
            try:
                while True:
                    await trio.sleep(FLUSH_INTERVAL)
                    await self.flush()
            finally:
                with trio.CancelScope(shield=True):
                    await self.flush()

    async def flush(self) -> None:
        """Append what was published since the last flush (at most the newest ``keep``)."""
        if self._sink is None or not self._pending:
            return
        batch = list(self._pending)
        self._pending.clear()
        sink = self._sink
        try:
            await trio.to_thread.run_sync(lambda: sink.append([e.to_record() for e in batch]))
        except Exception as exc:  # the log is best effort: never take the daemon down
            log.error("could not persist %d event(s): %s", len(batch), exc)
