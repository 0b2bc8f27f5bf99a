"""Exec sessions under svc-shim (``--live-restore``): like the container, each exec's process
runs under a shim of its own, in ``<container>/execs/<exec id>/`` with the exec's record.
While the daemon runs, it reads the exec's pipes (or pty) itself, as without live restore,
and copies them to the exec's attached clients; the shim tells the exit code. A daemon that
goes away leaves the exec running (its stdin ends: no client can reach it again, as the API
starts an exec once) and its output is not kept (the spool's bound is 0: nothing could read
it); the next daemon finds it (``adopt_exec_shims``), so that ``GET /exec/{id}/json`` says it
runs and, once it has ended, gives its exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from svc.engine.containers.attach import copy_to_hub
from svc.engine.containers.container import Container
from svc.engine.containers.execmon import RECORDED, recorded_execs
from svc.engine.containers.monitored import UNKNOWN_EXIT
from svc.engine.containers.shimmed import ShimStdin, shim_alive, until_exit
from svc.runtime.process import Console, wait_gone
from svc.runtime.runc import failure
from svc.runtime.shim.channel import ShimChannel, ShimError
from svc.runtime.shim.launch import Shim, ShimFiles
from svc.wire.stdcopy import STDERR, STDOUT

if TYPE_CHECKING:
    from svc.engine.containers.exec import ExecInstance

@dataclass
class ExecShim:
    """What the daemon holds of an exec's shim: its connection and the exec's descriptors
    (none for an exec taken back after a restart: only its end is waited for)."""

    pid: int
    files: ShimFiles
    channel: ShimChannel | None = None
    stdout: trio.lowlevel.FdStream | None = None
    stderr: trio.lowlevel.FdStream | None = None

    def close(self) -> None:
        """Let go (the exec goes on under its shim)."""
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        if self.channel is not None:
            self.channel.close()


def exec_dir(c: Container, exec_id: str) -> Path:
    return c.dir / "execs" / exec_id


async def launch_exec_shim(shim: Shim, inst: ExecInstance, process: dict[str, Any]) -> None:
    """Run ``inst``'s command under a shim; its pid, stdin or terminal and handle set.

    Raises:
        RuntimeFailure: runc exec failed (runc's words: no such binary...), or the shim
            cannot be reached.
    """
    c = inst.container
    files = ShimFiles(exec_dir(c, inst.id))
    await trio.to_thread.run_sync(_write_record, files, inst, process)
    launched = await shim.launch(c.id, files, terminal=inst.tty, stdin=inst.attach_stdin,
                                 stdin_once=True, process=files.dir / "process.json",
                                 spool_max=0)
    try:
        channel = await ShimChannel.connect(files.socket)
    except ShimError as exc:
        raise failure("exec", 1, f"svc-shim of the exec: {exc}") from exc
    held = ExecShim(launched.shim_pid, files, channel)
    fds = channel.hello.fds
    if len(fds) == 1:
        inst.console = Console(fds[0])
    elif len(fds) >= 4:  # (its output is not logged: read as it comes, no journal)
        held.stdout, held.stderr = trio.lowlevel.FdStream(fds[0]), trio.lowlevel.FdStream(fds[1])
        os.close(fds[2])
        os.close(fds[3])
        if len(fds) == 5:
            inst.stdin = ShimStdin(fds[4], channel)
    inst.pid, inst.running, inst.shim = launched.pid, True, held


def _write_record(files: ShimFiles, inst: ExecInstance, process: dict[str, Any]) -> None:
    """Blocking: the exec's directory, its process object and its record."""
    files.dir.mkdir(parents=True, exist_ok=True)
    (files.dir / "process.json").write_text(json.dumps(process))
    record = {k: getattr(inst, k) for k in RECORDED}
    record["detach_keys"] = inst.detach_keys.decode("latin-1")
    (files.dir / "exec.json").write_text(json.dumps(record))


async def supervise_exec_shim(inst: ExecInstance) -> None:
    """Copy the exec's output to its attached clients until it ends; record its exit code.
    Cancellation (the daemon stops): the exec goes on, its descriptors let go."""
    held = inst.shim
    assert held is not None
    code: int | None = None
    try:
        if held.channel is None:  # taken back: only its end
            with contextlib.suppress(OSError):
                await wait_gone(held.pid)
            status = held.files.exit_status()
            code = UNKNOWN_EXIT if status is None else status[0]
            return
        code = await _follow(inst, held, held.channel)
    finally:
        held.close()
        if inst.console is not None:
            inst.console.close()
        if inst.stdin is not None:
            inst.stdin.close()
        if code is not None:
            inst.exit_code, inst.running = code, False
            inst.hub.end_run()
            inst.exited.set()


async def _follow(inst: ExecInstance, held: ExecShim, channel: ShimChannel) -> int:
    sources: list[tuple[Any, int]] = (
        [(inst.console, STDOUT)] if inst.console is not None
        else [(held.stdout, STDOUT), (held.stderr, STDERR)])
    ended = await until_exit(channel, [partial(copy_to_hub, stream, kind, inst.hub)
                                       for stream, kind in sources])
    if ended is None:
        status = held.files.exit_status()
        return UNKNOWN_EXIT if status is None else status[0]
    return ended[0]


def adopt_exec_shims(c: Container, make: Callable[[dict[str, Any]], ExecInstance]
                     ) -> list[ExecInstance]:
    """Blocking: the exec sessions of ``c`` (taken back) that ran under shims, each made
    again with ``make`` from its record; those whose shim is gone without an exit file are
    dropped."""
    found = []
    for record, d, pid, alive in recorded_execs(
            c.dir / "execs", "shim.pid", lambda pid: shim_alive(pid, c.id),
            lambda d: ShimFiles(d).exit_status() is not None):
        inst = make(record)
        inst.started, inst.running = True, alive
        inst.shim = ExecShim(pid, ShimFiles(d))
        found.append(inst)
    return found
