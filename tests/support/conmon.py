"""conmon launched as builds before svc-shim did (``--api-version 1`` over ``runc create`` or
``runc exec``), for the tests of what this build reads of it: containers older builds left
running under conmon are taken back, so the reading side (``svc.runtime.conmon``) is tested
against the real conmon.

``launch`` runs ``conmon``, which runs ``runc create`` and reports the init's pid on the sync
pipe (``_OCI_SYNCPIPE``) as ``{"data": <pid>}``, or ``{"data": -1, "message": ...}`` with
runc's own words; conmon has then forked away from the process started here (which exits at
once) and lives on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import trio

from svc.runtime.conmon.monitor import MonitorFiles
from svc.runtime.process import wait_gone
from svc.runtime.protocol import RuntimeFailure
from svc.runtime.runc import Runc, failure
from svc.runtime.shim.launch import SYNC_TIMEOUT, run_reporting

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Monitored:
    monitor_pid: int  # conmon
    pid: int  # the container's init


class Conmon:
    """conmon over ``runc``: what launches a container that may outlive the daemon.

    Args:
        runc: the runtime conmon runs (its binary and ``--root``).
        socket_dir: where conmon links each container's socket directory (short, for the
            108 bytes of a socket's path).
        binary: the conmon executable.
    """

    def __init__(self, runc: Runc, socket_dir: Path, binary: str = "conmon") -> None:
        self.runc = runc
        self.socket_dir = socket_dir
        self.binary = shutil.which(binary) or binary  # (found once, not at each launch)

    def _argv(self, files: MonitorFiles, cid: str, *, terminal: bool, stdin: bool,
              stdin_once: bool, log_max: int, process: Path | None) -> list[str]:
        runc = shutil.which(self.runc.binary) or self.runc.binary
        argv = [self.binary, "--api-version", "1", "-c", cid, "-u", files.uid, "-n", cid,
                "-r", runc, "-b", str(files.bundle), "-p", str(files.dir / "init.pid"),
                "-P", str(files.pid_file), "-l", f"k8s-file:{files.log}",
                "--log-size-max", str(log_max), "--exit-dir", str(files.dir),
                "--persist-dir", str(files.dir), "--socket-dir-path", str(self.socket_dir),
                "--syslog", "--log-level", "warning"]
        for arg in ("--root", str(self.runc.root), "--log-format", "json"):
            argv += ["--runtime-arg", arg]
        if process is not None:  # an exec: runc exec of that process object
            argv += ["--exec", "--exec-process-spec", str(process)]
        if terminal:
            argv.append("-t")
        if stdin:
            argv.append("-i")
            if not stdin_once:  # the daemon's own connection going must not close it
                argv.append("--leave-stdin-open")
        return argv

    async def launch(self, cid: str, files: MonitorFiles, *, terminal: bool = False,
                     stdin: bool = False, stdin_once: bool = False,
                     log_max: int = 64 << 20, process: Path | None = None) -> Monitored:
        """conmon started over ``runc create`` of ``cid`` (its bundle in ``files``); the
        init waits for ``runc start``. With ``process`` (an OCI process object's file), over
        ``runc exec`` of it in the running container ``cid`` instead (it runs at once).

        Raises:
            RuntimeFailure: runc create failed (runc's words), or conmon did not report.

        Cancellation: conmon's report is not waited for; a conmon and a created container
        may remain (``runc delete --force`` ends both).
        """
        files.dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        files.exit_file.unlink(missing_ok=True)
        (self.socket_dir / files.uid).unlink(missing_ok=True)  # a leftover link refuses
        argv = self._argv(files, cid, terminal=terminal, stdin=stdin,
                          stdin_once=stdin_once, log_max=log_max, process=process)
        try:  # (its cwd gets an ``oom`` file)
            report, stderr, code = await run_reporting(argv, monitor_env, cwd=files.dir)
        except trio.TooSlowError:
            raise failure("create", -1, "conmon did not report runc create's outcome "
                          f"within {SYNC_TIMEOUT:.0f} s") from None
        try:
            return _monitored(report, code, stderr, files,
                              "exec" if process is not None else "create")
        except RuntimeFailure:  # conmon ends too: reap it (the daemon is its subreaper)
            with contextlib.suppress(OSError, ValueError), trio.move_on_after(5):
                await wait_gone(int(files.pid_file.read_text().strip()))
            raise


def monitor_env(sync_fd: int) -> dict[str, str]:
    """conmon's environment: what it and runc use, and nothing of the daemon's own. Without
    ``LANG`` its C library loads no locale (64 KiB less of each conmon's RSS); ``TZ`` sets
    the offset it writes in its log's times (``k8sfile`` reads any)."""
    env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "_OCI_SYNCPIPE": str(sync_fd)}
    if "TZ" in os.environ:
        env["TZ"] = os.environ["TZ"]
    return env


def _monitored(report: bytes, code: int | None, stderr: str, files: MonitorFiles,
               command: str) -> Monitored:
    pid, message = -1, ""
    for line in report.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("data"), int):
            pid, message = doc["data"], str(doc.get("message") or "")
            break
    if pid <= 0:
        text = message or stderr.strip() or f"conmon exited with status {code} and no report"
        raise failure(command, code or 1, text)
    try:
        monitor_pid = int(files.pid_file.read_text().strip())
    except (OSError, ValueError) as exc:
        raise failure(command, 1, f"conmon's pid file: {exc}") from exc
    return Monitored(monitor_pid, pid)
