"""``docker logs`` of a container whose driver is journald: its entries read back from the
journal by ``journalctl`` (``svc.logdrivers.journalread``), framed as the json-file's are
(stdcopy frames without a TTY, the raw bytes with one; ``timestamps`` as RFC 3339 with nine
digits), with every query parameter of the spec: ``since``, ``tail``, ``timestamps``,
``stdout``/``stderr`` and ``follow``, which ends once the container's run has ended and its
last lines have had ``FOLLOW_DRAIN`` seconds to reach the journal."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import trio

from svc.engine.containers.container import Container
from svc.errors import SystemError_
from svc.logdrivers import registry
from svc.logdrivers.journalread import JournalReadError
from svc.wire.jsonlog import format_time
from svc.wire.stdcopy import STDERR, STDOUT, encode_frame

FOLLOW_DRAIN = 1.0


@trio.as_safe_channel
async def journal_stream(c: Container, *, stdout: bool, stderr: bool, since_ns: int,
                         tail: int | None, timestamps: bool,
                         follow: bool) -> AsyncGenerator[bytes, None]:
    """The chunks to send (see the module). Cancellation (the client went) kills
    journalctl."""
    live = c.live if follow else None
    async with trio.open_nursery() as nursery:
        if live is not None:
            async def stop_after_the_run() -> None:
                await live.exited.wait()
                await trio.sleep(FOLLOW_DRAIN)
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_after_the_run)
        messages = registry.read_journal(c.id, since_ns=since_ns or None, until_ns=None,
                                         tail=tail, follow=live is not None)
        try:
            async with aclosing(messages):
                async for m in messages:
                    out = m.source == "stdout"
                    if not (stdout if out else stderr):
                        continue
                    data = m.line if m.partial else m.line + b"\n"
                    if timestamps:
                        data = format_time(m.time_ns).encode() + b" " + data
                    yield data if c.tty else encode_frame(STDOUT if out else STDERR, data)
        except (JournalReadError, OSError) as exc:
            raise SystemError_(f"reading the journal: {exc}") from None
        nursery.cancel_scope.cancel()
