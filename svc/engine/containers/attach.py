"""Attaching clients to a process's output and stdin (containers and exec instances).

``OutputHub``: each container (and exec instance) has one. The supervisor publishes every
chunk the process writes; each attached client is an ``Attachment`` with its own queue. The
policy for slow clients: a client may fall ``ATTACH_BUFFER`` (4 MiB) behind. While a client
that far behind keeps reading, the process's output waits for it (as dockerd's does, so a
fast producer cannot outrun an attached terminal); a client that reads nothing for
``STALL_SECONDS`` while that far behind is cut off (its stream ends with a note on stderr),
and the process, its log and the other clients go on.

``session`` runs one attached client over any trio stream (a hijacked connection, a
websocket adapter): output frames (stdcopy without a TTY, raw with one) coalesced into large
writes, stdin copied to the process with the detach keys watched for, half-close handled.
"""

from __future__ import annotations

import contextlib
import errno
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import trio

from svc.engine.containers.log_tap import LogTap, Tapped
from svc.wire.stdcopy import STDERR, STDOUT, encode_frame

ATTACH_BUFFER = 4 << 20
STALL_SECONDS = 1.0
WRITE_COALESCE = 1 << 20  # at most this much is joined into one write
DEFAULT_DETACH_KEYS = b"\x10\x11"  # ctrl-p, ctrl-q


READ_CHUNK = 1 << 20
DENSE_GAP = 0.001  # reads closer together than this are a bulk stream...
SMALL_READ = 1 << 19  # ...and if they are small, the next read waits DENSE_GAP to gather more


