"""A private ``systemd-journald`` for the tests, never the machine's journal.

journald runs without systemd as PID 1 (it binds its own sockets when none are handed to
it), in a mount namespace of its own (``unshare --mount --propagation private``) where a
fresh tmpfs hides the host's ``/run``, and two directories of the test's are bound over
``/run/systemd/journal`` (its sockets: the driver writes to ``<dir>/sock/socket``) and
``/run/log/journal`` (volatile storage: ``journalctl -D <dir>/journal`` reads it back), with
a ``journald.conf`` of the test's bound over ``/etc/systemd/journald.conf`` (no rate limit,
no kernel messages, no forwarding). Stopping journald ends the namespace and its mounts;
``stop()`` then removes the directories, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BINARIES = ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald")
CONF = """[Journal]
Storage=volatile
RateLimitIntervalSec=0
RateLimitBurst=0
ReadKMsg=no
Audit=no
ForwardToSyslog=no
ForwardToKMsg=no
ForwardToConsole=no
ForwardToWall=no
"""
SCRIPT = """set -e
mount -t tmpfs svc-test-journald /run
mkdir -p /run/systemd/journal /run/log/journal
mount --bind "$1/sock" /run/systemd/journal
mount --bind "$1/journal" /run/log/journal
mount --bind "$1/journald.conf" /etc/systemd/journald.conf
exec "$2"
"""


class PrivateJournald:
    """One journald of the test's (see the module)."""

    def __init__(self) -> None:
        binary = next((b for b in BINARIES if os.path.exists(b)), None)
        if binary is None:
            pytest.skip("systemd-journald is not installed (apt-get install systemd)")
        if shutil.which("journalctl") is None or shutil.which("unshare") is None:
            pytest.skip("journalctl or unshare is missing")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="svc-journald-"))
        (self.dir / "sock").mkdir()
        (self.dir / "journal").mkdir()
        (self.dir / "journald.conf").write_text(CONF)
        self.socket = str(self.dir / "sock" / "socket")
        self.directory = str(self.dir / "journal")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start journald; skip the test with journald's words if it cannot run here."""
        for stale in (self.dir / "sock").iterdir():  # a stopped journald's sockets stay
            stale.unlink()
        with open(self.dir / "journald.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", SCRIPT, "sh",
                 str(self.dir), self.binary], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not (self._accepting() and self._journal_files()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = (self.dir / "journald.log").read_text(errors="replace")
                self.stop_process()
                pytest.skip(f"a private systemd-journald cannot run here: {out.strip()}")
            time.sleep(0.02)

    def _accepting(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(self.socket)
            except OSError:
                return False
            return True

    def _journal_files(self) -> bool:
        return any(Path(self.directory).glob("*/*.journal"))

    def stop_process(self) -> None:
        """Stop journald (its socket stays, refusing, as a stopped journal's does)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        """Stop journald and remove everything of it."""
        try:
            self.stop_process()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def entries(self, *matches: str) -> list[dict[str, Any]]:
        """The entries matching ``matches`` (``FIELD=value``), as ``journalctl -o json``."""
        out = subprocess.run(
            ["journalctl", f"--directory={self.directory}", "--output=json", "--all",
             "--no-pager", "--quiet", *matches], capture_output=True, check=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def wait_entries(self, count: int, *matches: str,
                     timeout: float = 10) -> list[dict[str, Any]]:
        """The entries matching ``matches`` once there are at least ``count`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.entries(*matches)
            if len(got) >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


@contextlib.contextmanager
def private_journald() -> Iterator[PrivateJournald]:
    """A started private journald, stopped and removed on the way out."""
    journal = PrivateJournald()
    try:
        journal.start()
        yield journal
    finally:
        journal.stop()
