"""A daemon with ``--live-restore`` per test (each test stops, kills and restarts it), holding
``busybox:latest``; cleaned up whatever happens: its containers (and so their monitors),
mounts, cgroups and bridge."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from svc.runtime.shim.launch import find_binary
from tests.conftest import docker_cli
from tests.support.daemon import Daemon, import_busybox


def need_conmon() -> None:
    """svc-shim holds containers and conmon exec sessions: both must be there."""
    if shutil.which("conmon") is None:
        pytest.skip("conmon is not installed (scripts/setup.sh installs it)")
    if not os.access(find_binary(), os.X_OK):
        pytest.skip(f"no svc-shim at {find_binary()} (scripts/setup.sh builds it)")


@pytest.fixture
def lr() -> Iterator[Daemon]:
    need_conmon()
    d = Daemon(["--live-restore"])
    try:
        d.start()
        import_busybox(d)
        yield d
    finally:
        d.cleanup()


def cli(d: Daemon, *args: str, ok: bool = True) -> str:
    out = docker_cli(f"unix://{d.sock}", *args)
    if ok:
        assert out.returncode == 0, f"docker {' '.join(args)}: {out.stderr}"
    return out.stdout


def inspect(d: Daemon, ref: str, template: str) -> str:
    return cli(d, "inspect", "-f", template, ref).strip()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def go_away(d: Daemon, how: str) -> None:
    """The daemon gone: ``term`` (a clean stop) or ``kill`` (SIGKILL)."""
    if how == "term":
        assert d.stop() == 0, d.log()
    else:
        d.kill()


def rfc3339(text: str) -> float:
    """Seconds since the epoch of Go's RFC 3339 time (nanoseconds cut to microseconds)."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


def wait_for(predicate, timeout: float = 10.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def curl(url: str) -> str:
    """The body at ``url`` (stripped), or what went wrong."""
    r = subprocess.run(["curl", "-s", "-S", "-m", "5", url], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"curl {r.returncode}: {r.stderr}"
