"""The test side of a test plugin: start it as a process, break it, read what it was asked.

A ``PluginProcess`` is a real process (``tests.support.plugins.server``), so "the plugin
crashed" is a dead process and "it came back" a new one on the same socket. ``stop`` (also
run by ``cleanup``) kills it and removes its socket, spec file and state.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


class PluginProcess:
    """One test plugin called ``name``, of implementation ``impl`` (a module here).

    ``socket_dir`` set: it listens on ``<socket_dir>/<name>.sock`` (found by its socket).
    ``tcp`` set (``host:port``): it listens there, and ``spec_dir`` gets ``<name>.spec``
    (or ``<name>.json`` with ``json_spec``/TLS) naming that address.
    """

    def __init__(self, name: str, impl: str, *, socket_dir: Path | None = None,
                 tcp: str = "", spec_dir: Path | None = None, args: dict[str, str] | None
                 = None, tls: tuple[str, str] | None = None,
                 json_spec: dict[str, Any] | None = None) -> None:
        self.name, self.impl = name, impl
        self.state = Path(tempfile.mkdtemp(prefix=f"svcp-{name[:12]}-", dir="/tmp"))
        self.args = dict(args or {})
        self.socket = socket_dir / f"{name}.sock" if socket_dir is not None else None
        self.tcp, self.tls = tcp, tls
        self.spec_dir, self.json_spec = spec_dir, json_spec
        self.spec_file: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *, wait: bool = True) -> PluginProcess:
        (self.state / "ready").unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.support.plugins.server", "--impl", self.impl,
               "--state", str(self.state)]
        if self.socket is not None:
            cmd += ["--socket", str(self.socket)]
        else:
            cmd += ["--tcp", self.tcp]
            if self.tls:
                cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        for k, v in self.args.items():
            cmd += ["--arg", f"{k}={v}"]
        self.write_spec()
        log = (self.state / "plugin.log").open("ab")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not (self.state / "ready").exists():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"plugin {self.name} exited: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"plugin {self.name} did not start: {self.log()}")
            time.sleep(0.02)

    def write_spec(self) -> None:
        if self.spec_dir is None or self.socket is not None and self.json_spec is None:
            return
        self.spec_dir.mkdir(parents=True, exist_ok=True)
        if self.json_spec is not None:
            self.spec_file = self.spec_dir / f"{self.name}.json"
            self.spec_file.write_text(json.dumps(self.json_spec))
        else:
            self.spec_file = self.spec_dir / f"{self.name}.spec"
            self.spec_file.write_text(f"tcp://{self.tcp}\n")

    @property
    def addr(self) -> str:
        return f"unix://{self.socket}" if self.socket is not None else f"tcp://{self.tcp}"

    def kill(self) -> None:
        """The plugin dies (SIGKILL); its socket file stays, as a crashed plugin's does."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def faults(self, **by_method: str) -> None:
        """Set faults by method name (``VolumeDriver_Mount="hang"``: dots as underscores)."""
        faults = {k.replace("_", "."): v for k, v in by_method.items()}
        tmp = self.state / "faults.json.tmp"
        tmp.write_text(json.dumps(faults))
        tmp.replace(self.state / "faults.json")

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """What the daemon asked, in order (each ``{"method", "body", "headers", "time"}``)."""
        try:
            lines = (self.state / "calls.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.strip()]
        return [c for c in out if method is None or c["method"] == method]

    def log(self) -> str:
        try:
            return (self.state / "plugin.log").read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        self.kill()
        for p in (self.socket, self.spec_file):
            if p is not None:
                with contextlib.suppress(OSError):
                    p.unlink()
        shutil.rmtree(self.state, ignore_errors=True)


@contextlib.contextmanager
def running(*plugins: PluginProcess) -> Iterator[tuple[PluginProcess, ...]]:
    """Start them; stop them whatever happens."""
    try:
        for p in plugins:
            p.start()
        yield plugins
    finally:
        for p in plugins:
            p.stop()
