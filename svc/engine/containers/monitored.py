"""Containers an older build started under conmon (``--live-restore``; this build starts them
under svc-shim, ``shimmed``): conmon holds the container's stdio and writes its output to a
log file; the supervisor follows that file from a durable cursor, hands each record to the
container's log and attached clients, and reads the exit code from conmon's exit file once
conmon has gone.

The cursor is written right after each record's write to the log (no checkpoint between the
two), when the json-file writer then holds no unfinished line: a daemon killed at any moment
reads again, at its next start, what it had not yet written; only a kill between those two
writes (microseconds), or a line longer than the writer's 16 KiB buffer, can log a line
twice. Shipping drivers (syslog, gelf...) lose what was in flight, as without live restore.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from svc.runtime.conmon.attach import MonitorInput
from svc.runtime.conmon.logtail import Cursor, CursorFile, LogTail
from svc.runtime.conmon.monitor import MonitorFiles
from svc.runtime.process import runs_as, wait_gone
from svc.runtime.runc import failure

if TYPE_CHECKING:
    pass

log = logging.getLogger("svc.engine.containers")

# (stream, bytes, time in ns, what to call right after the log's write)
Deliver = Callable[[str, bytes, int, Callable[[], None]], Awaitable[None]]
UNKNOWN_EXIT = 255  # conmon went without writing an exit code (it was killed)
# how large conmon's log may grow while the daemon is away (each line with conmon's prefix of
# about 45 bytes: 130 MB of 50-byte lines); beyond it, conmon starts a new file and the rest
# of the old one is lost (``LOST`` marks the place in the log). What the daemon has read takes
# no disk space (punched out)
OUTPUT_BOUND = 256 << 20
LOST = (b"[svc] output lost: the container wrote more than conmon keeps (%d MiB of log) "
        b"while the daemon was away; what the daemon had not read of it is gone\n"
        % (OUTPUT_BOUND >> 20))


@dataclass
class MonitorHandle:
    """What the daemon holds of a container's conmon while it supervises it."""

    pid: int
    files: MonitorFiles
    cursor: CursorFile
    input: MonitorInput | None = None  # stdin and resize (OpenStdin or a TTY)
    since_ns: int = field(default_factory=time.time_ns)  # when this daemon took it

    def close(self) -> None:
        """Let go of the descriptors (the container and its conmon go on)."""
        if self.input is not None:
            self.input.close()
        self.cursor.close()

    def ended_while_away(self) -> int | None:
        """When conmon wrote the exit file, if the container ended before this daemon took
        it (while no daemon was there); None if it ended under this daemon's watch: its end
        is then now, as without conmon (a file's time is the kernel's coarse clock, a few ms
        behind, and would come before a start this daemon recorded just after it)."""
        try:
            at = os.stat(self.files.exit_file).st_mtime_ns
        except OSError:
            return None
        return at if at < self.since_ns else None

    async def wait_end(self) -> int:
        """Until conmon has exited (after a kill, when watching failed); the exit code."""
        await wait_gone(self.pid)
        code = self.files.exit_code()
        return UNKNOWN_EXIT if code is None else code


def monitor_files(container_dir: Path, bundle: Path, cid: str) -> MonitorFiles:
    return MonitorFiles(container_dir / "monitor", bundle, cid)


async def open_handle(pid: int, files: MonitorFiles, *, wants_input: bool,
                      required: bool = False) -> MonitorHandle:
    """The daemon's handle on conmon ``pid``: the cursor file, and the stdin socket if the
    container takes input (a conmon that is gone gives none: its container has exited).

    Raises:
        RuntimeFailure: ``required`` (a start) and the stdin socket cannot be reached: the
            container would run with its input going nowhere.
    """
    handle = MonitorHandle(pid, files, CursorFile(str(files.dir / "cursor")))
    if wants_input:
        try:
            handle.input = await MonitorInput.connect(files.attach, files.bundle / "ctl")
        except OSError as exc:
            if required:
                handle.close()
                raise failure("create", 1, f"conmon's attach socket, for the container's "
                                           f"stdin: {exc}") from exc
            log.warning("container %s: conmon's attach socket: %s", files.uid[:12], exc)
    return handle


async def follow(handle: MonitorHandle, deliver: Deliver,
                 settled: Callable[[], bool]) -> int:
    """Hand what the container writes to ``deliver`` until conmon has gone and its log is
    read to the end; return the exit code conmon wrote. ``settled()`` says whether the log's
    writer holds no unfinished line (the cursor may then move past what was delivered).

    Cancellation (the daemon stops): the cursor stays after the last record delivered and
    settled; the container and its conmon go on.
    """
    tail = LogTail(str(handle.files.log), handle.cursor.read())
    if tail.lost:  # told in the daemon's log and, as a marker line, in the container's
        log.warning("container %s: %s", handle.files.uid[:12], LOST.decode().strip())
        await deliver("stderr", LOST, time.time_ns(), _nothing)
    gone = trio.Event()

    async def watch() -> None:
        await wait_gone(handle.pid)
        gone.set()
        tail.wake()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            if handle.input is not None:
                nursery.start_soon(handle.input.discard_output)
            async for batch in tail.follow(gone):
                for chunk in batch.chunks():
                    await deliver(chunk.stream, chunk.data, chunk.ts_ns,
                                  partial(_move, handle.cursor, batch.cursor_after(chunk.last),
                                          settled))
            nursery.cancel_scope.cancel()
    finally:
        tail.close()
    code = handle.files.exit_code()
    if code is None:
        log.error("container %s: conmon ended without an exit code", handle.files.uid[:12])
        return UNKNOWN_EXIT
    return code


def _nothing() -> None:
    pass


def _move(cursor: CursorFile, after: Cursor, settled: Callable[[], bool]) -> None:
    if settled():
        cursor.write(after)


def monitor_alive(pid: int, cid: str) -> bool:
    """Whether ``pid`` is still the conmon of container ``cid`` (not a reused pid)."""
    return runs_as(pid, b"conmon", cid)