async def output_chunks(stream: Any) -> AsyncGenerator[bytes, None]:
    """A process's output, read so that bulk output arrives in large pieces.

    When small reads come less than a millisecond apart, the next read waits a millisecond,
    so the pipe (1 MiB) gathers what the process writes meanwhile: a program writing 4 KiB
    at a time costs one trip through the loop per ~200 KiB instead of per write. Interactive
    output (reads far apart) is never delayed. Ends at EOF (a pty master reports EIO).
    """
    last = -1.0
    while True:
        try:
            chunk = await stream.receive_some(READ_CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except OSError as exc:
            if exc.errno == errno.EIO:
                return
            raise
        if not chunk:
            return
        yield bytes(chunk)
        now = trio.current_time()
        if len(chunk) < SMALL_READ and now - last < DENSE_GAP:
            await trio.sleep(DENSE_GAP)
        last = now


async def copy_to_hub(stream: Any, kind: int, hub: OutputHub, done: trio.Event) -> None:
    """Copy one output stream of a process nobody logs (an exec) to its attached clients
    until its end; then set ``done``."""
    try:
        async with aclosing(output_chunks(stream)) as chunks:
            async for chunk in chunks:
                await hub.publish(kind, chunk)
    except OSError:
        pass  # the process's side went away
    finally:
        done.set()


class Attachment:
    """One client's queue of (stream, bytes) chunks."""

    def __init__(self, hub: OutputHub, stdout: bool, stderr: bool) -> None:
        self.hub = hub
        self.wants = {STDOUT: stdout, STDERR: stderr}
        self.chunks: deque[tuple[int, bytes]] = deque()
        self.size = 0
        self.ended = False
        self.overflowed = False
        self.progress_at = trio.current_time()  # when the client last took its queue
        self._wake = trio.Event()

    def push(self, stream: int, data: bytes) -> None:
        if self.ended or not self.wants.get(stream):
            return
        self.chunks.append((stream, data))
        self.size += len(data)
        self._wake.set()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    async def take(self) -> list[tuple[int, bytes]] | None:
        """Everything queued (at least one chunk); None once the stream has ended."""
        while not self.chunks:
            if self.ended:
                return None
            self._wake = trio.Event()
            await self._wake.wait()
        out = []
        size = 0
        while self.chunks and size < WRITE_COALESCE:
            item = self.chunks.popleft()
            out.append(item)
            size += len(item[1])
        self.size -= size
        self.progress_at = trio.current_time()
        self.hub.drained()
        return out

    def cut_off(self) -> None:
        self.overflowed = True
        self.chunks.clear()
        self.size = 0
        self.end()

    def close(self) -> None:
        self.hub.subscribers.discard(self)
        self.ended = True


class OutputHub:
    """Fan-out of one process's output to the attached clients."""

    def __init__(self) -> None:
        self.subscribers: set[Attachment] = set()
        self.taps: set[LogTap] = set()  # logs -f followers (log_tap)
        self._drained = trio.Event()
        self._published = trio.Event()
        # the run's output has ended but its exit is not recorded yet (the container still
        # shows as running): an attach now gets the end at once, not the next run's output
        self.run_ended = False

    def logged(self, item: Tapped) -> None:
        """The supervisor wrote ``item`` to the log: hand it to the followers, at once."""
        for tap in list(self.taps):
            tap.push(item)

    def next_publish(self) -> trio.Event:
        """An event set at the next publish (or end of the run): by then the chunk is in the
        log too, so ``logs -f`` readers wake on it rather than on a timer."""
        return self._published

    def subscribe(self, *, stdout: bool, stderr: bool) -> Attachment:
        a = Attachment(self, stdout, stderr)
        if self.run_ended:
            a.end()
        else:
            self.subscribers.add(a)
        return a

    def exit_recorded(self) -> None:
        """The exit is recorded (the container shows as stopped): attaching from now on waits
        for the next run, as ``docker start -a`` does."""
        self.run_ended = False

    def drained(self) -> None:
        self._drained.set()

    async def publish(self, stream: int, data: bytes) -> None:
        """Queue ``data`` for every client; then wait while a client that is still reading is
        more than ``ATTACH_BUFFER`` behind, cutting off any that has stalled.

        Cancellation: a checkpoint; the data is queued already.
        """
        self._wake_publish_waiters()
        for a in list(self.subscribers):
            a.push(stream, data)
        while True:
            behind = [a for a in self.subscribers if a.size > ATTACH_BUFFER and not a.ended]
            if not behind:
                await trio.lowlevel.checkpoint()
                return
            now = trio.current_time()
            for a in behind:
                if now - a.progress_at > STALL_SECONDS:
                    a.cut_off()
                    self.subscribers.discard(a)
            behind = [a for a in behind if not a.ended]
            if not behind:
                return
            self._drained = trio.Event()
            with trio.move_on_at(min(a.progress_at for a in behind) + STALL_SECONDS):
                await self._drained.wait()

    def _wake_publish_waiters(self) -> None:
        self._published.set()
        self._published = trio.Event()

    def end_run(self) -> None:
        """The process exited: every attached stream ends once its queue is drained."""
        self.run_ended = True
        self._wake_publish_waiters()
        for a in self.subscribers:
            a.end()
        self.subscribers.clear()
        for tap in self.taps:
            tap.end()
        self.taps.clear()


@dataclass
class StdinTarget:
    """Where an attached client's input goes, once the process exists."""

    get: Callable[[], Awaitable[Any]]  # the stream to write to (waits for a running process)
    close_on_eof: bool  # StdinOnce: the first client's EOF closes the process's stdin
    lock: trio.Lock = field(default_factory=trio.Lock)


@dataclass
class SessionOptions:
    stdin: bool
    tty: bool
    detach_keys: bytes = DEFAULT_DETACH_KEYS


class DetachKeyFilter:
    """Passes input through, holding back a partial detach sequence; reports a full one."""

    def __init__(self, keys: bytes) -> None:
        self.keys = keys
        self.held = b""

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """(bytes to forward, whether the sequence was typed)."""
        if not self.keys:
            return data, False
        if not self.held and data.find(self.keys[:1]) < 0:
            return data, False  # the common case: no key byte at all (checked in C)
        out = bytearray()
        for byte in data:
            candidate = self.held + bytes([byte])
            if self.keys.startswith(candidate):
                if candidate == self.keys:
                    return bytes(out), True
                self.held = candidate
            else:
                out += candidate
                self.held = b""
        return bytes(out), False


async def session(stream: trio.abc.Stream, hub_attachment: Attachment | None,
                  opts: SessionOptions, stdin: StdinTarget | None,
                  replay: Callable[[], Any] | None = None) -> str:
    """Serve one attached client until the output ends, it detaches or it goes away.

    Returns how it ended: "eof" (the process's output ended), "detach", "gone" or "overflow".
    Cancellation: everything stops; the attachment is closed.
    """
    ended = "eof"
    detached = trio.Event()
    try:
        if replay is not None:
            async for chunk in replay():
                await stream.send_all(chunk)
        async with trio.open_nursery() as nursery:
            if opts.stdin and stdin is not None:
                async def pump() -> None:
                    # the client may go away: the output side notices that too
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await _pump_stdin(stream, stdin, opts.detach_keys, detached)
                    if detached.is_set():
                        nursery.cancel_scope.cancel()

                nursery.start_soon(pump)
            if hub_attachment is not None:
                try:
                    ended = await _write_output(stream, hub_attachment, opts.tty)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    ended = "gone"
            nursery.cancel_scope.cancel()
        if detached.is_set():
            ended = "detach"
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        ended = "gone"  # during the replay of the logs
    finally:
        if hub_attachment is not None:
            hub_attachment.close()
    return ended


async def _write_output(stream: trio.abc.Stream, a: Attachment, tty: bool) -> str:
    while (batch := await a.take()) is not None:
        if tty:
            data = b"".join(chunk for _, chunk in batch)
        else:
            data = b"".join(encode_frame(kind, chunk) for kind, chunk in batch)
        await stream.send_all(data)
    if a.overflowed:
        note = b"svc: this client fell more than 4 MiB behind the output and was detached\n"
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(note if tty else encode_frame(STDERR, note))
        return "overflow"
    return "eof"


async def _pump_stdin(stream: trio.abc.Stream, target: StdinTarget, keys: bytes,
                      detached: trio.Event) -> None:
    keyfilter = DetachKeyFilter(keys)
    sink = None
    while True:
        received = await stream.receive_some()
        if not received:
            break
        data, detach = keyfilter.feed(bytes(received))
        if data:
            if sink is None:
                sink = await target.get()
            if sink is not None:
                async with target.lock:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await sink.send_all(data)
        if detach:
            detached.set()
            return
    # the client half-closed: end of its input
    if target.close_on_eof:
        if sink is None:
            sink = await target.get()
        if sink is not None:
            with contextlib.suppress(trio.ClosedResourceError, OSError):
                await sink.aclose()
    await trio.sleep_forever()  # keep serving output until it ends
