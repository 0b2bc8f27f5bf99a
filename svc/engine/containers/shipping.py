"""A container's output shipped to a log receiver (the journald, syslog, gelf and fluentd
drivers of ``svc.logdrivers``): opened at each start, fed by the supervisor, flushed at the
end of the run.

The supervisor hands each chunk of output to ``Shipper.put``, which cuts it into lines and
appends them to the run's pump (a bounded buffer: ``svc.logdrivers.pump``). Only a full
buffer in ``blocking`` mode makes the supervisor wait, and so the container's writes; in
``non-blocking`` mode lines are dropped and counted instead. The pump's own task sends to the
receiver, and keeps running through the end of the run for at most ``FLUSH_SECONDS`` to
deliver what is buffered (also when the daemon shuts down).
"""

from __future__ import annotations

import logging
import socket

import trio

from svc.engine.containers.container import Container
from svc.errors import SystemError_
from svc.logdrivers import registry
from svc.logdrivers.base import Info, Message, ReceiverDown
from svc.logdrivers.lines import LineCutter
from svc.logdrivers.pump import LogPump

log = logging.getLogger("svc.engine.containers")

FLUSH_SECONDS = 5.0  # after a run ends, how long buffered lines may still go to the receiver
READABLE = registry.READABLE  # the drivers whose logs can be read back


def log_info(c: Container) -> Info:
    """What the drivers know of ``c`` (moby's ``logger.Info``)."""
    return Info(config=dict(c.host_config.LogConfig.Config or {}), container_id=c.id,
                container_name=c.name, image_id=c.image_id,
                image_name=c.config.Image or c.image_id, created_ns=c.created_ns,
                entrypoint=c.path, args=list(c.args), env=list(c.config.Env or []),
                labels=dict(c.config.Labels or {}), daemon_name="svc",
                hostname=socket.gethostname())


async def open_shipping(c: Container) -> LogPump | None:
    """The run's pump when ``c``'s driver ships its output (else None), connected first where
    the engines connected at start: an unreachable receiver then fails the start.

    Raises:
      SystemError_: ``failed to initialize logging driver: ...`` (the engines' words).
    """
    if c.log_driver() not in registry.SHIPPING:
        return None
    try:
        pump = registry.open_pump(c.log_driver(), log_info(c))
    except (OSError, ValueError) as exc:
        raise SystemError_(f"failed to initialize logging driver: {exc}") from None
    try:
        await registry.connect_at_start(pump)
    except ReceiverDown as exc:
        with trio.CancelScope(shield=True):
            await pump.driver.aclose()
        raise SystemError_(f"failed to initialize logging driver: {exc}") from None
    return pump


class Dropped:
    """Messages the shipping drivers could not deliver since the daemon started (a full
    buffer in non-blocking mode, a receiver still down at the end of a run, a batch given up
    after the driver's retries): ``/info`` shows the count in its ``SystemStatus``."""

    def __init__(self) -> None:
        self.ended = 0  # by runs that have ended
        self.running: set[Shipper] = set()

    @property
    def total(self) -> int:
        return self.ended + sum(s.dropped for s in self.running)


class Shipper:
    """One run's output to its pump, a cutter per stream (see the module)."""

    def __init__(self, pump: LogPump, dropped: Dropped | None = None) -> None:
        self.pump = pump
        self._cutters = {"stdout": LineCutter(), "stderr": LineCutter()}
        self._sender: trio.CancelScope | None = None
        self._tally = dropped
        if dropped is not None:
            dropped.running.add(self)

    @property
    def dropped(self) -> int:
        return self.pump.dropped + int(getattr(self.pump.driver, "dropped", 0))

    async def run(self) -> None:
        """The pump's sender, shielded from the run's cancellation: ``close`` ends it, after
        the flush (so a daemon shutdown still delivers what is buffered)."""
        with trio.CancelScope(shield=True) as self._sender:
            await self.pump.run()

    async def put(self, stream: str, chunk: bytes, ts: int) -> None:
        """Ship ``chunk`` of ``stream``: waits only for a full buffer in blocking mode.
        Cancellation: the lines not yet taken are lost (the run is ending)."""
        cutter = self._cutters[stream]
        if self.pump.would_drop(len(chunk)):  # (a receiver that is down: no line is made)
            self.pump.drop(cutter.count(chunk))
            return
        await self.pump.put_many([Message(line, stream, ts, partial)
                                  for line, partial in cutter.feed(chunk)])

    def end_stream(self, stream: str, ts: int) -> None:
        """The stream ended: its unfinished line goes too, if the buffer has room."""
        rest = self._cutters[stream].flush()
        if rest is not None and not self.pump.offer(Message(rest[0], stream, ts, True)):
            self.pump.drop(1)

    async def close(self) -> None:
        """Deliver what is buffered for at most ``FLUSH_SECONDS``, then close the driver and
        stop the sender; what is left is counted dropped. Shielded: it runs at the end of a
        run that may be cancelled."""
        with trio.CancelScope(shield=True):
            await self.pump.close(FLUSH_SECONDS)
            if self._sender is not None:
                self._sender.cancel()
        dropped = self.dropped
        if self._tally is not None:
            self._tally.running.discard(self)
            self._tally.ended += dropped
        if dropped:
            log.warning("container %s: %d log message(s) were not delivered to its %s "
                        "receiver", self.pump.name, dropped, type(self.pump.driver).__name__)
