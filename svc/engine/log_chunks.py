"""Log records in the chunks the logs endpoint sends: raw bytes for a TTY (optionally stamped),
and a blocking chunk source driven from a worker thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

import trio

from svc.storage.jsonlog import format_time
from svc.storage.logreader import LogRecord

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


async def thread_iter(it: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Drive a blocking iterator (file reads) in a worker thread, a chunk per hand-off; the
    iterator is closed at the end, also when cancelled."""
    done = object()
    try:
        while True:
            chunk = await trio.to_thread.run_sync(next, it, done)
            if chunk is done:
                return
            assert isinstance(chunk, bytes)
            yield chunk
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
