"""``logs -f`` of a running container, served from its output as it is logged.

Reading the json-file back costs more CPU than writing it did, so a follower of a running
container gets the output the supervisor logs, as it logs it, through a ``LogTap``. The
supervisor feeds the taps synchronously right after each log write (``OutputHub.logged``), so
the boundary between what is in the file and what a tap delivers is exact:

1. at subscription, in one synchronous step: the writer's position (live file, end of its last
   whole record) and its unfinished lines, the log's files as they stand (``snapshot``), and a
   tap;
2. the files' records up to that position are sent first (``tail`` and ``since`` apply here),
   read and framed in worker threads;
3. then the tapped output is cut into records exactly as the writer cuts it (lines, 16 KiB
   pieces, unfinished lines at a flush) and framed, stamped with the writer's own times.

A tap never holds the container back. A follower more than ``TAP_LIMIT`` bytes behind loses its
tap and goes on from the file, at the position its last framed output had reached (the writer's
read descriptor of that file survives any rotation since), woken by the writer's next publish.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import trio

from svc.engine.containers.log_chunks import raw_chunks, raw_follow
from svc.engine.streams import ThreadChunks
from svc.storage.jsonlog.follow import follow_framed_from, follow_from
from svc.storage.jsonlog.reader import LogFiles, read_framed, read_logs, snapshot, span
from svc.storage.jsonlog.writer import JsonLogWriter, LogFileRef
from svc.wire.jsonlog import Lines, Records, format_time, records_of
from svc.wire.jsonlog_parse import frame_lines, frame_parts
from svc.wire.stdcopy import STDERR, STDOUT

log = logging.getLogger("svc.logs")

TAP_LIMIT = 16 << 20


@dataclass(slots=True)
class Tapped:
    """What one log write did: ``data`` of stream ``code`` stamped ``ts`` (or, with ``flush``,
    that stream's unfinished line written as a partial record), after which the writer's
    live file ``ref`` ends at ``end``. ``records`` are the writer's own cut of the write
    (``JsonLogWriter.write(records=True)``), which spares each follower cutting it again."""

    code: int
    data: bytes
    ts: int
    ref: LogFileRef
    end: int
    flush: bool = False
    records: Records | None = None  # what the writer made of data, if it said


class TapOwner(Protocol):
    """The hub a tap hangs on: its set of taps, and its wake-up at the next publish."""

    taps: set[LogTap]

    def next_publish(self) -> trio.Event: ...


class LogTap:
    """One follower's queue of log writes; it never makes the writer wait."""

    def __init__(self, owner: TapOwner) -> None:
        self._owner = owner
        self.items: deque[Tapped] = deque()
        self.size = 0
        self.spilled = False  # fell TAP_LIMIT behind: the follower goes on from the file
        self.ended = False
        self._wake = trio.Event()

    def push(self, item: Tapped) -> None:
        if self.spilled or self.ended:
            return
        self.items.append(item)
        self.size += len(item.data)
        if self.size > TAP_LIMIT:
            self.spilled = True
            self.items.clear()
            self.size = 0
            self._owner.taps.discard(self)
        self._wake.set()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    async def take(self) -> list[Tapped] | None:
        """Everything queued; None once the run has ended (and all was taken) or the tap
        spilled."""
        while not self.items:
            if self.ended or self.spilled:
                return None
            self._wake = trio.Event()
            await self._wake.wait()
        out = list(self.items)
        self.items.clear()
        self.size = 0
        return out

    def close(self) -> None:
        self._owner.taps.discard(self)
        self.ended = True


class _Cutter:
    """Cuts tapped output into the writer's records and renders them for the client."""

    def __init__(self, pending: tuple[bytes, bytes], *, stdout: bool, stderr: bool,
                 timestamps: bool, raw: bool) -> None:
        self.pending = {STDOUT: pending[0], STDERR: pending[1]}
        self.wants = {STDOUT: stdout, STDERR: stderr}
        self.timestamps, self.raw = timestamps, raw

    def render(self, items: list[Tapped]) -> bytes:
        out: list[bytes | memoryview] = []  # joined once: each byte is copied here only
        for item in items:
            if not self.wants.get(item.code):
                continue
            if item.flush:
                if self.pending[item.code]:
                    self._records(out, item.code, [[self.pending[item.code]]], item.ts)
                    self.pending[item.code] = b""
            else:
                if self.raw and not self.timestamps:  # a TTY's bytes: records change nothing
                    out += [self.pending[item.code], item.data]
                    self.pending[item.code] = b""
                    continue
                if item.records is not None:  # the writer's pending line was ours too
                    groups, self.pending[item.code] = item.records
                else:
                    data = self.pending[item.code] + item.data if self.pending[item.code] \
                        else item.data
                    groups, self.pending[item.code] = records_of(data)
                self._records(out, item.code, groups, item.ts)
        return b"".join(out)

    def _records(self, out: list[bytes | memoryview], code: int,
                 groups: list[Lines | list[bytes]], ts: int) -> None:
        stamp = format_time(ts).encode() if self.timestamps else None
        for group in groups:
            if isinstance(group, Lines):
                if not self.raw:
                    out += frame_lines(code, group, stamp)
                elif stamp is not None:  # a TTY's lines, each after its time
                    lead = stamp + b" "
                    out += [lead, memoryview(group.data.replace(b"\n", b"\n" + lead))
                            [: -len(lead)]]
                else:
                    out.append(group.data)
            elif not self.raw:
                out += frame_parts(code, group, False, stamp)
            else:
                for p in group:
                    out += [stamp + b" " if stamp else b"", p]


async def follow_output(writer: JsonLogWriter, owner: TapOwner, stop: trio.Event, *,
                        stdout: bool, stderr: bool, since_ns: int, tail: int | None,
                        timestamps: bool, raw: bool
                        ) -> AsyncGenerator[bytes | ThreadChunks, None]:
    """The log so far, then the output as the writer logs it, until the run ends. What is
    read from the files comes as ``ThreadChunks``, for the sender to drain in a worker thread.

    A tap that spills (the follower fell behind, typically while it sent a long history) is
    replaced: the records between the last position served and the writer's position now are
    read from the file, and a new tap starts there, in the same step. Only a rotation in that
    gap makes the follower go on from the file for good. ``since_ns`` must not be in the
    future (tapped records are newer than the subscription, so it filters only the files).
    Cancellation closes the tap and the files.
    """
    ref, end = writer.position()
    cutter = _Cutter(writer.pending(), stdout=stdout, stderr=stderr, timestamps=timestamps,
                     raw=raw)
    files = snapshot(writer.path, ref, end)  # in the same step: a few syscalls, no await
    tap = _tap(owner, writer)
    read = partial(_history, stdout=stdout, stderr=stderr, timestamps=timestamps, raw=raw)
    try:
        yield read(files, since_ns=since_ns, tail=tail)
        while True:
            if tap is not None and (items := await tap.take()) is not None:
                ref, end = items[-1].ref, items[-1].end
                if chunk := cutter.render(items):
                    yield chunk
                continue
            if tap is not None and not tap.spilled:
                await stop.wait()  # the output is all served; end once the state says so
                return
            # Spilled, or the run ended before a tap: catch up from the file, tap again.
            if tap is not None:
                log.info("a logs -f client fell %d MiB behind; it catches up from the file",
                         TAP_LIMIT >> 20)
            now_ref, now_end = writer.position()
            if now_ref is not ref:  # rotated meanwhile: the file is the way on
                async with aclosing(_from_file(writer, ref, end, stop, owner, stdout=stdout,
                                               stderr=stderr, timestamps=timestamps,
                                               raw=raw)) as rest:
                    async for chunk in rest:
                        yield chunk
                return
            cutter.pending = {STDOUT: writer.pending()[0], STDERR: writer.pending()[1]}
            gap = span(writer.path, ref, end, now_end)
            if tap is not None:
                tap.close()
            tap = _tap(owner, writer)
            yield read(gap, since_ns=0, tail=None)
            ref, end = now_ref, now_end
            if tap is None:  # the writer was closed: that was the end of the log
                await stop.wait()
                return
    finally:
        if tap is not None:
            tap.close()


def _tap(owner: TapOwner, writer: JsonLogWriter) -> LogTap | None:
    """A new tap, or None once the writer is closed (the run is over, no tap would end)."""
    if writer.closed:
        return None
    tap = LogTap(owner)
    owner.taps.add(tap)
    return tap


def _history(files: LogFiles, *, stdout: bool, stderr: bool, since_ns: int,
             tail: int | None, timestamps: bool, raw: bool) -> ThreadChunks:
    if raw:
        return ThreadChunks(raw_chunks(read_logs(files, stdout=stdout, stderr=stderr,
                                                 since_ns=since_ns, tail=tail), timestamps))
    return ThreadChunks(read_framed(files, stdout=stdout, stderr=stderr, since_ns=since_ns,
                                    tail=tail, timestamps=timestamps))


async def _from_file(writer: JsonLogWriter, ref: LogFileRef, end: int, stop: trio.Event,
                     owner: TapOwner, *, stdout: bool, stderr: bool, timestamps: bool,
                     raw: bool) -> AsyncGenerator[bytes, None]:
    grown = owner.next_publish
    if raw:
        chunks = raw_follow(follow_from(writer.path, ref, end, stdout=stdout, stderr=stderr,
                                        stop=stop, grown=grown), timestamps)
    else:
        chunks = follow_framed_from(writer.path, ref, end, stdout=stdout, stderr=stderr,
                                    timestamps=timestamps, stop=stop, grown=grown)
    async with aclosing(chunks):  # type: ignore[type-var]
        async for chunk in chunks:
            yield chunk
