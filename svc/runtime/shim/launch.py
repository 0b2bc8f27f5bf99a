"""Starting a process under svc-shim: ``Shim.launch`` runs the shim, which runs ``runc create``
(or ``runc exec --detach``) with pipes or a pty it keeps, and reports on the sync pipe; the
shim's first process exits once the report is written, and the shim lives on in its own
session (the daemon, a subreaper, adopts it until it exits itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from svc.runtime.process import wait_gone
from svc.runtime.protocol import RuntimeFailure
from svc.runtime.runc import Runc, failure

SYNC_TIMEOUT = 60.0  # bound on the shim's report of runc's outcome
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BINARY = "svc-shim"


@dataclass(frozen=True)
class ShimFiles:
    """The shim's directory (its working directory) and what it keeps there."""

    dir: Path

    @property
    def socket(self) -> Path:
        return self.dir / "shim.sock"

    @property
    def spool(self) -> Path:
        return self.dir / "spool"

    @property
    def exit_file(self) -> Path:
        return self.dir / "exit"

    @property
    def pid_file(self) -> Path:
        return self.dir / "shim.pid"

    @property
    def runc_log(self) -> Path:
        return self.dir / "runc.log"

    def exit_status(self) -> tuple[int, int] | None:
        """(exit code, end in ns) once the shim has written them; None before."""
        try:
            code, at = self.exit_file.read_text().split()[:2]
            return int(code), int(at)
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class Launched:
    shim_pid: int
    pid: int  # the process held: the container's init, or the exec's process


def find_binary(name: str = BINARY) -> str:
    """The shim's executable: beside the daemon's Python (the venv's ``bin``, where setup
    builds it), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    return shutil.which(name) or name


class Shim:
    """svc-shim over ``runc``.

    Args:
        runc: the runtime the shim runs (its binary and ``--root``).
        binary: the shim's executable (``find_binary``).
        spool_max: how many bytes of output a shim keeps while no daemon reads.
    """

    def __init__(self, runc: Runc, binary: str | None = None, spool_max: int = 256 << 20
                 ) -> None:
        self.runc = runc
        self.binary = binary or find_binary()
        self.runc_binary = shutil.which(runc.binary) or runc.binary
        self.spool_max = spool_max

    def argv(self, files: ShimFiles, cid: str, bundle: Path | None, *, terminal: bool,
             stdin: bool, stdin_once: bool, process: Path | None, spool_max: int
             ) -> list[str]:
        argv = [self.binary, "-d", str(files.dir), "-i", cid, "-r", self.runc_binary,
                "-R", str(self.runc.root), "-m", str(spool_max)]
        if process is not None:
            argv += ["-e", str(process)]
        else:
            assert bundle is not None
            argv += ["-b", str(bundle)]
        if terminal:
            argv.append("-t")
        elif stdin:
            argv += ["-s", "-o"] if stdin_once else ["-s"]
        return argv

    async def launch(self, cid: str, files: ShimFiles, bundle: Path | None = None, *,
                     terminal: bool = False, stdin: bool = False, stdin_once: bool = False,
                     process: Path | None = None, spool_max: int | None = None) -> Launched:
        """A shim started over ``runc create`` of ``cid`` from ``bundle`` (the init waits
        for ``runc start``), or, with ``process`` (an OCI process object's file), over
        ``runc exec`` of it in the running container ``cid`` (it runs at once).
        ``stdin_once``: the process's stdin ends with the daemon's connection.
        ``spool_max``: the spool's bound, if not the shim's default (0: nothing is kept).

        Raises:
            RuntimeFailure: runc failed (runc's words), or the shim did not report.

        Cancellation: the report is not waited for; a shim and a created container may
        remain (``runc delete --force`` ends both).
        """
        files.dir.mkdir(parents=True, exist_ok=True)
        self.runc.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        for stale in (files.exit_file, files.runc_log, files.spool):
            stale.unlink(missing_ok=True)
        command = "exec" if process is not None else "create"
        argv = self.argv(files, cid, bundle, terminal=terminal, stdin=stdin,
                         stdin_once=stdin_once, process=process,
                         spool_max=self.spool_max if spool_max is None else spool_max)
        try:
            report, stderr, _ = await run_reporting(
                argv, lambda fd: {"PATH": os.environ.get("PATH") or DEFAULT_PATH,
                                  "SVC_SHIM_SYNC": str(fd)})
        except trio.TooSlowError:
            raise failure(command, -1, f"svc-shim did not report runc {command}'s outcome "
                                       f"within {SYNC_TIMEOUT:.0f} s") from None
        launched, failed, pid = _launched(report.decode(errors="replace"), stderr, files,
                                          command)
        if failed is not None:  # the shim exits too: reap it (the daemon is its subreaper)
            if pid:
                with trio.move_on_after(5):
                    await wait_gone(pid)
            raise failed
        assert launched is not None
        return launched


async def run_reporting(argv: list[str], env: Callable[[int], dict[str, str]],
                        cwd: Path | None = None) -> tuple[bytes, str, int | None]:
    """Run a monitor that reports on a sync pipe (``env(fd)`` names it) and forks away:
    (its report, what it wrote to stderr, the first process's exit status).

    Raises:
        trio.TooSlowError: no report within ``SYNC_TIMEOUT``.
    """
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        proc = await trio.lowlevel.open_process(
            argv, env=env(write_end), pass_fds=(write_end,), cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(write_end)
        write_end = -1
        with trio.fail_after(SYNC_TIMEOUT):
            report = await read_report(read_end)
            await proc.wait()
        assert proc.stderr is not None
        stderr = (await proc.stderr.receive_some(65536)).decode(errors="replace")
        await proc.stderr.aclose()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return report, stderr, proc.returncode


async def read_report(fd: int) -> bytes:
    """The shim's report on pipe ``fd`` (one line), or what came before its end closed."""
    os.set_blocking(fd, False)
    out = b""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        out += chunk
        if not chunk or b"\n" in out:
            return out


def _launched(report: str, stderr: str, files: ShimFiles, command: str
              ) -> tuple[Launched | None, RuntimeFailure | None, int]:
    """The shim's report: what it launched, or the failure and the pid of the shim (which
    exits: 0 if it did not say)."""
    words = report.split(maxsplit=3)
    if len(words) == 3 and words[0] == "ok":
        return Launched(int(words[1]), int(words[2])), None, 0
    try:
        log = files.runc_log.read_text()
    except OSError:
        log = ""
    if words[:1] == ["error"] and len(words) >= 3:
        code = int(words[1]) if words[1].lstrip("-").isdigit() else 1
        pid = int(words[2]) if words[2].isdigit() else 0
        detail = " ".join(words[3:])  # the shim's own trouble, when runc did not run
        return None, failure(command, code, log or detail or stderr), pid
    return None, failure(command, 1, stderr.strip() or "svc-shim exited without a report"), 0
