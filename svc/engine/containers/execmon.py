"""Exec sessions an older build started under conmon (``--live-restore``; this build starts
them under svc-shim, ``execshim``): each exec's process runs under a conmon of its own, which
holds its stdio and writes its output and exit code to files in
``<container>/monitor/exec/<exec id>/``. The next daemon finds them (``adopt_execs``), so
that ``GET /exec/{id}/json`` says they run and, once they have ended, gives their exit code.
(An exec's stream cannot be attached to again: the API starts an exec once.)
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from svc.engine.containers.container import Container
from svc.engine.containers.monitored import (
    MonitorHandle,
    follow,
    monitor_alive,
)
from svc.runtime.conmon.logtail import CursorFile
from svc.runtime.conmon.monitor import MonitorFiles
from svc.wire.stdcopy import STDERR, STDOUT

if TYPE_CHECKING:
    from svc.engine.containers.exec import ExecInstance

log = logging.getLogger("svc.engine.containers")

# what an exec's record keeps of its instance, to make it again after a restart
RECORDED = ("id", "cmd", "tty", "attach_stdin", "attach_stdout", "attach_stderr", "user",
            "privileged")


def exec_root(c: Container) -> Path:
    return c.dir / "monitor" / "exec"


def exec_files(c: Container, exec_id: str) -> MonitorFiles:
    d = exec_root(c) / exec_id
    return MonitorFiles(d, d, exec_id, cid=c.id)


async def supervise_exec(inst: ExecInstance) -> None:
    """Hand the exec's output to its attached clients until it ends; record its exit code.
    Cancellation (the daemon stops): the exec goes on, its handle let go."""
    handle = inst.monitor
    assert handle is not None

    async def deliver(name: str, chunk: bytes, ts: int, logged: Callable[[], None]) -> None:
        logged()
        await inst.hub.publish(STDOUT if name == "stdout" else STDERR, chunk)

    code = None
    try:
        code = await follow(handle, deliver, lambda: True)
    finally:
        handle.close()
        if code is not None:
            inst.exit_code, inst.running = code, False
            inst.hub.end_run()
            inst.exited.set()


def recorded_execs(root: Path, pid_file: str, alive: Callable[[int], bool],
                   ended: Callable[[Path], bool]) -> list[tuple[dict[str, Any], Path, int, bool]]:
    """Blocking: the exec sessions recorded under ``root``, one directory each: (its record,
    its directory, its monitor's pid, whether that runs). Those whose monitor is gone without
    an end (``ended``) are removed, with what cannot be read."""
    found: list[tuple[dict[str, Any], Path, int, bool]] = []
    if not root.is_dir():
        return found
    for d in sorted(root.iterdir()):
        try:
            record = json.loads((d / "exec.json").read_text())
            pid = int((d / pid_file).read_text().strip())
        except (OSError, ValueError):
            shutil.rmtree(d, ignore_errors=True)
            continue
        running = alive(pid)
        if not running and not ended(d):
            shutil.rmtree(d, ignore_errors=True)
            continue
        found.append((record, d, pid, running))
    return found


def adopt_execs(c: Container, make: Callable[[dict[str, Any]], ExecInstance]
                ) -> list[ExecInstance]:
    """Blocking: the exec sessions of ``c`` (taken back) that ran under conmon, each made
    again with ``make`` from its record."""
    found = []
    for record, d, pid, alive in recorded_execs(
            exec_root(c), "conmon.pid", lambda pid: monitor_alive(pid, c.id),
            lambda d: exec_files(c, d.name).exit_code() is not None):
        files = exec_files(c, d.name)
        inst = make(record)
        inst.started, inst.running = True, alive
        inst.monitor = MonitorHandle(pid, files, CursorFile(str(files.dir / "cursor")))
        found.append(inst)
    return found
