"""The orphan reaper leaves alone a zombie whose launch is still in flight (its exit code
belongs to the supervisor that is about to record its pid), and reaps it once the launch
is over and nobody tracks it; it scans /proc only when some child has exited."""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path

import trio

from svc.runtime.process import Launches, any_exited_child, reap_orphans


def state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return None


def spawn_exited() -> int:
    """A child in a session of its own (as runc's processes are) that exits at once."""
    true = shutil.which("true")
    assert true is not None
    return os.posix_spawn(true, [true], dict(os.environ), setsid=True)


async def wait_state(pid: int, want: str | None) -> None:
    with trio.fail_after(5):
        while state(pid) != want:
            await trio.sleep(0.02)


async def test_a_launch_in_flight_keeps_its_zombie_from_the_reaper() -> None:
    launches = Launches()
    tracked: set[int] = set()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(reap_orphans, lambda: tracked, launches))
        with launches.launching():
            pid = spawn_exited()
            await wait_state(pid, "Z")
            await trio.sleep(0.3)  # SIGCHLD came and the reaper's pause is over
            assert state(pid) == "Z"
            tracked.add(pid)  # the supervisor records the pid before the launch ends
        await trio.sleep(0.3)
        assert state(pid) == "Z"  # tracked: the supervisor's to reap
        assert os.waitpid(pid, os.WNOHANG)[0] == pid  # noqa: ASYNC222 - a zombie

        with launches.launching():
            orphan = spawn_exited()
            await wait_state(orphan, "Z")
        other = spawn_exited()  # another SIGCHLD wakes the reaper
        await wait_state(orphan, None)
        await wait_state(other, None)
        nursery.cancel_scope.cancel()


async def test_an_exited_child_is_seen_and_left_unreaped() -> None:
    """The reaper's check before a scan of /proc: it sees a zombie child and reaps nothing."""
    pid = spawn_exited()
    await wait_state(pid, "Z")
    assert any_exited_child()
    assert state(pid) == "Z"  # still there for whoever waits for it
    assert os.waitpid(pid, os.WNOHANG)[0] == pid  # noqa: ASYNC222 - a zombie
