"""The servers a benchmark run starts: the daemon under test and the bare trio floor server.

Each runs in its own session (a terminal's Ctrl-C reaches only the runner, which then stops
them), logs to a file in the run's temporary directory, is ready once its unix socket answers a
request with 200, and is stopped with SIGTERM (SIGKILL only after a grace period).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from bench.harness import PYTHON, REPO, call, wait_until

START_TIMEOUT = 30.0
STOP_GRACE = 15.0


class ServerProcess:
    """A server subprocess listening on a unix socket."""

    def __init__(self, name: str, argv: list[str], socket_path: Path, log_path: Path,
                 ready_target: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.env = env  # added to this process's environment
        self.argv = argv
        self.socket = socket_path
        self.log_path = log_path
        self.ready_target = ready_target
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_at = 0.0
        self.exit_code: int | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = START_TIMEOUT) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         env={**os.environ, **self.env} if self.env else None)
        if not wait_until(self._ready, timeout):
            raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s\n{self.log_tail()}")
        self.ready_at = time.monotonic()

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}\n"
                               f"{self.log_tail()}")
        try:
            status, _ = call(self.socket, "GET", self.ready_target, timeout=2.0)
        except OSError:
            return False
        return status == 200

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.proc is None or self.exit_code is not None:
            return self.exit_code
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        return self.exit_code

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


# A subnet of the run's own; SVC_BENCH_BIP picks another one when two runs share a machine.
BENCH_BIP = os.environ.get("SVC_BENCH_BIP", "10.199.0.1/16")


def check_subnet_free() -> None:
    """Refuse to start when the run's subnet is on the host already: a bridge another run
    left (a killed one, or a script that started a bench daemon without ``run.py``'s
    cleanup) would take the route, and the network benchmark would fail with "No route to
    host" far from the cause."""
    from svc.network.bridge import host_subnets

    mine = ipaddress.IPv4Network(BENCH_BIP, strict=False)
    if any(net.overlaps(mine) for net in host_subnets()):
        raise RuntimeError(f"{mine}, the bench's own subnet, is on this host already (a bridge "
                           f"an earlier run left? `ip -br addr | grep {mine.network_address}`): "
                           "remove it first, wait for the other run to end, or give the run "
                           "another subnet (SVC_BENCH_BIP=10.198.0.1/16)")


def bench_bridge(workdir: Path) -> str:
    """The run's own bridge (removed at the end with its rules, by ``run.py``)."""
    return "svb" + workdir.name.rsplit("-", 1)[-1][:8].replace("_", "x")


def daemon(workdir: Path, *, env: dict[str, str] | None = None,
           bip: str | None = None, extra: list[str] | None = None) -> ServerProcess:
    """The real svcd plus probe routes, with all of its state under ``workdir`` (a second
    daemon of a run needs a ``bip`` of its own), and the ``extra`` arguments given."""
    config_file = workdir / "daemon.json"
    config_file.write_text("{}\n")  # never pick up /etc/svc/daemon.json
    sock = workdir / "svc.sock"
    argv = [PYTHON, "-m", "tests.support.testd", "-H", f"unix://{sock}",
            "--root", str(workdir / "root"), "--exec-root", str(workdir / "exec"),
            "--pidfile", str(workdir / "svc.pid"), "--config-file", str(config_file),
            "--cgroup-parent", f"/{workdir.name}", "--shutdown-timeout", "1",
            "--bridge", bench_bridge(workdir), "--bip", bip or BENCH_BIP,
            "--plugin-dir", str(workdir / "plugins"),  # never the machine's plugins
            *(extra or [])]
    return ServerProcess("svcd (tests.support.testd)", argv, sock, workdir / "svcd.log",
                         "/_ping", env)


def stop_daemon(d: ServerProcess, workdir: Path, bip: str | None = None) -> int | None:
    """Stop a daemon of ``daemon(workdir)`` and remove what it leaves: its containers'
    processes and cgroups, its bridge and rules. Returns its exit code."""
    from tests.support.daemon import reap_containers, remove_bridge

    code = d.stop()
    reap_containers(workdir / "exec" / "runc", workdir, f"/{workdir.name}")
    remove_bridge(bench_bridge(workdir), bip or BENCH_BIP, workdir / "root")
    return code


def floor_server(workdir: Path, responses: dict[str, bytes]) -> ServerProcess:
    """The bare trio server answering each path with fixed bytes (see bench.floor_server)."""
    table = workdir / "floor-responses.json"
    table.write_text(json.dumps({p: base64.b64encode(r).decode() for p, r in responses.items()}))
    sock = workdir / "floor.sock"
    argv = [PYTHON, "-m", "bench.floor_server", "--socket", str(sock), "--responses", str(table)]
    return ServerProcess("floor server", argv, sock, workdir / "floor.log", next(iter(responses)))
