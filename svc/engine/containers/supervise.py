"""A running container's supervisor: it owns the process until it exits, copies its output to
the json-file log, the ``logs -f`` taps and the attached clients, records the exit (code, OOM,
the die and oom events), tears the container down and applies the restart policy (the delay
starts at 100 ms and doubles, up to a minute).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

import trio

from svc.engine.containers.attach import OutputHub, output_chunks
from svc.engine.containers.container import Container, Live, now_ns
from svc.engine.containers.log_tap import Tapped
from svc.engine.containers.logguard import GuardedLog
from svc.engine.containers.monitored import (
    MonitorHandle,
    follow,
)
from svc.engine.containers.shimmed import ShimHandle, follow_shim
from svc.engine.containers.shipping import Dropped, Shipper
from svc.engine.containers.state import State, transition
from svc.errors import SvcError
from svc.logdrivers.pump import LogPump
from svc.runtime.cgroups import CgroupV1
from svc.runtime.process import ContainerPipes, wait_pid
from svc.runtime.protocol import Runtime, RuntimeFailure
from svc.storage.jsonlog.options import on_full, parse_log_opts
from svc.storage.jsonlog.writer import JsonLogWriter
from svc.wire.stdcopy import STDERR, STDOUT

log = logging.getLogger("svc.engine.containers")

DRAIN_SECONDS = 2.0  # after the init exits, how long output still held by others may flow
RESTART_DELAY = 0.1
LAUNCH_WAIT = 30.0  # bound on waiting, at an exit, for the launch to record the start
RESTART_DELAY_MAX = 60.0


Save = Callable[[Container], Awaitable[None]]


class Supervisor:
    """Supervises the runner's containers. Constructed with what it uses: the runtime (to kill
    what nobody supervises any more), the cgroups (OOM), a way to save a record and to remove
    an ``AutoRemove`` container, and the runner's own steps (events, cgroup paths, teardown,
    launch for a restart)."""

    def __init__(self, runtime: Runtime, cgroups: CgroupV1, save: Save, auto_remove: Save, *,
                 event: Callable[..., None], cgroup_of: Callable[[Container], str],
                 teardown: Save, launch: Save) -> None:
        self.runtime = runtime
        self.cgroups = cgroups
        self.save = save
        self.auto_remove = auto_remove
        self.event = event
        self.cgroup_of = cgroup_of
        self.teardown = teardown
        self.launch = launch
        self.unsaved: dict[str, Container] = {}  # records a full disk held back
        self.log_dropped = Dropped()  # log messages the shipping drivers could not deliver

    async def supervise(self, c: Container, live: Live, pipes: ContainerPipes | None,
                        pump: LogPump | None = None, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the process until it exits, then record the exit and apply the restart policy.
        ``pump`` ships the output when the container's log driver does (``shipping``).

        Cancellation (daemon shutdown): the container is killed and torn down, shielded; its
        shipped lines still go to their receiver for a while (``Shipper.close``).
        """
        try:
            guard = _open_log(c)
        except (OSError, ValueError) as exc:  # the log cannot be opened: run without it
            log.error("container %s: the json-file log cannot be opened: %s", c.short_id, exc)
            guard = None
        live.log = guard.writer if guard is not None else None
        shipper = Shipper(pump, self.log_dropped) if pump is not None else None
        task_status.started()
        async with trio.open_nursery() as nursery:
            if shipper is not None:
                nursery.start_soon(shipper.run)
            try:
                await self._supervise_run(c, live, pipes, guard, shipper)
            except Exception:  # a bug must never take the daemon (and every container) down
                log.exception("supervising container %s failed", c.short_id)
            finally:
                if shipper is not None:
                    await shipper.close()

    async def _supervise_run(self, c: Container, live: Live, pipes: ContainerPipes | None,
                             guard: GuardedLog | None, shipper: Shipper | None) -> None:
        """Watch, then record the exit whatever happened: every step of the ending runs
        (a full disk fails the log's last lines and the record's save, never the ending).
        A container under a monitor is let go instead when the daemon stops (live restore)."""
        code = -1
        let_go = False
        try:
            code = await self._watch(c, live, pipes, guard, shipper)
        except Exception:
            log.exception("watching container %s failed; it is killed", c.short_id)
        except BaseException as exc:  # cancelled: the daemon stops
            let_go = live.monitor is not None and _cancelled(exc)
            raise
        finally:
            with trio.CancelScope(shield=True):
                if let_go:
                    self._let_go(c, live, guard)
                else:
                    code = await self._end_run(c, live, pipes, guard, code)
        if c.host_config.AutoRemove:
            await self.auto_remove(c)
            return
        if live.start_failure is None:  # a start that failed is the caller's error, no restart
            await self._maybe_restart(c, code)

    def _let_go(self, c: Container, live: Live, guard: GuardedLog | None) -> None:
        """The daemon stops and the container goes on under its monitor: the log is closed
        with its unfinished line left unwritten (the cursor keeps it, or is before it: it is
        read again at the next start), the descriptors are let go; nothing is torn down or
        recorded."""
        if guard is not None:
            guard.writer.drop_pending()
            guard.close()
        assert live.monitor is not None
        live.monitor.close()
        c.hub.end_run()
        log.info("container %s keeps running under its %s (pid %d)", c.short_id,
                 c.monitor_kind, live.monitor.pid)

    async def _end_run(self, c: Container, live: Live, pipes: ContainerPipes | None,
                       guard: GuardedLog | None, code: int) -> int:
        """The process is gone (or is killed now, if watching it failed): close its
        streams, tear it down, record the exit; returns the exit code recorded."""
        if code < 0:  # cancelled: kill what no one supervises any more
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.kill(c.id, signal.SIGKILL)
            with trio.move_on_after(5):
                code = await self._wait_gone(live)
        if guard is not None:
            guard.close()
        if pipes is not None:
            await pipes.aclose()
        if live.console is not None:
            await live.console.aclose()
        if live.monitor is not None:
            live.monitor.close()
        c.hub.end_run()
        oom = self._oom_killed(c)
        if live.launched is not None:  # not under a runc start, and after ``start``
            with trio.move_on_after(LAUNCH_WAIT):
                await live.launched.wait()
        live.code = live.start_failure[0] if live.start_failure is not None else code
        live.ended.set()
        await self.teardown(c)
        if live.start_failure is not None:
            code, c.state.error = live.start_failure
        at = live.monitor.ended_while_away() if live.monitor is not None else None
        await self._exited(c, code, oom, at)
        live.exited.set()
        return code

    async def _wait_gone(self, live: Live) -> int:
        if live.monitor is None:
            return await wait_pid(live.pid)
        return await live.monitor.wait_end()

    async def _watch(self, c: Container, live: Live, pipes: ContainerPipes | None,
                     guard: GuardedLog | None, shipper: Shipper | None) -> int:
        if isinstance(live.monitor, ShimHandle):
            return await self._watch_shimmed(c, live.monitor, guard, shipper)
        if live.monitor is not None:
            return await self._watch_monitored(c, live.monitor, guard, shipper)
        sources: list[tuple[Any, str]] = (
            [(pipes.stdout, "stdout"), (pipes.stderr, "stderr")] if pipes is not None
            else [(live.console, "stdout")])
        async with trio.open_nursery() as nursery:
            done: list[trio.Event] = []
            for stream, name in sources:
                ev = trio.Event()
                done.append(ev)
                nursery.start_soon(_copy_output, stream, name, guard, shipper, c.hub, ev)
            code = await wait_pid(live.pid)
            with trio.move_on_after(DRAIN_SECONDS):
                for ev in done:
                    await ev.wait()
            nursery.cancel_scope.cancel()
        return code

    async def _watch_monitored(self, c: Container, handle: MonitorHandle,
                               guard: GuardedLog | None, shipper: Shipper | None) -> int:
        """The output from conmon's log (stamped when conmon read it), then the exit code
        conmon wrote; the streams end only once it has gone (a let-go leaves them open)."""
        async def deliver(name: str, chunk: bytes, ts: int, logged: Callable[[], None]
                          ) -> None:
            await _deliver(name, chunk, ts, guard, shipper, c.hub, logged)

        def settled() -> bool:
            return guard is None or guard.writer.pending() == (b"", b"")

        code = await follow(handle, deliver, settled)
        for name in ("stdout", "stderr"):
            _end_stream(name, guard, shipper, c.hub)
        return code

    async def _watch_shimmed(self, c: Container, handle: ShimHandle,
                             guard: GuardedLog | None, shipper: Shipper | None) -> int:
        """The spool from the cursor (with the unfinished lines it kept), then the live
        output from the shim's descriptors, then the exit code the shim told; the streams
        end only then (a let-go leaves them open)."""
        if guard is not None:
            cut = guard.writer.take_back(handle.state.log_end)
            if cut:
                log.info("container %s: %d byte(s) of its log that the last daemon wrote "
                         "but had not counted are logged again from their source",
                         c.id[:12], cut)
            guard.writer.hold(handle.state.pending)

        async def deliver(name: str, chunk: bytes, ts: int, logged: Callable[[], None]
                          ) -> None:
            await _deliver(name, chunk, ts, guard, shipper, c.hub, logged)

        def pending() -> tuple[bytes, bytes]:
            return guard.writer.pending() if guard is not None else (b"", b"")

        def log_end() -> tuple[int, int] | None:
            return guard.writer.end() if guard is not None else None

        code = await follow_shim(handle, deliver, pending, log_end)
        for name in ("stdout", "stderr"):
            _end_stream(name, guard, shipper, c.hub)
        return code

    def _oom_killed(self, c: Container) -> bool:
        """Whether the kernel's OOM killer acted in the container's memory cgroup."""
        try:
            text = self.cgroups.read("memory", self.cgroup_of(c), "memory.oom_control")
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    async def _exited(self, c: Container, code: int, oom: bool, at: int | None = None) -> None:
        """Record the exit (``at``: when it happened, if it was seen late: while the
        daemon was away) and send ``oom`` and ``die``."""
        c.live = None
        st = c.state
        transition(st, "exited")
        c.hub.exit_recorded()  # with the transition: no attach sees one without the other
        st.pid, st.exit_code, st.finished_ns = 0, code, at or now_ns()
        c.monitor_pid = 0
        st.oom_killed = oom
        await self.save_or_defer(c)
        c.exits, c.last_exit_code = c.exits + 1, code
        if oom:
            self.event(c, "oom", at_ns=at)
        self.event(c, "die", at_ns=at, exitCode=str(code))
        c.notify()

    async def save_or_defer(self, c: Container) -> None:
        """Save ``c``'s record; when the disk cannot take it, the state stays true in memory
        (inspect shows it) and the record is saved with the container's next change or at
        shutdown (``save_deferred``)."""
        try:
            await self.save(c)
        except OSError as exc:
            self.unsaved[c.id] = c
            log.error("container %s: its state could not be saved (%s); it is kept in "
                      "memory and saved with its next change", c.short_id, exc.strerror or exc)
        else:
            self.unsaved.pop(c.id, None)

    async def save_deferred(self) -> None:
        """Save the records a full disk held back (shutdown); those still failing are
        logged."""
        for c in list(self.unsaved.values()):
            await self.save_or_defer(c)

    def wants_restart(self, c: Container, code: int) -> bool:
        rp = c.host_config.RestartPolicy
        name = rp.Name or "no"
        if c.manually_stopped or c.state.status is State.REMOVING or name == "no":
            return False
        if name in ("always", "unless-stopped"):
            return True
        if name == "on-failure" and code != 0:
            limit = rp.MaximumRetryCount
            return limit == 0 or c.restart_count < limit
        return False

    async def _maybe_restart(self, c: Container, code: int) -> None:
        """The restart policy's loop: wait the back-off delay, then launch again."""
        if not self.wants_restart(c, code):
            return
        delay = min(RESTART_DELAY * (2 ** c.restart_count), RESTART_DELAY_MAX)
        transition(c.state, "restarting")
        await self.save_or_defer(c)
        c.notify()
        with trio.CancelScope() as scope:
            c.restart_scope = scope
            await trio.sleep(delay)
        c.restart_scope = None
        async with c.lock:
            if scope.cancelled_caught or not self.wants_restart(c, code):
                if c.state.status is State.RESTARTING:
                    transition(c.state, "restart_abandoned")
                    await self.save_or_defer(c)
                    c.notify()
                return
            c.restart_count += 1
            try:
                await self.launch(c)
            except (SvcError, OSError) as exc:
                log.error("restarting container %s failed: %s", c.short_id, exc)
                transition(c.state, "restart_abandoned")
                await self.save_or_defer(c)
                c.notify()
                return
            self.event(c, "restart")


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation (or a group of nothing else)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def _open_log(c: Container) -> GuardedLog | None:
    if c.log_driver() != "json-file":
        return None
    opts = c.host_config.LogConfig.Config or {}
    max_size, max_file, compress = parse_log_opts(opts)
    writer = JsonLogWriter(c.log_path, max_size=max_size, max_file=max_file, compress=compress)
    return GuardedLog(writer, c.short_id, on_full(opts))


