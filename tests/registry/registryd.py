"""Debian's ``docker-registry`` (distribution 2.8) for the tests: open, htpasswd or token auth.

Each :class:`Registry` runs ``docker-registry serve`` on a free 127.0.0.1 port with its own
temporary storage; ``stop()`` kills it and removes the directory, whatever happened.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARY = "docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """One registry process. ``auth`` is the YAML of its ``auth:`` section (or None),
    ``http_extra`` more of its ``http:`` section (``tls:``), indented by two."""

    def __init__(self, auth: str | None = None, *, schema1: bool = True,
                 http_extra: str = "") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="svc-registry-"))
        self.port = free_port()
        self.domain = f"127.0.0.1:{self.port}"
        self.storage = self.dir / "data"
        self.log_path = self.dir / "registry.log"
        config = [
            "version: 0.1",
            "log:", "  level: info", "  accesslog:", "    disabled: true",
            "storage:", f"  filesystem:\n    rootdirectory: {self.storage}",
            "  delete:", "    enabled: true",
            "http:", f"  addr: 127.0.0.1:{self.port}", "  secret: svc-test-secret",
        ]
        if http_extra:
            config.append(http_extra)
        if schema1:
            config += ["compatibility:", "  schema1:", "    enabled: true"]
        if auth:
            config += ["auth:", auth]
        self.config_path = self.dir / "config.yml"
        self.config_path.write_text("\n".join(config) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Registry:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([BINARY, "serve", str(self.config_path)],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited {self.proc.returncode}:\n"
                                   f"{self.log()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"docker-registry did not listen on {self.port}:\n{self.log()}")

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def blob_path(self, digest: str) -> Path:
        """Where the filesystem driver keeps a blob's bytes."""
        algo, hexa = digest.split(":", 1)
        return self.storage / "docker/registry/v2/blobs" / algo / hexa[:2] / hexa / "data"

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def htpasswd_line(user: str, password: str) -> str:
    """A bcrypt htpasswd entry (the registry's htpasswd module accepts no other kind)."""
    out = subprocess.run(["htpasswd", "-Bbn", user, password], check=True,
                         capture_output=True, text=True).stdout
    return out.strip() + "\n"
