"""Container processes from the daemon's side: reaping, stdio pipes, the pty console.

The daemon is a child subreaper (``set_subreaper``), so a container's init, orphaned when
``runc create`` exits, is re-parented to it; ``wait_pid`` then waits for it through a pidfd and
reaps exactly that pid. Nothing here reaps with ``waitpid(-1)``, which would steal the exit status
of trio's own subprocesses (``reaper`` reaps the orphans nobody waits for, one known pid at a
time). A container init that is *not* our child (the daemon restarted) cannot be reaped:
``wait_pid`` raises ``ChildProcessError`` once it has exited.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import termios
from dataclasses import dataclass, field
from pathlib import Path

import trio

from svc.runtime.spec import capabilities_from_mask

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

_libc = ctypes.CDLL(None, use_errno=True)


def set_subreaper(enable: bool = True) -> None:
    """Make this process a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``).

    Raises:
        OSError: prctl failed.
    """
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, int(enable), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    if _libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_GET_CHILD_SUBREAPER): {os.strerror(err)}")
    return bool(flag.value)


def exit_code(result: os.waitid_result) -> int:
    """The shell's convention: the exit status, or 128 + the signal that killed the process."""
    if result.si_code == os.CLD_EXITED:
        return result.si_status
    return 128 + result.si_status


async def wait_pid(pid: int) -> int:
    """Wait for child ``pid`` to exit, reap it, and return its exit code (128+N for signal N).

    Raises:
        ProcessLookupError: no process ``pid`` exists (already reaped).
        ChildProcessError: ``pid`` exited but is not our child (not re-parented to us).

    Cancellation: a checkpoint; if cancelled the process is neither waited for nor reaped,
    and ``wait_pid`` may be called again.
    """
    fd = os.pidfd_open(pid)
    try:
        while True:
            await trio.lowlevel.wait_readable(fd)
            # WNOHANG: the pidfd is readable, so this returns at once (reaps exactly ``pid``).
            result = os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)  # noqa: ASYNC222
            if result is not None:
                return exit_code(result)
    finally:
        os.close(fd)


def host_capabilities(status: Path = Path("/proc/self/status")) -> list[str]:
    """The capabilities this daemon can hand to a container: its bounding and effective sets
    (CapBnd & CapEff). A host may lack some (a bounding set without CAP_SYS_RESOURCE), and runc
    fails when asked for a capability it cannot grant."""
    masks: dict[str, int] = {}
    for line in status.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("CapBnd", "CapEff"):
            masks[key] = int(value.strip(), 16)
    return capabilities_from_mask(masks.get("CapBnd", 0) & masks.get("CapEff", 0))


@dataclass(frozen=True)
class StdioFds:
    """Descriptors a container's init gets as fds 0, 1 and 2 (runc passes its own through)."""

    stdin: int
    stdout: int
    stderr: int


@dataclass
class ContainerPipes:
    """Pipes for a non-TTY container: the daemon keeps one end of each, the container the other.

    ``child`` goes to ``Runtime.create``; once ``runc create`` has returned (it passes them to the
    init), ``close_child`` drops the daemon's copies, so that the container's exit is EOF on
    ``stdout``/``stderr``. Closing ``stdin`` (``aclose``) is EOF for the container.
    """

    child: StdioFds
    stdout: trio.lowlevel.FdStream
    stderr: trio.lowlevel.FdStream
    stdin: trio.lowlevel.FdStream | None = None
    _child_open: bool = field(default=True, repr=False)

    def close_child(self) -> None:
        if self._child_open:
            self._child_open = False
            for fd in {self.child.stdin, self.child.stdout, self.child.stderr}:
                os.close(fd)

    async def aclose(self) -> None:
        """Close every end this object holds.

        Cancellation: not a checkpoint if nothing blocks; closes everything regardless.
        """
        self.close_child()
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                await stream.aclose()


PIPE_SIZE = 1 << 20
F_SETPIPE_SZ = 1031


