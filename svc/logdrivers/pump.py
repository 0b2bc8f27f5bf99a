"""The bounded buffer between a container's output and its log driver, and the task that
empties it (one per container, in the container's nursery).

The container's output path never waits on a receiver: it appends to the buffer. What happens
when the buffer is full is the ``mode`` log option's choice, as later engines offered it:

* ``blocking`` (the default, as the engines had it): the output path waits for room, so the
  container's writes stall once ``max-buffer-size`` bytes are waiting (a receiver that is down
  holds the container back, and nothing is lost);
* ``non-blocking``: the message is dropped and counted (``dropped``); the count is logged at
  most every ``REPORT_SECONDS`` and shown by the container's inspect.

The pump's task sends batches in order; a batch the driver could not deliver
(``ReceiverDown``) is kept and sent again after a pause that doubles up to ``RETRY_MAX``, so
the lines arrive once the receiver is back. ``close`` flushes what is buffered for at most
its ``timeout`` (a daemon shutdown), then closes the driver; what is left is counted dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

import trio

from svc.logdrivers.base import Driver, Message, OptionError, ReceiverDown
from svc.wire.units import parse_size

log = logging.getLogger("svc.logdrivers")

MODES = ("blocking", "non-blocking")
DEFAULT_BUFFER = 1 << 20  # max-buffer-size: 1 MB, as the engines' non-blocking mode
BATCH_MESSAGES = 512
BATCH_BYTES = 256 << 10
RETRY_MIN = 0.1
RETRY_MAX = 5.0
REPORT_SECONDS = 10.0
_OVERHEAD = 64  # bytes counted per message beyond its line (its object)


def buffer_options(config: dict[str, str] | None) -> tuple[str, int]:
    """The ``mode`` and ``max-buffer-size`` options (OptionError naming a bad one)."""
    config = config or {}
    mode = config.get("mode", "blocking")
    if mode not in MODES:
        raise OptionError(f"unknown log mode: {mode} (use blocking or non-blocking)")
    size = DEFAULT_BUFFER
    if "max-buffer-size" in config:
        try:
            size = parse_size(config["max-buffer-size"])
        except ValueError as exc:
            raise OptionError(f"invalid max-buffer-size: {exc}") from None
        if size <= 0:
            raise OptionError("max-buffer-size must be a positive size")
    return mode, size


class LogPump:
    """One container's buffer and sender (see the module)."""

    def __init__(self, driver: Driver, *, mode: str = "blocking",
                 max_bytes: int = DEFAULT_BUFFER, name: str = "") -> None:
        self.driver = driver
        self.mode = mode
        self.max_bytes = max_bytes
        self.name = name
        self.dropped = 0
        self.sent = 0
        self._buf: deque[Message] = deque()
        self._bytes = 0
        self._ready = trio.Event()  # something to send
        self._room = trio.Event()  # a putter may retry
        self._empty = trio.Event()  # nothing is waiting to be sent
        self._empty.set()
        self._closing = False
        self._reported_at = -REPORT_SECONDS

    @property
    def buffered(self) -> int:
        return self._bytes

    def would_drop(self, size: int) -> bool:
        """Whether ``size`` more bytes of output would be dropped now (non-blocking mode, and
        no room for them): the caller then counts them (``drop``) without cutting them up."""
        return self.mode == "non-blocking" and bool(self._buf) \
            and self._bytes + size > self.max_bytes

    def drop(self, n: int) -> None:
        """``n`` messages were not taken (``would_drop``)."""
        if n:
            self._drop(n)

    def offer(self, msg: Message) -> bool:
        """Append ``msg`` if there is room (no checkpoint); False when it was not taken
        (full: the caller drops it in non-blocking mode, waits in ``put`` otherwise)."""
        size = len(msg.line) + _OVERHEAD
        if self._closing or (self._buf and self._bytes + size > self.max_bytes):
            return False
        self._buf.append(msg)
        self._bytes += size
        self._ready.set()
        self._empty = trio.Event() if self._empty.is_set() else self._empty
        return True

    async def put_many(self, msgs: Sequence[Message]) -> None:
        """``put`` for each of ``msgs`` in order, waiting (blocking mode) only while full:
        the output path's call, one per chunk of output."""
        for i, msg in enumerate(msgs):
            if not self.offer(msg):
                if self.mode == "non-blocking" or self._closing:
                    # Full: the rest that fits still goes (a line that does not fit may be
                    # followed by shorter ones that do), the others are counted.
                    taken = sum(1 for m in msgs[i + 1:] if self.offer(m))
                    self._drop(len(msgs) - i - taken)
                    return
                await self.put(msg)

    async def put(self, msg: Message) -> None:
        """Hand ``msg`` over: appended, or (full) dropped and counted in non-blocking mode,
        waited for in blocking mode. Cancellation: ``msg`` was not taken."""
        while not self.offer(msg):
            if self._closing:
                self._drop(1)
                return
            if self.mode == "non-blocking":
                self._drop(1)
                return
            self._room = trio.Event()
            await self._room.wait()

    def _drop(self, n: int) -> None:
        self.dropped += n
        now = trio.current_time()
        if now - self._reported_at >= REPORT_SECONDS:
            log.warning("log driver of %s: %d message(s) dropped so far (the receiver is "
                        "slow or down and the buffer of %d bytes is full)",
                        self.name, self.dropped, self.max_bytes)
            self._reported_at = now

    async def run(self) -> None:
        """Send batches until cancelled (``close`` ends it gracefully)."""
        pause = RETRY_MIN
        while True:
            if not self._buf:
                self._empty.set()
                if self._closing:
                    return
                self._ready = trio.Event()
                await self._ready.wait()
                continue
            batch = self._batch()
            try:
                await self.driver.send(batch)
            except ReceiverDown as exc:
                log.info("log driver of %s: %s; retrying in %.1f s", self.name, exc, pause)
                await trio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
                continue
            pause = RETRY_MIN
            self._taken(len(batch))

    def _batch(self) -> Sequence[Message]:
        out: list[Message] = []
        size = 0
        for msg in self._buf:
            if out and (len(out) >= BATCH_MESSAGES or size + len(msg.line) > BATCH_BYTES):
                break
            out.append(msg)
            size += len(msg.line)
        return out

    def _taken(self, n: int) -> None:
        for _ in range(n):
            self._bytes -= len(self._buf.popleft().line) + _OVERHEAD
        self.sent += n
        self._room.set()

    async def close(self, timeout: float) -> None:
        """Take nothing more; send what is buffered for at most ``timeout`` seconds (``run``
        must be running to do so), then close the driver. What could not be sent is counted
        dropped (and logged)."""
        self._closing = True
        self._ready.set()
        self._room.set()
        with trio.move_on_after(timeout):
            await self._empty.wait()
        left = len(self._buf)
        if left:
            self._buf.clear()
            self._bytes = 0
            self.dropped += left
            log.warning("log driver of %s: %d message(s) not delivered before the close",
                        self.name, left)
        with trio.CancelScope(shield=True), trio.move_on_after(timeout or 1.0):
            await self.driver.aclose()
