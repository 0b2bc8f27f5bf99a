"""Following a json-file log as it grows (``docker logs -f``), across rotations.

The reading machinery lives in ``logparse`` (parsing, framing) and ``logreader`` (files,
tail planning); this module adds
the live part: poll for appended lines every ``POLL_INTERVAL``, finish a rotated file through
its open descriptor, continue with the new one, and end when the container has stopped.
"""

from __future__ import annotations

import io
import os
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
)
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import TypeVar

import trio

from svc.storage.jsonlog.reader import (
    BLOCK,
    POLL_INTERVAL,
    _blocks,
    _File,
    _open_all,
    _plan,
    _read_plan,
    _tail_start,
    _want,
)
from svc.storage.jsonlog.writer import LogFileRef
from svc.wire.jsonlog_parse import LogRecord, to_frames, to_records

T = TypeVar("T")



def _read_live(f: _File, pos: int, convert: Callable[[bytes], T]) -> tuple[T | None, int]:
    """Convert the whole lines after ``pos`` (about ``BLOCK`` bytes); return the new pos.

    A record still being written is not a line yet: it is read again on the next call.
    """
    f.seek(pos)
    data = f.read(BLOCK)
    cut = data.rfind(b"\n") + 1
    if not cut and len(data) == BLOCK:  # one absurdly long line: take it whole
        data += f.read()
        cut = data.rfind(b"\n") + 1
    return (convert(data[:cut]) if cut else None), pos + cut


def _next(it: Iterator[T]) -> T | None:
    return next(it, None)


def _successors(path: Path, ino: int) -> tuple[io.FileIO, list[io.FileIO]] | None:
    """After a rotation: the new live file, and the rotated files between it and ``ino``.

    More than one rotation may have happened since the last poll. The live file is opened
    first and each rotated one as it is looked at, so a rotation meanwhile cannot swap a file
    for another; only plain files are chained by inode (a gzipped one is a new inode).
    """
    try:
        live = open(path, "rb", buffering=0)  # noqa: SIM115
    except FileNotFoundError:
        return None
    live_ino = os.fstat(live.fileno()).st_ino
    between: list[io.FileIO] = []
    for i in range(1, 1000):
        try:
            g = open(path.with_name(f"{path.name}.{i}"), "rb", buffering=0)  # noqa: SIM115
        except FileNotFoundError:
            break
        g_ino = os.fstat(g.fileno()).st_ino
        if g_ino == ino:
            g.close()
            return live, between[::-1]
        if g_ino == live_ino:  # rotated since it was opened: it is read as the live file
            g.close()
        else:
            between.append(g)
    for g in between:
        g.close()
    return live, []


def _read_files(files: list[io.FileIO]) -> Generator[bytes, None, None]:
    try:
        for g in files:
            yield from _blocks(g)
    finally:
        for g in files:
            g.close()


async def _convert_blocks(
    blocks: Generator[bytes, None, None], convert: Callable[[bytes], T]
) -> AsyncGenerator[T, None]:
    """Convert blocks one by one, each read and converted in a worker thread."""
    try:
        converted = map(convert, blocks)
        while (item := await trio.to_thread.run_sync(_next, converted)) is not None:
            yield item
    finally:
        blocks.close()


def _waiter(stop: trio.Event | None, poll: float) -> Callable[[trio.Event | None],
                                                            Awaitable[None]]:
    async def wait(growth: trio.Event | None) -> None:
        """Until ``stop`` or ``growth`` is set, or ``poll`` seconds have passed."""
        with trio.move_on_after(poll):
            async with trio.open_nursery() as nursery:
                for ev in (stop, growth):
                    if ev is not None:
                        nursery.start_soon(_set_then_cancel, ev, nursery.cancel_scope)
                if stop is None and growth is None:
                    await trio.sleep_forever()

    return wait


async def _follow(
    path: Path, convert: Callable[[bytes], T], *, tail: int | None, since_ns: int,
    stop: trio.Event | None, poll: float, grown: Callable[[], trio.Event] | None,
) -> AsyncGenerator[T, None]:
    wait = _waiter(stop, poll)
    run = trio.to_thread.run_sync
    if not await run(path.exists):
        tail = None  # everything the container writes from now on is new
    while not (files := await run(_open_all, path)) or files[-1].path != path:
        for lf in files:  # the live file appears when the container first starts
            lf.raw.close()
        if stop is not None and stop.is_set():
            return
        await wait(None)
    f = files[-1].raw
    try:
        try:
            plan = await run(_plan, files, tail, since_ns)
            rotated = _read_plan([e for e in plan if e[0].raw is not f])
            async with aclosing(_convert_blocks(rotated, convert)) as items:
                async for item in items:
                    yield item
        finally:
            for lf in files[:-1]:
                lf.raw.close()
        live = [e[1] for e in plan if e[0].raw is f]
        pos = live[0] if live else (await run(_tail_start, files[-1], 0))[0]
    except BaseException:
        f.close()
        raise
    async with aclosing(_follow_live(path, f, pos, convert, stop=stop, poll=poll,
                                     grown=grown)) as items:
        async for item in items:
            yield item