def _grow_pipe(fd: int) -> None:
    """Give the pipe a 1 MiB buffer (the default 64 KiB makes the daemon read and forward
    output in 64 KiB pieces; within /proc/sys/fs/pipe-max-size it needs no privilege)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)


def open_pipes(stdin: bool = False) -> ContainerPipes:
    """New stdout/stderr pipes, and a stdin pipe if ``stdin`` (else the container reads
    /dev/null). The daemon's ends are close-on-exec, so no other child inherits them."""
    made: list[int] = []
    try:
        out_r, out_w = os.pipe()
        made += [out_r, out_w]
        err_r, err_w = os.pipe()
        made += [err_r, err_w]
        if stdin:
            in_r, in_w = os.pipe()
            made += [in_r, in_w]
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
            made.append(in_r)
    except OSError:
        for fd in made:
            os.close(fd)
        raise
    for fd in (out_r, err_r) + ((in_r,) if stdin else ()):
        _grow_pipe(fd)
    return ContainerPipes(
        child=StdioFds(in_r, out_w, err_w), stdout=trio.lowlevel.FdStream(out_r),
        stderr=trio.lowlevel.FdStream(err_r),
        stdin=trio.lowlevel.FdStream(in_w) if in_w >= 0 else None)


class Console(trio.abc.Stream):
    """The master side of a container's pty, as a trio stream.

    Reading it fails with EIO once the container's side is closed (the container exited); that
    is EOF here (``receive_some`` returns ``b""``).
    """

    def __init__(self, master_fd: int) -> None:
        self._stream = trio.lowlevel.FdStream(master_fd)

    def fileno(self) -> int:
        return self._stream.fileno()

    def resize(self, rows: int, cols: int) -> None:
        """Set the window size (``TIOCSWINSZ``); the container's foreground gets SIGWINCH."""
        fcntl.ioctl(self.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            return await self._stream.receive_some(max_bytes)
        except trio.BrokenResourceError as exc:
            # trio wraps the read's OSError; EIO means the container's side is gone.
            if isinstance(exc.__cause__, OSError) and exc.__cause__.errno == errno.EIO:
                return b""
            raise

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()

    def close(self) -> None:
        self._stream.close()


class ConsoleSocket:
    """The unix listener ``runc create --console-socket`` connects to, to hand over the pty
    master as an ``SCM_RIGHTS`` message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    async def listen(self) -> None:
        """Bind and listen; the path must be short (108 bytes) and not exist.

        Cancellation: a checkpoint; cancelled, the socket may be bound (``close`` it).
        """
        await self._sock.bind(str(self.path))
        self._sock.listen(1)

    async def receive_master(self) -> int:
        """Accept runc's connection and return the pty master fd it sends.

        Raises:
            RuntimeError: the connection carried no descriptor.

        Cancellation: a checkpoint; cancelled, nothing is received and nothing leaks.
        """
        conn, _ = await self._sock.accept()
        with conn:
            fds = array.array("i")
            _, ancdata, _, _ = await conn.recvmsg(
                4096, socket.CMSG_SPACE(4 * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        if not fds:
            raise RuntimeError("runc sent no pty master over the console socket")
        for extra in fds[1:]:
            os.close(extra)
        return fds[0]

    def close(self) -> None:
        self._sock.close()
        self.path.unlink(missing_ok=True)


def signal_number(sig: int | str) -> int:
    """``9``, ``"9"``, ``"KILL"``, ``"SIGKILL"`` -> 9 (docker kill --signal spellings).

    Raises:
        ValueError: not a signal of this platform.
    """
    if isinstance(sig, int):
        return signal.Signals(sig).value
    text = sig.strip().upper()
    if text.isdigit():
        return signal.Signals(int(text)).value
    name = text if text.startswith("SIG") else "SIG" + text
    try:
        return signal.Signals[name].value
    except KeyError:
        raise ValueError(f"Invalid signal: {sig}") from None


def runs_as(pid: int, program: bytes, arg: str) -> bool:
    """Whether process ``pid`` runs ``program`` (its executable's base name) with ``arg``
    among its arguments: a monitor's pid checked against a reused one."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return bool(argv) and os.path.basename(argv[0]) == program and arg.encode() in argv


async def wait_gone(pid: int) -> None:
    """Until process ``pid`` (a monitor: svc-shim, or an older build's conmon) has exited,
    reaped if it is the daemon's child (it is when this daemon launched it: the daemon is a
    subreaper); one started by an earlier daemon is only watched. Cancellation: a
    checkpoint; nothing is left behind."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
        # readable: it has exited, so this returns at once; not ours (or reaped by the
        # orphan reaper): gone anyway
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)  # noqa: ASYNC222
    finally:
        trio.lowlevel.notify_closing(fd)
        os.close(fd)
