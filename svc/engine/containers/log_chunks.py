"""Log records in the chunks the logs endpoint sends: raw bytes for a TTY (optionally
stamped)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

from svc.wire.jsonlog import format_time
from svc.wire.jsonlog_parse import LogRecord

RAW_CHUNK = 1 << 17


def stamped(rec: LogRecord, timestamps: bool) -> bytes:
    return format_time(rec.time_ns).encode() + b" " + rec.data if timestamps else rec.data


def raw_chunks(records: Iterator[LogRecord], timestamps: bool) -> Iterator[bytes]:
    """Records' bytes (a TTY's log) joined into chunks of about ``RAW_CHUNK``."""
    out: list[bytes] = []
    size = 0
    for rec in records:
        piece = stamped(rec, timestamps)
        out.append(piece)
        size += len(piece)
        if size >= RAW_CHUNK:
            yield b"".join(out)
            out, size = [], 0
    if out:
        yield b"".join(out)


async def raw_follow(records: AsyncIterator[LogRecord], timestamps: bool) -> AsyncIterator[bytes]:
    async with aclosing(records):  # type: ignore[type-var]
        async for rec in records:
            yield stamped(rec, timestamps)
