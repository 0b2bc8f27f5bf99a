"""The files conmon keeps for a container an older build started under it (live restore):
the log (``logtail`` reads it), the exit file (named by the container's id), conmon's pid
file; the attach socket and the ``ctl`` and ``winsz`` fifos are in the OCI bundle, where
conmon makes them. This build starts no conmon (``svc.runtime.shim``): it takes back what
older builds left running under one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MonitorFiles:
    """Where conmon keeps what outlives the daemon, for container (or exec) ``uid``; an exec
    names its container in ``cid`` (conmon names the exit file after it)."""

    dir: Path
    bundle: Path
    uid: str
    cid: str = ""

    @property
    def log(self) -> Path:
        return self.dir / "output.log"

    @property
    def exit_file(self) -> Path:
        return self.dir / (self.cid or self.uid)

    @property
    def pid_file(self) -> Path:
        return self.dir / "conmon.pid"

    @property
    def attach(self) -> Path:
        return self.bundle / "attach"

    def exit_code(self) -> int | None:
        """The code conmon wrote when the container ended (None: not yet, or unreadable)."""
        try:
            text = self.exit_file.read_text().strip()
        except OSError:
            return None
        try:
            return int(text)
        except ValueError:
            return None