async def _copy_output(stream: Any, name: str, guard: GuardedLog | None,
                       shipper: Shipper | None, hub: OutputHub, done: trio.Event) -> None:
    """Copy one output stream to the log (or the log driver's receiver) and the attached
    clients until EOF (a pty master reports EIO at the end)."""
    try:
        async with aclosing(output_chunks(stream)) as chunks:
            async for chunk in chunks:
                await _deliver(name, chunk, time.time_ns(), guard, shipper, hub)
    finally:
        _end_stream(name, guard, shipper, hub)
        done.set()


async def _deliver(name: str, chunk: bytes, ts: int, guard: GuardedLog | None,
                   shipper: Shipper | None, hub: OutputHub,
                   logged: Callable[[], None] | None = None) -> None:
    """One chunk of output to the log (or the log driver's receiver) and the attached
    clients. Each log write is handed to the ``logs -f`` taps in the same step, with the
    writer's position after it; ``logged`` runs right after the log's write, with no
    checkpoint between them (a live-restored container's cursor moves there)."""
    code = STDOUT if name == "stdout" else STDERR
    if guard is not None:
        written, made = await guard.write(name, chunk, ts, records=bool(hub.taps))
        if written and hub.taps:
            hub.logged(Tapped(code, chunk, ts, *guard.writer.position(), records=made))
    elif shipper is not None:
        await shipper.put(name, chunk, ts)
    if logged is not None:
        logged()
    await hub.publish(code, chunk)


def _end_stream(name: str, guard: GuardedLog | None, shipper: Shipper | None,
                hub: OutputHub) -> None:
    """The end of one output stream: its unfinished line written (the other may go on)."""
    code = STDOUT if name == "stdout" else STDERR
    if shipper is not None:
        shipper.end_stream(name, time.time_ns())
    if guard is not None:
        ts = time.time_ns()
        guard.flush(ts, name)
        if hub.taps:
            hub.logged(Tapped(code, b"", ts, *guard.writer.position(), flush=True))
