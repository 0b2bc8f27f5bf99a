"""Debian's ``etcd`` (etcd-server 3.4) for the tests: one single-member cluster per
:class:`EtcdServer`, on free ports of an address the test chooses (127.0.0.1 by default),
with its own data directory; ``stop()`` kills it and removes the directory, whatever
happened. ``pause()``/``resume()`` stop and continue the process (SIGSTOP/SIGCONT): the store
unreachable for a while without losing its data; ``restart()`` kills and starts it again on
the same ports and data."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BINARY = "/usr/bin/etcd"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EtcdServer:
    def __init__(self, host: str = "127.0.0.1", *, netns: str | None = None,
                 tls: tuple[str, str, str] | None = None) -> None:
        self.host = host
        self.netns = netns
        self.tls = tls  # (CA, server certificate, server key): clients must show one too
        self.scheme = "https" if tls else "http"
        self.dir = Path(tempfile.mkdtemp(prefix="svc-etcd-"))
        self.port = free_port("127.0.0.1") if netns is None else 2379
        self.peer_port = free_port("127.0.0.1") if netns is None else 2380
        self.endpoint = f"{host}:{self.port}"
        self.log_path = self.dir / "etcd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _argv(self) -> list[str]:
        client = f"{self.scheme}://{self.endpoint}"
        peer = f"http://{self.host}:{self.peer_port}"
        argv = [BINARY, "--name", "svc-test", "--data-dir", str(self.dir / "data"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"svc-test={peer}", "--log-level", "warn"]
        if self.tls:
            ca, cert, key = self.tls
            argv += ["--trusted-ca-file", ca, "--cert-file", cert, "--key-file", key,
                     "--client-cert-auth"]
        return (["ip", "netns", "exec", self.netns, *argv]) if self.netns else argv

    def start(self) -> EtcdServer:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited {self.proc.returncode}:\n{self.log()}")
            if self.healthy():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"etcd did not become healthy on {self.endpoint}:\n{self.log()}")

    def healthy(self) -> bool:
        if self.tls:  # a client certificate is needed: a listening port will do
            with contextlib.suppress(OSError), socket.create_connection(
                    (self.host, self.port), timeout=1):
                return True
            return False
        if self.netns is not None:
            out = subprocess.run(["ip", "netns", "exec", self.netns, "curl", "-s", "-m", "1",
                                  f"http://{self.endpoint}/health"], capture_output=True)
            return b'"true"' in out.stdout
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        return False

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running_etcd() -> Iterator[EtcdServer]:
    """A started etcd on 127.0.0.1, stopped and removed at the end whatever happened."""
    etcd = EtcdServer().start()
    try:
        yield etcd
    finally:
        etcd.stop()
