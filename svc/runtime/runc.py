"""``Runtime`` over the runc binary (crun takes the same commands), driven from trio.

Every command runs as ``runc --root <root> --log-format json ...``: svc's containers live in a
state directory of their own (``<exec-root>/runc``), invisible to other runc users, and runc's
messages arrive as JSON lines, so a failure becomes a ``RuntimeFailure`` carrying runc's own words
(``exec: "/no/such/binary": stat /no/such/binary: no such file or directory``).

``create`` forks the container's init, which waits on runc's exec fifo until ``start``. Without a
terminal the init inherits runc's stdin/stdout/stderr ("pass-through"): those are the descriptors
given as ``stdio``, so runc's own fatal message would land in the container's stderr pipe;
``create`` therefore reads runc's messages from a ``--log`` file instead. With a terminal, runc
sends the pty master over ``--console-socket`` and ``create`` returns it as a ``Console``.

The init is re-parented to the daemon when ``runc create`` exits only if the daemon is a child
subreaper (``process.set_subreaper``); ``process.wait_pid`` then reaps it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio

from svc.runtime.process import Console, ConsoleSocket, ContainerPipes, StdioFds
from svc.runtime.protocol import (
    ContainerNotFound,
    ContainerStateConflict,
    Created,
    RuntimeFailure,
)

log = logging.getLogger("svc.runtime.runc")

CONSOLE_TIMEOUT = 10.0  # seconds to get the pty master once runc create has succeeded

_NOT_FOUND = re.compile(r"^container does not exist$")  # not "rootfs (...) does not exist"
_CONFLICT = re.compile(r"not running|not paused|container paused|already exists|not stopped|"
                       r"cannot start|already running|has stopped")


def _messages(text: str) -> list[tuple[str, str]]:
    """(level, msg) per line of runc's JSON log; a plain line (a Go panic) is level "error"."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
            out.append((str(entry.get("level", "error")), str(entry.get("msg", line))))
        except (ValueError, AttributeError):
            out.append(("error", line))
    return out


def failure(command: str, exit_code: int, text: str) -> RuntimeFailure:
    """The exception for a failed runc command, from what runc logged (pure; for tests too)."""
    msgs = _messages(text)
    errors = [m for lvl, m in msgs if lvl in ("error", "fatal", "panic")]
    message = errors[-1] if errors else f"runc {command} exited with status {exit_code}"
    message = message.removeprefix(f"runc {command} failed: ")
    # runc's C init reports the cause as "fatal" and runc then fails on its side with a vaguer
    # error ("can't get final child's PID from pipe: EOF"): keep both.
    causes = [m for lvl, m in msgs if lvl == "fatal" and m not in message]
    if causes:
        message = f"{message} ({causes[-1]})"
    kind: type[RuntimeFailure] = RuntimeFailure
    if _NOT_FOUND.search(message):
        kind = ContainerNotFound
    elif _CONFLICT.search(message):
        kind = ContainerStateConflict
    return kind(message, command=command, exit_code=exit_code, output=text)


# ``runc start`` opens and reads the exec fifo, which releases the init (the process runs),
# and only then removes the fifo (runc's handleFifoResult). A process that exits at once can be
# torn down (``runc delete`` removes the state directory) before that removal, which then
# fails: the start did happen, and its exit is the supervisor's to report.
_FIFO_GONE = re.compile(r"remove \S*exec\.fifo: no such file or directory")


def started_anyway(exc: RuntimeFailure) -> bool:
    """Whether a failed ``runc start`` did release the container's process (pure)."""
    return exc.command == "start" and bool(_FIFO_GONE.search(str(exc)))


def _log_warnings(text: str) -> None:
    for level, msg in _messages(text):
        if level in ("warning", "error"):
            log.warning("runc: %s", msg)