async def _follow_live(
    path: Path, f: io.FileIO, pos: int, convert: Callable[[bytes], T], *,
    stop: trio.Event | None, poll: float, grown: Callable[[], trio.Event] | None,
) -> AsyncGenerator[T, None]:
    """Whole lines of ``f`` from ``pos`` on as they are written, then of the files that
    rotation puts after it; ``f`` is closed at the end."""
    wait = _waiter(stop, poll)
    run = trio.to_thread.run_sync
    try:
        ino = os.fstat(f.fileno()).st_ino
        while True:
            final = stop is not None and stop.is_set()
            growth = grown() if grown is not None else None  # before the read: none missed
            got, pos = await run(_read_live, f, pos, convert)
            if got is not None:
                yield got
                continue  # more may be waiting: poll again only once caught up
            try:
                st: os.stat_result | None = await run(os.stat, path)
            except FileNotFoundError:
                st = None  # mid-rotation: the new file is not there yet
            if st is not None and st.st_ino != ino:  # rotated: finish the old file first
                while (step := await run(_read_live, f, pos, convert))[0] is not None:
                    pos = step[1]
                    yield step[0]
                if (found := await run(_successors, path, ino)) is None:
                    await wait(growth)  # the new file is not there yet
                    continue
                f.close()
                f, between = found
                ino, pos = os.fstat(f.fileno()).st_ino, 0
                try:
                    async with aclosing(_convert_blocks(_read_files(between), convert)) as items:
                        async for item in items:
                            yield item
                finally:
                    for g in between:  # also if cancelled before the generator started
                        g.close()
            elif st is not None and st.st_size < pos:  # truncated in place (max-file 1)
                pos = 0
            elif final:
                return
            else:
                await wait(growth)
    finally:
        f.close()


async def _set_then_cancel(ev: trio.Event, scope: trio.CancelScope) -> None:
    await ev.wait()
    scope.cancel()


async def follow(
    path: Path, *, stdout: bool, stderr: bool, since_ns: int = 0, tail: int | None = None,
    stop: trio.Event | None = None, poll_interval: float = POLL_INTERVAL,
    grown: Callable[[], trio.Event] | None = None,
) -> AsyncIterator[LogRecord]:
    """Yield the existing records (as :func:`read_logs`), then new ones as they are written.

    The live file is polled every ``poll_interval`` seconds. On rotation the old file is read
    to its end through the descriptor already open (even if it was compressed and removed
    meanwhile), then the plain rotated files newer than it, then the new file. Limits, as
    with dockerd: a gzipped file cannot be chained by inode, so with ``compress`` the records
    of a file rotated out again before the next poll are missed; and a file truncated in
    place (``max-file`` 1) is read again from its start, so records written between the last
    poll and the truncation are lost.

    Args:
        stop: once set (the container stopped and its writer was closed), whatever was
            written is drained and the iteration ends. Without it, it ends only when cancelled.
        grown: the writer's signal, when it lives in this process: returns an event that is
            set at its next write. A caught-up reader then wakes at once instead of at the
            next poll (polling still catches what the signal does not report).

    Cancellation: each read runs in a worker thread and finishes before the cancellation is
    delivered; the open files are closed when the generator is. A caller that may stop
    iterating early should wrap it in ``contextlib.aclosing`` so that happens at once.
    """
    want = _want(stdout, stderr)
    if not want:
        return
    convert = partial(to_records, want, since_ns)
    batches = _follow(path, convert, tail=tail, since_ns=since_ns, stop=stop, poll=poll_interval,
                      grown=grown)
    async with aclosing(batches):
        async for batch in batches:
            for rec in batch:
                yield rec


async def follow_framed(
    path: Path, *, stdout: bool, stderr: bool, since_ns: int = 0, tail: int | None = None,
    timestamps: bool = False, stop: trio.Event | None = None,
    poll_interval: float = POLL_INTERVAL, grown: Callable[[], trio.Event] | None = None,
) -> AsyncIterator[bytes]:
    """:func:`follow` as stdcopy frames in chunks, like :func:`read_framed`."""
    want = _want(stdout, stderr)
    if not want:
        return
    convert = partial(to_frames, want, since_ns, timestamps)
    chunks = _follow(path, convert, tail=tail, since_ns=since_ns, stop=stop, poll=poll_interval,
                      grown=grown)
    async with aclosing(chunks):
        async for chunk in chunks:
            if chunk:
                yield chunk


async def follow_from(
    path: Path, ref: LogFileRef, pos: int, *, stdout: bool, stderr: bool,
    stop: trio.Event | None = None, poll_interval: float = POLL_INTERVAL,
    grown: Callable[[], trio.Event] | None = None,
) -> AsyncIterator[LogRecord]:
    """:func:`follow`'s live part from a writer's position (``ref``, ``pos``): for a reader
    that was served from elsewhere up to that point."""
    want = _want(stdout, stderr)
    batches = _follow_live(path, ref.open(), pos, partial(to_records, want, 0), stop=stop,
                           poll=poll_interval, grown=grown)
    async with aclosing(batches):
        async for batch in batches:
            for rec in batch:
                yield rec


async def follow_framed_from(
    path: Path, ref: LogFileRef, pos: int, *, stdout: bool, stderr: bool,
    timestamps: bool = False, stop: trio.Event | None = None,
    poll_interval: float = POLL_INTERVAL, grown: Callable[[], trio.Event] | None = None,
) -> AsyncIterator[bytes]:
    """:func:`follow_from` as stdcopy frames in chunks."""
    want = _want(stdout, stderr)
    chunks = _follow_live(path, ref.open(), pos, partial(to_frames, want, 0, timestamps),
                          stop=stop, poll=poll_interval, grown=grown)
    async with aclosing(chunks):
        async for chunk in chunks:
            if chunk:
                yield chunk

