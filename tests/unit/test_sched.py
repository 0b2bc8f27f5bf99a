"""The short scheduler slice (``svc.sched``): taken by the calling thread only; the threads and
processes it starts get the kernel's default again (runc and containers are never touched)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from svc import sched
from svc.storage import atomic


def _slice_ns(task: Path) -> int | None:
    for line in (task / "sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split(":")[1])
    return None


def _default_slice() -> int | None:
    """A fresh thread's slice: the kernel's default (a thread with the short slice, as the
    test runner's may be after a durable write, passes on the default)."""
    seen: dict[str, int | None] = {}
    t = threading.Thread(target=lambda: seen.update(s=_slice_ns(Path(
        f"/proc/self/task/{threading.get_native_id()}"))))
    t.start()
    t.join()
    return seen["s"]


def _in_a_thread() -> tuple[bool, int | None, int | None, int | None]:
    """In a fresh thread (so the test runner's own thread keeps its slice): take the short
    slice, then read its own, a child thread's and a child process's."""
    out: dict[str, object] = {}

    def work() -> None:
        me = Path(f"/proc/self/task/{threading.get_native_id()}")
        out["taken"] = sched.prefer_short_slice()
        out["mine"] = _slice_ns(me)
        seen: dict[str, int | None] = {}
        child = threading.Thread(
            target=lambda: seen.update(t=_slice_ns(Path(
                f"/proc/self/task/{threading.get_native_id()}")))
        )
        child.start()
        child.join()
        out["thread"] = seen["t"]
        proc = subprocess.Popen(["sleep", "5"])
        try:
            out["process"] = _slice_ns(Path(f"/proc/{proc.pid}"))
        finally:
            proc.kill()
            proc.wait()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return (bool(out["taken"]), out["mine"], out["thread"], out["process"])  # type: ignore


def test_only_the_calling_thread_gets_the_short_slice() -> None:
    default = _default_slice()
    if default is None:
        pytest.skip("this kernel shows no se.slice in /proc/<pid>/sched (before EEVDF)")
    taken, mine, thread, process = _in_a_thread()
    if not taken:
        pytest.skip(f"this kernel ({os.uname().release}) refused a custom slice")
    if mine == default:
        pytest.skip(f"this kernel ({os.uname().release}) takes no custom slice (before 6.12)")
    assert mine == sched.SLICE_NS
    assert thread == default and process == default


def test_a_thread_that_waits_for_the_disk_asks_for_it(tmp_path: Path) -> None:
    def work() -> None:
        atomic.atomic_write(tmp_path / "f", b"x")
        seen["slice"] = _slice_ns(Path(f"/proc/self/task/{threading.get_native_id()}"))

    seen: dict[str, int | None] = {}
    t = threading.Thread(target=work)
    t.start()
    t.join()
    default = _default_slice()
    if default is None or seen["slice"] == default:
        pytest.skip(f"this kernel ({os.uname().release}) takes no custom slice")
    assert seen["slice"] == sched.SLICE_NS
