"""A container's json-file log as the logs endpoint sends it: stdcopy frames without a TTY,
the raw bytes with one; optionally followed until the container stops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing

import trio

from svc.engine.container import Container
from svc.storage.jsonlog import format_time
from svc.storage.logfollow import follow as follow_records
from svc.storage.logfollow import follow_framed
from svc.storage.logreader import LogRecord, read_framed, read_logs

RAW_CHUNK = 1 << 17


def log_stream(c: Container, *, stdout: bool, stderr: bool, since_ns: int, tail: int | None,
               timestamps: bool, follow: bool, raw: bool | None = None) -> AsyncIterator[bytes]:
    """The chunks to send: stdcopy frames, or the raw bytes for a TTY (or ``raw``). With
    ``follow`` on a running container the stream ends when it stops (its writer closed);
    cancellation closes the open files."""
    path = c.log_path
    raw = c.tty if raw is None else raw
    if not path.exists():
        return _empty()
    live = c.live
    if follow and live is not None:
        if raw:
            return _raw_follow(follow_records(path, stdout=stdout, stderr=stderr,
                                              since_ns=since_ns, tail=tail, stop=live.exited),
                               timestamps)
        return follow_framed(path, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                             timestamps=timestamps, stop=live.exited)
    if raw:
        return _thread_iter(_raw_chunks(read_logs(path, stdout=stdout, stderr=stderr,
                                                  since_ns=since_ns, tail=tail), timestamps))
    return _thread_iter(read_framed(path, stdout=stdout, stderr=stderr, since_ns=since_ns,
                                    tail=tail, timestamps=timestamps))


def _stamped(rec: LogRecord, timestamps: bool) -> bytes:
    return format_time(rec.time_ns).encode() + b" " + rec.data if timestamps else rec.data


def _raw_chunks(records: Iterator[LogRecord], timestamps: bool) -> Iterator[bytes]:
    out: list[bytes] = []
    size = 0
    for rec in records:
        piece = _stamped(rec, timestamps)
        out.append(piece)
        size += len(piece)
        if size >= RAW_CHUNK:
            yield b"".join(out)
            out, size = [], 0
    if out:
        yield b"".join(out)


async def _thread_iter(it: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Drive a blocking iterator (file reads) in a worker thread, a chunk per hand-off."""
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


async def _raw_follow(records: AsyncIterator[LogRecord],
                      timestamps: bool) -> AsyncIterator[bytes]:
    async with aclosing(records):  # type: ignore[type-var]
        async for rec in records:
            yield _stamped(rec, timestamps)


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover
