"""Start and stop real svc daemons for tests: each with its own root, socket and pid file."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from svc.storage.fsutil import remove_tree
from tests.support import images as timg

REPO = Path(__file__).resolve().parents[2]


class DaemonFailed(Exception):
    pass


class Daemon:
    """One svcd process. ``probe=True`` runs the test daemon (svcd plus probe routes)."""

    def __init__(self, args: Sequence[str] = (), *, probe: bool = True,
                 workdir: Path | None = None, hosts: Sequence[str] | None = None,
                 env: dict[str, str] | None = None, netns: str | None = None,
                 source: Path | None = None) -> None:
        # Short paths: unix socket names are limited to 108 bytes.
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="svct-", dir="/tmp"))
        self._own_dir = workdir is None
        self.sock = self.dir / "svc.sock"
        self.root = self.dir / "root"
        self.exec_root = self.dir / "exec"
        self.pidfile = self.dir / "svc.pid"
        self.logfile = self.dir / "daemon.log"
        # plugins' sockets and spec files: this daemon's own, never the machine's
        self.plugin_dir = self.dir / "plugins"
        # SVC_TEST_DAEMON_ARGS: more arguments for every test daemon, to run part of the
        # suite against a daemon set up otherwise (e.g. --live-restore: every container
        # under conmon); tests that assume the default then fail, as they should
        self.args = [*args, *shlex.split(os.environ.get("SVC_TEST_DAEMON_ARGS", ""))]
        self.env = dict(env or {})
        self.probe = probe
        self.source = source or REPO  # the tree whose svcd runs (another build: an upgrade)
        # a network namespace of the test's (another host): only the daemon's network
        # namespace changes (nsenter --net), so its cgroups, mounts and socket are the host's
        self.netns = netns
        self.hosts = list(hosts) if hosts is not None else [f"unix://{self.sock}"]
        self.proc: subprocess.Popen[bytes] | None = None
        # containers' cgroups go below a parent of this daemon's own, removed by cleanup()
        self.cgroup_parent = f"/{self.dir.name}"
        # and its own bridge and subnet, removed by cleanup() too
        self.bridge = "svt" + self.dir.name.rsplit("-", 1)[-1][:8].replace("_", "x")
        self.bip = _free_subnet()

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def command(self) -> list[str]:
        entry = ["-m", "tests.support.testd"] if self.probe else ["-m", "svc"]
        cmd = [sys.executable, *entry]
        if self.netns is not None:
            cmd = ["nsenter", f"--net=/run/netns/{self.netns}", "--", *cmd]
        for h in self.hosts:
            cmd += ["-H", h]
        cmd += ["--root", str(self.root), "--exec-root", str(self.exec_root),
                "--pidfile", str(self.pidfile), "--config-file", str(self.dir / "none.json")]
        if "--cgroup-parent" not in self.args:
            cmd += ["--cgroup-parent", self.cgroup_parent]
        if "--shutdown-timeout" not in self.args:
            cmd += ["--shutdown-timeout", "1"]
        if "--bridge" not in self.args and "-b" not in self.args:
            cmd += ["--bridge", self.bridge]
        if "--bip" not in self.args:
            cmd += ["--bip", self.bip]
        if "--plugin-dir" not in self.args:
            cmd += ["--plugin-dir", str(self.plugin_dir)]
        if "--config-file" in self.args:
            cmd = cmd[: cmd.index("--config-file")] + cmd[cmd.index("--config-file") + 2:]
        return cmd + self.args

    def start(self, timeout: float = 20.0, *, wait: bool = True) -> Daemon:
        cfg = self.dir / "none.json"
        if not cfg.exists():
            cfg.write_text("{}")
        log = open(self.logfile, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(self.command(), cwd=self.source, stdout=log, stderr=log,
                                     env=env, stdin=subprocess.DEVNULL)
        log.close()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaemonFailed(f"svcd exited with {self.proc.returncode}:\n{self.log()}")
            if self.ping():
                return
            time.sleep(0.05)
        raise DaemonFailed(f"svcd not ready after {timeout}s:\n{self.log()}")

    def ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(str(self.sock))
                s.sendall(b"GET /_ping HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
                return data.startswith(b"HTTP/1.1 200") and data.endswith(b"OK")
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DaemonFailed(f"svcd ignored SIGTERM for {timeout}s:\n{self.log()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def forked_without_exec(self) -> bool:
        """Whether the (test) daemon reported a fork not followed by an exec."""
        return "svcd forked without exec" in self.log()

    def cleanup(self) -> None:
        """Kill the daemon and remove whatever its containers left: runc state (and so their
        processes), mounts, cgroups. Safe to call after a failed test."""
        self.kill()
        reap_containers(self.exec_root / "runc", self.dir, self.cgroup_parent)
        remove_bridge(self.bridge, self.bip, self.root)
        if self._own_dir:
            # svc's own walk: the trash may still hold a tree too deep for shutil's recursion
            remove_tree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running(args: Sequence[str] = (), **kw: object):  # type: ignore[no-untyped-def]
    d = Daemon(args, **kw)  # type: ignore[arg-type]
    try:
        d.start()
        yield d
    finally:
        d.cleanup()


@contextlib.contextmanager
def with_busybox(daemon: Daemon | None = None) -> Iterator[Daemon]:
    """A started daemon (``daemon``, else a new one) holding ``busybox:latest`` (imported
    through the API), checked at the end for forks without exec, and cleaned up whatever
    happened: the module fixture of the container and build tests."""
    d = daemon or Daemon()
    try:
        d.start()
        import_busybox(d)
        yield d
        assert not d.forked_without_exec(), d.log()
    finally:
        d.cleanup()


def import_busybox(d: Daemon) -> None:
    """``busybox:latest`` imported into ``d`` through the API."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)),
                      base_url="http://svc", timeout=60) as c:
        r = c.post("/images/create", params={"fromSrc": "-", "repo": "busybox",
                                             "tag": "latest"},
                   content=timg.busybox_rootfs_tar(),
                   headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 200 and "error" not in r.text, r.text


def _free_subnet() -> str:
    """A /24 in 10.200.0.0-10.254.255.0 that no interface of this host uses (as --bip)."""
    import ipaddress
    import random

    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                          check=False).stdout
    nets = [ipaddress.IPv4Interface(w).network for line in used.splitlines()
            for w in line.split() if "/" in w and w[0].isdigit()]
    while True:
        candidate = ipaddress.IPv4Network(f"10.{random.randint(200, 254)}."
                                          f"{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(n) for n in nets):
            return f"{candidate.network_address + 1}/24"


def remove_bridge(name: str, bip: str, root: Path | None = None) -> None:
    """Delete a test daemon's bridges (the default one and every bridge marked as its own)
    and its iptables rules: a SIGKILLed daemon, or one whose test failed, leaves them."""
    from svc.network import bridge as br
    from svc.network.firewall import Firewall, owner_of

    daemon_id = ""
    if root is not None:
        with contextlib.suppress(OSError):
            daemon_id = (root / "engine-id").read_text().strip()
    if daemon_id:
        owner = owner_of(daemon_id)
        Firewall(owner).clear()
        for bridge in br.owned_bridges(f"svc:{owner}:"):
            br.delete_bridge(bridge)
        br.delete_links_named(f"svx{owner[:7]}")  # bridges a kill cut off before their alias
    br.delete_bridge(name)


def reap_containers(runc_root: Path, mounts_below: Path, cgroup_parent: str) -> None:
    """Delete every runc container under ``runc_root`` (killing its processes), unmount
    everything below ``mounts_below`` and remove the cgroup parent's tree."""
    from svc.runtime.cgroups import CgroupV1
    from svc.runtime.mounts import unmount_all

    runc = shutil.which("runc") or "/usr/sbin/runc"
    if runc_root.is_dir():
        for entry in runc_root.iterdir():
            if entry.is_dir():
                subprocess.run([runc, "--root", str(runc_root), "delete", "--force", entry.name],
                               capture_output=True, check=False)
    unmount_all(mounts_below)
    if cgroup_parent.strip("/"):
        CgroupV1().remove(cgroup_parent)
