"""Exec instances: extra processes in a running container (``runc exec``).

An instance is created (``POST /containers/{id}/exec``), then started once. Its process runs
in the container's namespaces and cgroup with the container's environment, working directory
and capabilities (the init's OCI process object with the command, user, tty replaced). A
supervisor task in the engine's nursery copies its output to the instance's ``OutputHub``
and records the exit code; attached clients are served by ``engine.attach.session``.

Instances live in memory: they end with their container (the kernel kills them with the
init's pid namespace) and are forgotten when the container is removed, as in dockerd.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.attach import (
    OutputHub,
    SessionOptions,
    StdinTarget,
    copy_to_hub,
    session,
)
from svc.engine.containers.container import Container
from svc.engine.containers.execmon import adopt_execs, supervise_exec
from svc.engine.containers.execshim import (
    ExecShim,
    adopt_exec_shims,
    launch_exec_shim,
    supervise_exec_shim,
)
from svc.engine.containers.monitored import MonitorHandle
from svc.engine.containers.run import Runner, start_failure
from svc.engine.containers.spec import HostFacts
from svc.engine.containers.state import State, require
from svc.engine.containers.userdb import resolve_user
from svc.errors import Conflict, InvalidParameter, NotFound, SvcError
from svc.runtime.process import ContainerPipes, open_pipes, wait_pid
from svc.runtime.protocol import Runtime, RuntimeFailure
from svc.runtime.reaper import Launches
from svc.runtime.spec import ALL_CAPABILITIES
from svc.wire.stdcopy import STDERR, STDOUT, encode_frame

RESIZE_WAIT = 10.0


@dataclass
class ExecInstance:
    id: str
    container: Container
    cmd: list[str]
    tty: bool
    attach_stdin: bool
    attach_stdout: bool
    attach_stderr: bool
    user: str
    privileged: bool
    detach_keys: bytes
    running: bool = False
    started: bool = False
    exit_code: int | None = None
    pid: int = 0
    console: Any = None
    stdin: Any = None
    hub: OutputHub = field(default_factory=OutputHub)
    exited: trio.Event = field(default_factory=trio.Event)
    started_event: trio.Event = field(default_factory=trio.Event)
    monitor: MonitorHandle | None = None  # under conmon (started by an older build)
    shim: ExecShim | None = None  # under svc-shim (live restore)


class ExecService:
    def __init__(self, runner: Runner, runtime: Runtime, launches: Launches,
                 facts: HostFacts) -> None:
        """``runner``: events, the bundle, settling an exit, the nursery; the runtime runs
        the command; ``launches`` keeps the orphan reaper off its zombie; ``facts`` give a
        privileged exec the daemon's capabilities."""
        self.runner = runner
        self.runtime = runtime
        self.launches = launches
        self.facts = facts
        self.instances: dict[str, ExecInstance] = {}

    def get(self, exec_id: str) -> ExecInstance:
        inst = self.instances.get(exec_id)
        if inst is None:
            raise NotFound(f"No such exec instance '{exec_id}' found in daemon")
        return inst

    def create(self, c: Container, *, cmd: list[str], tty: bool, stdin: bool, stdout: bool,
               stderr: bool, user: str, privileged: bool, detach_keys: bytes) -> ExecInstance:
        require(c.state.status, "exec", c.id)
        if c.live is None:
            raise Conflict(f"Container {c.id} is not running")
        if not cmd:
            raise InvalidParameter("No exec command specified")
        inst = ExecInstance(secrets.token_hex(32), c, cmd, tty, stdin, stdout, stderr, user,
                            privileged, detach_keys)
        self.runner.event(c, "exec_create: " + " ".join(cmd), execID=inst.id)
        # (last: a create that raised has left nothing behind, and may be asked again)
        self.instances[inst.id] = inst
        c.exec_ids.append(inst.id)
        return inst

    def forget(self, c: Container) -> None:
        """The container is removed: its exec instances go with it."""
        for exec_id in c.exec_ids:
            self.instances.pop(exec_id, None)
        c.exec_ids.clear()

    async def adopt(self, c: Container) -> None:
        """The exec sessions of ``c`` (taken back by a restarted daemon) that ran under
        their shims (or conmons, started by an older build): known again, followed until
        they end."""
        found = await trio.to_thread.run_sync(adopt_execs, c, partial(self._remade, c))
        shimmed = await trio.to_thread.run_sync(adopt_exec_shims, c, partial(self._remade, c))
        for inst, supervise in [(i, supervise_exec) for i in found] + \
                [(i, supervise_exec_shim) for i in shimmed]:
            self.instances[inst.id] = inst
            c.exec_ids.append(inst.id)
            inst.started_event.set()
            self.runner.spawn(supervise, inst)

    @staticmethod
    def _remade(c: Container, rec: dict[str, Any]) -> ExecInstance:
        return ExecInstance(str(rec["id"]), c, [str(a) for a in rec["cmd"]], bool(rec["tty"]),
                            bool(rec["attach_stdin"]), bool(rec["attach_stdout"]),
                            bool(rec["attach_stderr"]), str(rec["user"]),
                            bool(rec["privileged"]),
                            str(rec.get("detach_keys") or "").encode("latin-1"))

    def waited_pids(self) -> set[int]:
        return {i.pid for i in self.instances.values() if i.running and i.pid}

    def check_startable(self, inst: ExecInstance) -> None:
        """The 409s of exec start, checked before the connection is taken over."""
        c = inst.container
        if inst.started:
            raise Conflict(f"Error: Exec command {inst.id} has already run")
        if c.state.status is State.PAUSED:
            raise Conflict(f"Container {c.id} is paused, unpause the container before exec")
        if c.live is None or c.state.status is not State.RUNNING:
            raise Conflict(f"Container {c.id} is not running")

    async def start(self, inst: ExecInstance, stream: trio.abc.Stream | None,
                    raw_output: bool | None = None) -> None:
        """Start the process; with ``stream`` (not detached) serve it as an attached client
        until the output ends. A start failure (no such binary) is written to the stream
        (ExitCode 126/127), as dockerd does, or raised when detached.

        ``raw_output`` is the start request's ``Tty``: as in dockerd, it alone decides whether
        the stream is raw or stdcopy frames (create's ``Tty`` decides whether the process
        gets a terminal). Both SDKs create with ``Tty: true`` and start with ``Tty: false``
        and then read frames. None: as create said."""
        raw = inst.tty if raw_output is None else raw_output
        c = inst.container
        self.check_startable(inst)
        inst.started = True
        attachment = None
        if stream is not None:
            attachment = inst.hub.subscribe(stdout=inst.attach_stdout, stderr=inst.attach_stderr)
        self.runner.event(c, "exec_start: " + " ".join(inst.cmd), execID=inst.id)
        try:
            await self._launch(inst)
        except (RuntimeFailure, SvcError) as exc:
            code = start_failure(exc)[0] if isinstance(exc, RuntimeFailure) else 126
            inst.exit_code, inst.running = code, False
            inst.exited.set()
            if attachment is not None:
                attachment.close()
            if stream is None:
                raise
            msg = f"{exc}\n".encode()
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(msg if raw else encode_frame(STDERR, msg))
            return
        if stream is None:
            return
        target = None
        if inst.attach_stdin:
            async def get() -> Any:
                return inst.console if inst.tty else inst.stdin
            target = StdinTarget(get=get, close_on_eof=not inst.tty)
        opts = SessionOptions(stdin=target is not None, tty=raw,
                              detach_keys=inst.detach_keys)
        await session(stream, attachment, opts, target)

    async def _launch(self, inst: ExecInstance) -> None:
        """Run the command in the container. Raises ``Conflict`` when the container turns
        out to have exited meanwhile (its init gone, runc's state deleted)."""
        c = inst.container
        live = c.live
        if live is None:
            raise Conflict(f"Container {c.id} is not running")
        try:
            process = await trio.to_thread.run_sync(self._process, inst, live.pid)
        except OSError:  # /proc/<pid> is gone: the init exited
            await self.runner.settle_exit(c)
            raise Conflict(f"Container {c.id} is not running") from None
        pipes: ContainerPipes | None = None
        # The command may exit before runc does: its zombie is ours, not the orphan reaper's.
        with self.launches.launching():
            try:
                if self.runner.monitor is not None:  # (live restore: it outlives the daemon)
                    await launch_exec_shim(self.runner.monitor, inst, process)
                    inst.started_event.set()
                    self.runner.spawn(supervise_exec_shim, inst)
                    return
                if inst.tty:
                    created = await self.runtime.exec(c.id, process, terminal=True)
                else:
                    pipes = open_pipes(stdin=inst.attach_stdin)
                    created = await self.runtime.exec(c.id, process, stdio=pipes)
            except BaseException as exc:
                if pipes is not None:
                    with trio.CancelScope(shield=True):
                        await pipes.aclose()
                if isinstance(exc, RuntimeFailure) and start_failure(exc)[0] not in (126, 127) \
                        and await self.runner.settle_exit(c):
                    raise Conflict(f"Container {c.id} is not running") from None
                raise
            inst.pid, inst.running, inst.console = created.pid, True, created.console
        inst.stdin = pipes.stdin if pipes is not None else None
        inst.started_event.set()
        self.runner.spawn(self._supervise, inst, pipes)

    def _process(self, inst: ExecInstance, init_pid: int) -> dict[str, Any]:
        """The container's own process object with this command, user and terminal."""
        c = inst.container
        spec = json.loads((self.runner.bundle_dir(c) / "config.json").read_text())
        proc: dict[str, Any] = spec["process"]
        user = resolve_user(Path(f"/proc/{init_pid}/root"),
                            inst.user or c.config.User, c.host_config.GroupAdd)
        proc["args"] = inst.cmd
        proc["terminal"] = inst.tty
        proc["user"] = {"uid": user.uid, "gid": user.gid}
        if user.additional_gids:
            proc["user"]["additionalGids"] = list(user.additional_gids)
        env = [e for e in proc.get("env", []) if not e.startswith("TERM=")]
        proc["env"] = env + (["TERM=xterm"] if inst.tty else [])
        if inst.privileged:
            caps = [cap for cap in ALL_CAPABILITIES if cap in self.facts.capabilities]
            proc["capabilities"] = {k: list(caps) for k in ("bounding", "effective",
                                                             "permitted")}
        proc.pop("consoleSize", None)
        return proc

    async def _supervise(self, inst: ExecInstance, pipes: ContainerPipes | None) -> None:
        """Copy the output to the attached clients until the process exits."""
        sources: list[tuple[Any, int]] = (
            [(pipes.stdout, STDOUT), (pipes.stderr, STDERR)] if pipes is not None
            else [(inst.console, STDOUT)])
        code = 137
        try:
            async with trio.open_nursery() as nursery:
                done: list[trio.Event] = []
                for stream, kind in sources:
                    ev = trio.Event()
                    done.append(ev)
                    nursery.start_soon(copy_to_hub, stream, kind, inst.hub, ev)
                code = await wait_pid(inst.pid)
                with trio.move_on_after(2.0):
                    for ev in done:
                        await ev.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if pipes is not None:
                    await pipes.aclose()
                if inst.console is not None:
                    await inst.console.aclose()
            inst.exit_code, inst.running = code, False
            inst.hub.end_run()
            inst.exited.set()

    async def resize(self, inst: ExecInstance, height: int, width: int) -> None:
        """Set the window size; a resize that arrives while the start is under way (clients
        send it right after the start request) waits for the process, as dockerd does."""
        if not inst.tty:
            raise InvalidParameter(f"exec {inst.id} has no TTY: only a TTY can be resized")
        if not inst.running and inst.exit_code is None:
            with trio.move_on_after(RESIZE_WAIT):
                await inst.started_event.wait()
        if inst.console is None or not inst.running:
            raise Conflict(f"exec {inst.id} is not running")
        if not (0 < height < 65536 and 0 < width < 65536):
            raise InvalidParameter(f"invalid size {height}x{width}")
        inst.console.resize(height, width)
        self.runner.event(inst.container, "exec_resize", height=str(height),
                          width=str(width), execID=inst.id)
