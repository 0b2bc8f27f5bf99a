"""The lifecycle verbs of a container: start, wait, stop, restart, kill, pause and unpause,
each under the container's lock with dockerd's rules from the state table. A verb that waits
for an exit waits on the container's ``changed`` event, never on the process itself."""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable

import trio

from svc.engine.containers.config import stop_signal
from svc.engine.containers.container import Container, Live
from svc.engine.containers.run import Runner
from svc.engine.containers.state import State, require, transition
from svc.errors import InvalidParameter
from svc.runtime.process import signal_number
from svc.runtime.protocol import Runtime, RuntimeFailure

RUNNING_STATES = (State.RUNNING, State.PAUSED, State.RESTARTING)

log = logging.getLogger("svc.engine.containers")


class Lifecycle:
    """Constructed with what the verbs use: the runtime (signals, pause), the runner
    (launch, events, settling an exit) and a way to save a record."""

    def __init__(self, runtime: Runtime, runner: Runner,
                 save: Callable[[Container], Awaitable[None]]) -> None:
        self.runtime = runtime
        self.runner = runner
        self.save = save

    async def start(self, c: Container) -> None:
        """Start ``c``. A process that has ended but whose exit is still being recorded (its
        teardown runs) is waited for: it has exited, so this start runs it again instead of
        answering "already started" (compose's ``run`` starts, attaches, starts again)."""
        live = c.live
        if live is not None and live.ended.is_set():
            await live.exited.wait()
        async with c.lock:
            require(c.state.status, "start", c.id)
            c.manually_stopped = False
            await self.runner.launch(c)

    async def wait_exit(self, c: Container, after: int | None = None) -> int:
        """Block until ``c``'s next exit (the first after exit number ``after``, by default
        the current count), or until it is neither running, paused nor restarting; that
        exit's code. As with dockerd, a restart policy does not make ``wait`` wait for a
        stop for good (forever with ``always``): it returns at each exit."""
        seen = c.exits if after is None else after
        while True:
            changed = c.changed
            if c.exits != seen:
                return c.last_exit_code
            if c.state.status not in RUNNING_STATES and c.live is None:
                return c.state.exit_code
            await changed.wait()

    async def wait_ended(self, c: Container, after: int) -> int:
        """The exit code of the run that follows exit number ``after``, as soon as its
        process has exited and its output is delivered: before the supervisor has torn the
        container down and recorded the exit. Enough for a commit of its file system (the
        builder's), not for a removal. The recorded exit when it has come already.

        Cancellation: a checkpoint; nothing is left behind."""
        live = c.live
        if live is not None and c.exits == after:
            await live.ended.wait()
            return live.code
        return await self.wait_exit(c, after)

    async def wait_live_exit(self, c: Container, timeout: float | None) -> bool:
        """Wait for the current process to exit; False on timeout."""
        live = c.live
        return True if live is None else await _ended(live, timeout)

    async def stop(self, c: Container, timeout: int | None) -> None:
        """The stop signal, then SIGKILL after ``timeout``. The container's lock is held only
        to send the signal: its grace period is waited out without it, so a ``kill`` (compose's
        second Ctrl-C), a second ``stop`` with a shorter timeout or an ``rm -f`` acts at once,
        as with the engines, and this stop returns when the process has ended."""
        async with c.lock:
            require(c.state.status, "stop", c.id)
            live = await self._begin_stop(c)
        if live is not None:
            await self._finish_stop(c, live, 10 if timeout is None else timeout)
        self.runner.event(c, "stop")

    async def stop_all(self, containers: list[Container], timeout: float) -> None:
        """Daemon shutdown: each running container gets its stop signal, then SIGKILL, all
        at once; one that fails is logged (the next start cleans up) and the others go on."""
        async def one(c: Container) -> None:
            try:
                async with c.lock:
                    if c.state.status in RUNNING_STATES:
                        was_manual = c.manually_stopped
                        await self.stop_locked(c, timeout)
                        c.manually_stopped = was_manual  # a shutdown is not a user's stop
                        await self.runner.supervisor.save_or_defer(c)
            except Exception:
                log.exception("stopping container %s at shutdown failed", c.short_id)

        async with trio.open_nursery() as nursery:
            for c in containers:
                nursery.start_soon(one, c)

    async def stop_locked(self, c: Container, timeout: float) -> None:
        """``stop`` for a caller that holds the lock throughout (restart, shutdown)."""
        live = await self._begin_stop(c)
        if live is not None:
            await self._finish_stop(c, live, timeout)

    async def _begin_stop(self, c: Container) -> Live | None:
        """Mark the stop and send the stop signal (the caller holds the lock); the process
        that must end, or None (a restart's wait, cancelled)."""
        c.manually_stopped = True
        await self.runner.supervisor.save_or_defer(c)  # a full disk must not keep it running
        if c.state.status is State.RESTARTING:
            if c.restart_scope is not None:
                c.restart_scope.cancel()
            return None
        live = c.live
        await self.send_signal(c, stop_signal(c.config))
        return live

    async def _finish_stop(self, c: Container, live: Live, timeout: float) -> None:
        """Wait for ``live`` to end; after ``timeout``, SIGKILL it (never a process started
        since: the check and the signal have no checkpoint between them)."""
        if await _ended(live, timeout):
            return
        if c.live is live:
            await self.send_signal(c, signal.SIGKILL)
        await _ended(live, None)

    async def send_signal(self, c: Container, sig: int) -> None:
        """Send ``sig`` to the init; a paused container is thawed so that it can act on it."""
        live = c.live
        if live is None:
            return
        with contextlib.suppress(RuntimeFailure):
            await self.runtime.kill(c.id, sig)
        if c.state.status is State.PAUSED:
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.resume(c.id)
            # the supervisor may have recorded the exit meanwhile: never mark that running
            if c.live is live and c.state.status is State.PAUSED:
                transition(c.state, "thawed")

    async def restart(self, c: Container, timeout: int | None) -> None:
        async with c.lock:
            require(c.state.status, "restart", c.id)
            if c.state.status in RUNNING_STATES:
                await self.stop_locked(c, 10 if timeout is None else timeout)
            c.manually_stopped = False
            await self.runner.launch(c)
        self.runner.event(c, "restart")

    async def kill(self, c: Container, sig_text: str | None) -> None:
        try:
            sig = signal_number(sig_text) if sig_text else int(signal.SIGKILL)
        except ValueError:
            raise InvalidParameter(f"Invalid signal: {sig_text}") from None
        async with c.lock:
            require(c.state.status, "kill", c.id)
            if c.state.status is State.RESTARTING:
                c.manually_stopped = True
                if c.restart_scope is not None:
                    c.restart_scope.cancel()
                return
            c.manually_stopped = True
            live = c.live
            with contextlib.suppress(RuntimeFailure):
                await self.runtime.kill(c.id, sig)
            self.runner.event(c, "kill", signal=str(sig))
            if sig == signal.SIGKILL and c.state.status is State.PAUSED:
                with contextlib.suppress(RuntimeFailure):
                    await self.runtime.resume(c.id)
        if sig == signal.SIGKILL and live is not None:  # waited for without the lock
            await _ended(live, None)

    async def pause(self, c: Container) -> None:
        await self._freeze(c, "pause")

    async def unpause(self, c: Container) -> None:
        await self._freeze(c, "unpause")

    async def _freeze(self, c: Container, verb: str) -> None:
        """pause / unpause through the runtime (the freezer cgroup)."""
        async with c.lock:
            require(c.state.status, verb, c.id)
            try:
                if verb == "pause":
                    await self.runtime.pause(c.id)
                else:
                    await self.runtime.resume(c.id)
            except RuntimeFailure:
                if await self.runner.settle_exit(c):  # it exited meanwhile: not running
                    require(c.state.status, verb, c.id)
                raise
            if c.live is None:  # it exited while the runtime froze or thawed it
                require(c.state.status, verb, c.id)
            transition(c.state, "paused" if verb == "pause" else "unpaused")
            await self.runner.supervisor.save_or_defer(c)  # it is: the record follows
            c.notify()
        self.runner.event(c, verb)


async def _ended(live: Live, timeout: float | None) -> bool:
    """Whether ``live``'s process ended within ``timeout`` seconds (None: waits for it)."""
    with trio.move_on_after(timeout if timeout is not None else float("inf")):
        await live.exited.wait()
        return True
    return False
