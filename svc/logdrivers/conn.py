"""A stream connection to a log receiver (TCP or a unix socket) that the GELF-over-TCP and
fluentd drivers share: connected lazily, dropped on any failure, checked for a receiver that
went away before each write, and spaced reconnection attempts with an optional limit.

The pump (``svc.logdrivers.pump``) owns buffering and retrying: a driver raises
``ReceiverDown`` and the pump sends the same batch again later. ``Reconnect`` only adds what
the drivers' own options mean on top of that (``fluentd-retry-wait``/``-max-retries``,
``gelf-tcp-reconnect-delay``/``-max-reconnect``): no attempt before the option's wait has
passed, and after the option's number of failed attempts the batch is given up (the driver
counts it in its ``dropped``) instead of being retried for ever.
"""

from __future__ import annotations

import errno
import logging
import os
import select
from dataclasses import dataclass

import trio

from svc.logdrivers.base import ReceiverDown

log = logging.getLogger("svc.logdrivers")

CONNECT_TIMEOUT = 3.0  # fluent-logger-golang's defaultTimeout, and go-gelf's dial timeout
WRITE_TIMEOUT = 10.0  # a receiver that takes no bytes for this long counts as down


@dataclass(frozen=True, slots=True)
class Address:
    """Where a stream receiver listens: ``host``/``port``, or ``path`` for a unix socket."""

    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.path:
            return f"unix://{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Reconnect:
    """When the next connection attempt may be made, and when to give a batch up.

    The wait after the n-th consecutive failure is ``wait * factor**(n-1)``, at most ``cap``
    seconds. ``max_retries`` of None retries for ever (the pump's blocking mode then delivers
    everything once the receiver is back); with a number, the attempt after that many retries
    fails for good and ``failed`` answers True once, so the driver drops the batch.
    """

    def __init__(self, wait: float, *, factor: float = 1.0, cap: float = 10.0,
                 max_retries: int | None = None) -> None:
        self.wait = wait
        self.factor = factor
        self.cap = max(cap, wait)
        self.max_retries = max_retries
        self.failures = 0
        self._not_before = float("-inf")

    def check(self) -> None:
        """Raise ``ReceiverDown`` without trying if the wait has not passed (no checkpoint)."""
        left = self._not_before - trio.current_time()
        if left > 0:
            raise ReceiverDown(f"waiting {left:.2f} s before reconnecting "
                               f"(after {self.failures} failed attempt(s))")

    def failed(self) -> bool:
        """Record a failed attempt; True when the batch is to be given up (the count
        starts again for the next batch)."""
        self.failures += 1
        if self.max_retries is not None and self.failures > self.max_retries:
            self.failures = 0
            self._not_before = float("-inf")
            return True
        pause = min(self.cap, self.wait * self.factor ** (self.failures - 1))
        self._not_before = trio.current_time() + pause
        return False

    def succeeded(self) -> None:
        self.failures = 0
        self._not_before = float("-inf")


class StreamConn:
    """One stream connection, opened on first use and after every failure.

    ``send_all`` raises ``ReceiverDown`` (the connection dropped) when it cannot connect or
    write. Cancellation: a cancelled ``send_all`` may have written part of its bytes, so the
    connection is closed rather than left with half a frame on it; the next call reconnects.
    """

    def __init__(self, address: Address) -> None:
        self.address = address
        self._stream: trio.SocketStream | None = None

    @property
    def connected(self) -> bool:
        return self._stream is not None

    async def connect(self) -> None:
        """Connect now if not connected. Raises ``ReceiverDown``; cancellation leaves no
        connection behind."""
        if self._stream is not None and not self._peer_closed():
            return
        await self.aclose()
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                if self.address.path:
                    self._stream = await trio.open_unix_socket(self.address.path)
                else:
                    self._stream = await trio.open_tcp_stream(self.address.host,
                                                              self.address.port)
        except (OSError, trio.TooSlowError) as exc:
            raise ReceiverDown(f"cannot connect to {self.address}: {_why(exc)}") from None

    async def send_all(self, data: bytes) -> None:
        """Write ``data`` (connecting first if need be). Raises ``ReceiverDown``."""
        await self.connect()
        stream = self._stream
        assert stream is not None
        try:
            with trio.fail_after(WRITE_TIMEOUT):
                await stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                trio.TooSlowError) as exc:
            await self.aclose()
            raise ReceiverDown(f"cannot write to {self.address}: {_why(exc)}") from None
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Drop the connection (forcefully: safe under cancellation)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await trio.aclose_forcefully(stream)

    def _peer_closed(self) -> bool:
        """True if the receiver closed or reset the connection since the last write.

        A write into a connection whose peer has gone succeeds (the kernel takes the bytes)
        and only a later one fails, so the bytes of that first write would be lost without a
        word; looking for the peer's FIN or RST first (a zero-timeout poll, no checkpoint)
        sends them on a new connection instead. Neither receiver sends anything unasked
        (no acks are requested), so anything readable is read and discarded.
        """
        assert self._stream is not None
        fd = self._stream.socket.fileno()
        try:
            readable, _, _ = select.select([fd], [], [], 0)
            if not readable:
                return False
            return os.read(fd, 65536) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True


def _why(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.strerror or errno.errorcode.get(exc.errno, str(exc.errno))
    return str(exc) or type(exc).__name__