def _read_text(path: Path) -> str:
    """A small file runc wrote (pid file, log); blocking, but a short read (without a text
    file object: a fifth of the cost, and each exec reads two)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


class Runc:
    """The runc CLI as a ``Runtime``.

    Args:
        root: runc's state directory (``--root``), e.g. ``<exec-root>/runc``; created 0700.
        binary: the runc executable (a name on PATH or a path).
    """

    def __init__(self, root: Path, binary: str = "runc") -> None:
        self.root = root
        self.binary = binary

    def _private_file(self, prefix: str, data: bytes) -> str:
        """A new file in the root (mode 0600, a name never used before) holding ``data``,
        for runc to read (an exec's process object, an update's resources); the caller
        unlinks it. Blocking, but one small write (``tempfile`` and a text file cost three
        times as much, on every exec)."""
        path = f"{self.root}/{prefix}{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:  # (the root is made at the first command)
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return path

    def _argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), "--log-format", "json", *args]

    async def _run(self, command: str, *args: str) -> bytes:
        """Run ``runc <command> <args>``; return its stdout.

        Raises:
            RuntimeFailure: runc exited non-zero (or a kind of it, see ``failure``).

        Cancellation: runc is killed (SIGKILL) and nothing is waited for.
        """
        result = await trio.run_process(
            self._argv(command, *args), stdin=subprocess.DEVNULL, capture_stdout=True,
            capture_stderr=True, check=False)
        stderr = result.stderr.decode(errors="replace")
        if result.returncode != 0:
            raise failure(command, result.returncode, stderr)
        _log_warnings(stderr)
        return bytes(result.stdout)

    async def create(self, container_id: str, bundle: Path, *,
                     stdio: StdioFds | ContainerPipes | None = None, terminal: bool = False,
                     pid_file: Path | None = None) -> Created:
        """``runc create``: set the container up, its init waiting for ``start``.

        Args:
            container_id: the runc id (``[\\w+-.]+``).
            bundle: the directory holding ``config.json``.
            stdio: descriptors for the init's fds 0-2 when not ``terminal``; ``ContainerPipes``
                have their child ends closed here once runc has returned. ``None``: /dev/null.
            terminal: the spec asks for a pty (``process.terminal``); the master comes back.
            pid_file: where runc writes the init's pid (a private temp file if omitted).

        Returns:
            The init's pid and, for a terminal, the pty master.

        Raises:
            RuntimeFailure: runc failed (the message is runc's); nothing is left to delete.
            ValueError: both ``stdio`` and ``terminal``.

        Cancellation: runc create is killed; a half-created container may remain in runc's
        state (``delete(force=True)`` removes it) and its cgroup may remain.
        """
        return await self._spawn("create", ["--bundle", str(bundle)], container_id,
                                 stdio=stdio, terminal=terminal, pid_file=pid_file)

    async def exec(self, container_id: str, process: dict[str, Any], *,
                   stdio: StdioFds | ContainerPipes | None = None,
                   terminal: bool = False) -> Created:
        """``runc exec --detach``: start ``process`` (an OCI process object) in the running
        container; it is re-parented to the daemon (a subreaper) once runc exits.

        Returns:
            The process's pid and, for a terminal, the pty master.

        Raises:
            RuntimeFailure: runc failed (no such binary, the container is not running...).

        Cancellation: runc is killed; the process may or may not have started.
        """
        proc_path = self._private_file(".svc-process-", json.dumps(process).encode())
        try:
            return await self._spawn("exec", ["--detach", "--process", proc_path],
                                     container_id, stdio=stdio, terminal=terminal)
        finally:
            os.unlink(proc_path)

    async def _spawn(self, command: str, args: list[str], container_id: str, *,
                     stdio: StdioFds | ContainerPipes | None, terminal: bool,
                     pid_file: Path | None = None) -> Created:
        """``runc create`` or ``runc exec --detach``: its pid (from ``--pid-file``), the pty
        master for a terminal, runc's messages from ``--log``."""
        if terminal and stdio is not None:
            raise ValueError("a terminal process takes no stdio descriptors")
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        log_path = self.root / f".svc-{token}.log"
        pid_path = pid_file or self.root / f".svc-{token}.pid"
        argv = self._argv("--log", str(log_path), command, *args, "--pid-file", str(pid_path))
        try:
            if terminal:
                code, master = await self._create_with_console(argv, container_id)
            else:
                code = await self._create_passthrough(argv + [container_id], stdio)
                master = None
            text = _read_text(log_path)
            if code != 0:
                if master is not None:
                    os.close(master)
                raise failure(command, code, text)
            _log_warnings(text)
            pid = int(_read_text(pid_path).strip() or 0)
        finally:
            log_path.unlink(missing_ok=True)
            if pid_file is None:
                pid_path.unlink(missing_ok=True)
        return Created(pid, Console(master) if master is not None else None)

    async def _create_passthrough(self, argv: list[str],
                                  stdio: StdioFds | ContainerPipes | None) -> int:
        fds = stdio.child if isinstance(stdio, ContainerPipes) else stdio
        try:
            if fds is None:
                result = await trio.run_process(argv, stdin=subprocess.DEVNULL,
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, check=False)
            else:
                result = await trio.run_process(argv, stdin=fds.stdin, stdout=fds.stdout,
                                                stderr=fds.stderr, check=False)
        finally:
            if isinstance(stdio, ContainerPipes):
                stdio.close_child()
        return result.returncode

    async def _create_with_console(self, argv: list[str],
                                   container_id: str) -> tuple[int, int | None]:
        # A private short directory: a unix socket path must fit in 108 bytes.
        sock_dir = Path(tempfile.mkdtemp(prefix="svc-console-"))
        sock = ConsoleSocket(sock_dir / "s")
        master: list[int] = []

        async def receive() -> None:
            master.append(await sock.receive_master())

        try:
            await sock.listen()
            argv = argv + ["--console-socket", str(sock.path), container_id]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                result = await trio.run_process(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, check=False)
                if result.returncode != 0:
                    nursery.cancel_scope.cancel()
                else:
                    nursery.cancel_scope.deadline = trio.current_time() + CONSOLE_TIMEOUT
        except BaseException:
            for fd in master:
                os.close(fd)
            raise
        finally:
            sock.close()
            os.rmdir(sock_dir)
        if result.returncode == 0 and not master:
            raise RuntimeFailure(f"runc create {container_id}: no pty master arrived on the "
                                 "console socket", command="create")
        return result.returncode, master[0] if master else None

    async def start(self, container_id: str) -> None:
        """``runc start``: the init execs the container's process.

        Cancellation: runc is killed; the container may or may not have started.
        """
        try:
            await self._run("start", container_id)
        except RuntimeFailure as exc:
            if not started_anyway(exc):
                raise
            log.debug("runc start %s: the process ran and was torn down first (%s)",
                      container_id, exc)

    async def kill(self, container_id: str, sig: int = signal.SIGTERM, *,
                   all: bool = False) -> None:
        """Send ``sig`` to the init (or, ``all``, to every process of the container).

        A pid-namespace init ignores signals it has no handler for, except SIGKILL and SIGSTOP.

        Cancellation: runc is killed; the signal may or may not have been sent.
        """
        await self._run("kill", *(["--all"] if all else []), container_id, str(int(sig)))

    async def pause(self, container_id: str) -> None:
        """Freeze every process of the container (freezer cgroup).

        Cancellation: runc is killed; the cgroup may be left FREEZING or FROZEN.
        """
        await self._run("pause", container_id)

    async def resume(self, container_id: str) -> None:
        """Thaw the container.

        Cancellation: runc is killed; the container may still be frozen.
        """
        await self._run("resume", container_id)

    async def update(self, container_id: str, resources: dict[str, Any]) -> None:
        """``runc update --resources``: apply an OCI ``linux.resources`` object to the live
        cgroups (the limits it names; others are kept).

        Cancellation: runc is killed; some of the limits may have been applied.
        """
        path = self._private_file(".svc-update-", json.dumps(resources).encode())
        try:
            await self._run("update", "--resources", path, container_id)
        finally:
            os.unlink(path)

    async def delete(self, container_id: str, *, force: bool = False) -> None:
        """Remove runc's state and the container's cgroups; ``force`` kills a running one first.

        Cancellation: runc is killed; the state may remain (delete again).
        """
        await self._run("delete", *(["--force"] if force else []), container_id)

    def has_state(self, container_id: str) -> bool:
        """Whether runc has a directory for ``container_id`` in its root (blocking, one stat).
        ``runc delete`` of an id without one only removes that directory, so a caller that
        finds none can skip the runc process (some milliseconds)."""
        return (self.root / container_id).exists()

    async def state(self, container_id: str) -> dict[str, Any]:
        """runc's view: ``{"id", "pid", "status": created|running|paused|stopped, "bundle",
        "rootfs", "created", ...}``.

        Cancellation: runc is killed; nothing changes.
        """
        doc = json.loads(await self._run("state", container_id))
        if not isinstance(doc, dict):
            raise RuntimeFailure(f"runc state {container_id}: unexpected output", command="state")
        return doc

    async def list(self) -> list[dict[str, Any]]:
        """Every container in this runc root (``runc list``), e.g. for cleanup after a crash.

        Cancellation: runc is killed; nothing changes.
        """
        doc = json.loads(await self._run("list", "--format", "json") or b"null")
        return [d for d in doc or [] if isinstance(d, dict)]
