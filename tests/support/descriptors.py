"""A daemon's open descriptors, from /proc: for tests that its connections close and that
it lets go of what it removed."""

from __future__ import annotations

import os
import time

from tests.support.daemon import Daemon


def _pid(d: Daemon) -> int:
    assert d.proc is not None
    return int(d.pidfile.read_text()) if d.pidfile.exists() else d.proc.pid


def fds(d: Daemon) -> int:
    return len(os.listdir(f"/proc/{_pid(d)}/fd"))


def files_open(d: Daemon, containing: str) -> list[str]:
    """The files the daemon holds open whose path contains ``containing`` (deleted or not)."""
    found = []
    for fd in os.listdir(f"/proc/{_pid(d)}/fd"):
        try:
            target = os.readlink(f"/proc/{_pid(d)}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if containing in target:
            found.append(target)
    return found


def quiet_fds(d: Daemon, quiet: float = 0.3, timeout: float = 5.0) -> int:
    """The daemon's descriptor count once it has not changed for ``quiet`` seconds: the
    connection of the ping before it may still be closing, and a count taken then would be
    one too high (the baseline the test compares with)."""
    deadline = time.monotonic() + timeout
    n, since = fds(d), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.05)
        if (m := fds(d)) != n:
            n, since = m, time.monotonic()
    return n


def settled_fds(d: Daemon, want: int, timeout: float = 5.0) -> int:
    """The daemon's descriptor count once it is back to ``want`` (or the timeout passed):
    the last closes may still be on their way."""
    deadline = time.monotonic() + timeout
    while (n := fds(d)) > want and time.monotonic() < deadline:
        time.sleep(0.05)
    return n
