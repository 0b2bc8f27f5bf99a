"""Containers held by svc-shim (live restore): the shim holds the container's pipes or pty and
its exit status while no daemon does, and hands a connected daemon its descriptors; the
daemon then reads the container's output itself, as it does without live restore.

What the daemon owes the shim's design (``svc.runtime.shim``):
- **At start or after a restart**, the spool (what the shim drained while no daemon was
  connected) is read from the cursor to the size the shim reported, before the live pipes:
  the order the container wrote in is kept. The spool's space is then given back.
- **No chunk is lost to a SIGKILL**: an output pipe is peeked (``PeekedPipe``), and a chunk
  is taken out of it only once it is in the log, in the same step as the cursor's write
  (which also keeps the log's unfinished lines and the log's end). A kill between the
  log's write and the cursor's (no checkpoint between them, but the thread may be
  preempted there) leaves one chunk in the log that the cursor does not count: the next
  daemon cuts the log back to the recorded end before it logs that chunk again. A TTY's
  output (a pty cannot be peeked) loses what was read and not yet written.
- **stdin**: the shim keeps its own end open (a daemon going is no EOF for the container);
  a client's EOF under ``StdinOnce`` tells the shim to close it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from svc.engine.containers.attach import output_chunks
from svc.engine.containers.monitored import UNKNOWN_EXIT, Deliver
from svc.runtime.process import Console, runs_as, wait_gone
from svc.runtime.protocol import Created
from svc.runtime.runc import failure
from svc.runtime.shim import spool
from svc.runtime.shim.channel import ShimChannel, ShimError
from svc.runtime.shim.cursor import CursorState, SpoolCursor
from svc.runtime.shim.launch import Shim, ShimFiles
from svc.runtime.shim.peek import PeekedPipe

if TYPE_CHECKING:
    from svc.engine.containers.container import Container

log = logging.getLogger("svc.engine.containers")

KIND = "shim"  # a container record's ``monitor_kind``
DRAIN_SECONDS = 2.0  # after the end, how long output still held by others may flow
# how much output a shim keeps while no daemon reads it; beyond, it counts what it drops
# and the log gets ``LOST`` where the rest would have been
SPOOL_MAX = 256 << 20
LOST = ("[svc] output lost: the container wrote more than the shim keeps ({mib} MiB) while "
        "the daemon was away; {n} bytes of it are gone\n")


class ShimStdin:
    """The container's stdin as the daemon writes it: its own copy of the pipe's write end.
    Closing it (a client's EOF under ``StdinOnce``) tells the shim to close its copy too:
    only then does the container read EOF."""

    def __init__(self, fd: int, channel: ShimChannel) -> None:
        self._stream = trio.lowlevel.FdStream(fd)
        self._channel = channel

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        self._channel.close_stdin()
        await self._stream.aclose()

    def close(self) -> None:
        """Let go (the daemon stops): the shim's copy stays open."""
        self._stream.close()


@dataclass
class ShimHandle:
    """What the daemon holds of a container's shim while it supervises it."""

    pid: int
    files: ShimFiles
    cursor: SpoolCursor
    state: CursorState  # as the cursor was when this daemon took the container
    channel: ShimChannel | None = None  # None: the shim had gone (the container ended)
    stdout: PeekedPipe | None = None
    stderr: PeekedPipe | None = None
    stdin: ShimStdin | None = None
    console: Console | None = None
    since_ns: int = field(default_factory=time.time_ns)  # when this daemon took it

    def close(self) -> None:
        """Let go of the descriptors (the container and its shim go on; what was read and
        not consumed stays in the pipes, for the shim)."""
        for pipe in (self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        if self.stdin is not None:
            self.stdin.close()
        if self.console is not None:
            self.console.close()
        if self.channel is not None:
            self.channel.close()
        self.cursor.close()

    async def wait_end(self) -> int:
        """Until the shim has exited (after a kill, when watching failed); the exit code."""
        with contextlib.suppress(OSError):
            await wait_gone(self.pid)
        status = self.files.exit_status()
        return UNKNOWN_EXIT if status is None else status[0]

    def ended_while_away(self) -> int | None:
        """When the container ended, if that was before this daemon took it (told at
        connect, or the shim had gone); None if this daemon saw the end: it is now."""
        told = self.channel.hello.exit if self.channel is not None else self.files.exit_status()
        if told is None or told[1] >= self.since_ns:
            return None
        return told[1]


def shim_files(container_dir: Path) -> ShimFiles:
    return ShimFiles(container_dir / "shim")


async def create_shimmed(shim: Shim, c: Container, bundle: Path) -> tuple[Created, ShimHandle]:
    """``runc create`` of ``c`` under a new shim, connected; ``c.monitor_pid`` names the
    shim. The cursor starts afresh (this run's spool is new).

    Raises:
        RuntimeFailure: runc create failed (runc's words), or the shim cannot be reached.
    """
    files = shim_files(c.dir)
    files.dir.mkdir(parents=True, exist_ok=True)
    (files.dir / "cursor").unlink(missing_ok=True)
    launched = await shim.launch(c.id, files, bundle, terminal=c.tty, stdin=c.config.OpenStdin)
    c.monitor_pid, c.monitor_kind = launched.shim_pid, KIND
    try:
        handle = await connect(launched.shim_pid, files)
    except ShimError as exc:
        raise failure("create", 1, f"svc-shim of the container: {exc}") from exc
    return Created(launched.pid, None), handle


async def connect(pid: int, files: ShimFiles) -> ShimHandle:
    """The daemon's handle on shim ``pid``, connected, with the container's descriptors
    (the output pipes resume after what the cursor says is logged).

    Raises:
        ShimError: the shim does not answer (it has exited).
    """
    channel = await ShimChannel.connect(files.socket)
    cursor = SpoolCursor(str(files.dir / "cursor"))
    handle = ShimHandle(pid, files, cursor, cursor.read(), channel)
    fds = channel.hello.fds
    if len(fds) == 1:
        handle.console = Console(fds[0])
    elif len(fds) >= 4:
        taken, logged = channel.hello.taken, handle.state.logged
        handle.stdout = PeekedPipe(fds[0], fds[2], taken[0], logged[0])
        handle.stderr = PeekedPipe(fds[1], fds[3], taken[1], logged[1])
        if len(fds) == 5:
            handle.stdin = ShimStdin(fds[4], channel)
    return handle


def gone_handle(pid: int, files: ShimFiles) -> ShimHandle | None:
    """A handle on a container whose shim has gone while no daemon was there: its spool and
    exit file (None if there is no exit file: nothing to take back)."""
    if files.exit_status() is None:
        return None
    cursor = SpoolCursor(str(files.dir / "cursor"))
    return ShimHandle(pid, files, cursor, cursor.read())


def shim_alive(pid: int, cid: str) -> bool:
    """Whether ``pid`` is still the shim of container ``cid`` (not a reused pid)."""
    return runs_as(pid, b"svc-shim", cid)


async def follow_shim(handle: ShimHandle, deliver: Deliver,
                      pending: Callable[[], tuple[bytes, bytes]],
                      log_end: Callable[[], tuple[int, int] | None] = lambda: None) -> int:
    """Hand the spool (from the cursor), then the live output, to ``deliver`` until the
    container has ended and its output is read; return its exit code. ``pending()`` gives
    the log's unfinished lines and ``log_end()`` the log's end (``JsonLogWriter.end``),
    kept in the cursor with each move.

    Cancellation (the daemon stops): the cursor is after the last chunk delivered; what is
    not in the log is in the pipes (the shim drains them) or in the spool; the container
    and its shim go on.
    """
    state = handle.state
    hello = handle.channel.hello if handle.channel is not None else None
    stop = hello.spool_size if hello is not None else _size(handle.files.spool)
    dropped = hello.dropped if hello is not None else _dropped(handle.files)
    logged = list(state.logged)

    def save(offset: int) -> None:
        handle.cursor.write(CursorState(offset, pending(), state.dropped, (logged[0], logged[1]),
                                        log_end()))

    for rec in spool.records(handle.files.spool, state.offset, stop):
        i = 0 if rec.stream == "stdout" else 1
        data = rec.data[max(0, logged[i] - rec.at):]  # (what the log has is not repeated)
        logged[i] = max(logged[i], rec.at + len(rec.data))
        if data:
            await deliver(rec.stream, data, rec.ts_ns, partial(save, rec.end))
    if dropped > state.dropped:  # told once, where the lost output would have been
        text = LOST.format(mib=SPOOL_MAX >> 20, n=dropped - state.dropped)
        log.warning("container %s: %s", handle.files.dir.parent.name[:12], text.strip())
        state.dropped = dropped
        await deliver("stderr", text.encode(), time.time_ns(), partial(save, stop))
    if stop > state.offset:
        save(stop)
        await trio.to_thread.run_sync(spool.punch, handle.files.spool, stop)
    if handle.channel is None:
        status = handle.files.exit_status()
        return UNKNOWN_EXIT if status is None else status[0]
    handle.channel.ack(stop)

    def moved(stream: int, offset: int) -> None:  # a live chunk is in the log: so says the
        logged[stream] = offset                   # cursor, before the shim takes it
        save(stop)

    return await _follow_live(handle, deliver, moved)


async def _follow_live(handle: ShimHandle, deliver: Deliver,
                       moved: Callable[[int, int], None]) -> int:
    channel = handle.channel
    assert channel is not None
    sources: list[tuple[PeekedPipe | Console, str]] = (
        [(handle.console, "stdout")] if handle.console is not None
        else [(p, n) for p, n in ((handle.stdout, "stdout"), (handle.stderr, "stderr"))
              if p is not None])
    ended = await until_exit(channel, [partial(_copy, source, name, deliver, moved)
                                       for source, name in sources])
    if ended is None:
        log.error("container %s: its shim ended without telling the exit",
                  handle.files.dir.parent.name[:12])
        status = handle.files.exit_status()
        return UNKNOWN_EXIT if status is None else status[0]
    return ended[0]


async def until_exit(channel: ShimChannel, copies: list[Callable[[trio.Event], Awaitable[None]]]
                     ) -> tuple[int, int] | None:
    """Run ``copies`` (each sets its event at its stream's end) and the channel's reader
    until the shim tells the end (None: it went without) and the streams have ended, or
    ``DRAIN_SECONDS`` after it (what holds them past the end cannot keep the daemon); then
    tell the shim the daemon is done."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.run)
        done: list[trio.Event] = []
        for copy in copies:
            ev = trio.Event()
            done.append(ev)
            nursery.start_soon(copy, ev)
        ended = await channel.wait_exit()
        with trio.move_on_after(DRAIN_SECONDS):
            for ev in done:
                await ev.wait()
        channel.done()
        nursery.cancel_scope.cancel()
    return ended


async def _copy(source: PeekedPipe | Console, name: str, deliver: Deliver,
                moved: Callable[[int, int], None], done: trio.Event) -> None:
    """One stream's chunks to ``deliver``; a peeked pipe's chunk is taken out of the pipe
    (by the shim) once it is in the log and the cursor says so."""
    def logged() -> None:
        if isinstance(source, PeekedPipe):
            moved(0 if name == "stdout" else 1, source.offset)
            source.consume()

    try:
        async with aclosing(output_chunks(source)) as chunks:
            async for chunk in chunks:
                await deliver(name, chunk, time.time_ns(), logged)
    except trio.BrokenResourceError:  # the shim went (killed): the end of what it held
        pass
    done.set()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _dropped(files: ShimFiles) -> int:
    """What a shim that has gone dropped (its exit file's third figure)."""
    try:
        words = files.exit_file.read_text().split()
        return int(words[2]) if len(words) > 2 else 0
    except (OSError, ValueError):
        return 0
