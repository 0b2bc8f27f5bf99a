"""The orphan reaper, with real processes: it reaps the orphans re-parented to a subreaper
(an exited child of another session that nobody tracks) one peeked pid at a time, never
reads all of /proc for them, leaves alone a zombie whose launch is still in flight (its exit
code belongs to the supervisor about to record its pid), a tracked one and one of its own
session; and only a zombie nobody reaps makes it read /proc for the orphans behind it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from svc.runtime.process import is_subreaper, set_subreaper
from svc.runtime.reaper import (
    Launches,
    OrphanReaper,
    first_exited_child,
    is_orphan,
    orphan_zombies,
)


def spawn(argv: list[str], *, setsid: bool) -> int:
    """A child running ``argv``; ``setsid``: in a session of its own, as runc's inits are."""
    path = shutil.which(argv[0])
    assert path is not None
    return os.posix_spawn(path, argv, dict(os.environ), setsid=setsid)


def spawn_exited(setsid: bool = True) -> int:
    """A child that exits at once (in a session of its own by default)."""
    return spawn(["true"], setsid=setsid)


def reap(pid: int) -> None:
    assert os.waitpid(pid, os.WNOHANG)[0] == pid  # noqa: ASYNC222 - a zombie


def state(pid: int) -> str | None:
    fields = stat_fields(pid)
    return fields[0] if fields else None


async def wait_state(pid: int, want: str | None) -> None:
    with trio.fail_after(5):
        while state(pid) != want:
            await trio.sleep(0.02)


def stat_fields(pid: int) -> list[str]:
    """state, ppid, pgrp, session... of ``pid`` ([] once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except FileNotFoundError:
        return []


async def adopted_orphan(parent: int, known: list[int]) -> int:
    """The pid of the child this process (a subreaper) adopted when ``parent`` exited, other
    than ``known``; the exited ``parent`` is reaped here, as its waiter would."""
    await wait_state(parent, "Z")
    reap(parent)
    me, my_sid = str(os.getpid()), str(os.getsid(0))
    with trio.fail_after(5):
        while True:
            for entry in Path("/proc").iterdir():
                fields = stat_fields(int(entry.name)) if entry.name.isdigit() else []
                if fields[1:2] == [me] and fields[3] != my_sid and fields[0] != "Z" \
                        and int(entry.name) not in known:
                    return int(entry.name)
            await trio.sleep(0.02)


@pytest.fixture
def subreaper() -> Iterator[None]:
    """This process as a child subreaper while the test runs (the daemon is one)."""
    was = is_subreaper()
    set_subreaper()
    try:
        yield
    finally:
        set_subreaper(was)


async def test_first_exited_child_names_a_zombie_and_leaves_it_unreaped() -> None:
    pid = spawn_exited()
    await wait_state(pid, "Z")
    assert first_exited_child() == pid
    assert state(pid) == "Z"  # still there for whoever waits for it
    reap(pid)


async def test_is_orphan_only_for_an_untracked_child_of_another_session() -> None:
    mine, theirs = spawn_exited(setsid=False), spawn_exited()
    await wait_state(mine, "Z")
    await wait_state(theirs, "Z")
    my_sid = os.getsid(0)
    assert is_orphan(theirs, set(), my_sid)
    assert not is_orphan(theirs, {theirs}, my_sid)  # a supervisor waits for it
    assert not is_orphan(mine, set(), my_sid)  # the daemon's own child (runc, mount...)
    assert sorted(orphan_zombies(set())) == [theirs]  # the scan tells them apart the same way
    reap(mine)
    reap(theirs)
    assert not is_orphan(theirs, set(), my_sid)  # gone (its waiter was quicker)


async def test_a_launch_in_flight_keeps_its_zombie_from_the_reaper() -> None:
    launches = Launches()
    tracked: set[int] = set()
    reaper = OrphanReaper(lambda: tracked, launches)
    async with trio.open_nursery() as nursery:
        await nursery.start(reaper.run)
        with launches.launching():
            pid = spawn_exited()
            await wait_state(pid, "Z")
            await trio.sleep(0.3)  # SIGCHLD came and the reaper's pause is over
            assert state(pid) == "Z"
            tracked.add(pid)  # the supervisor records the pid before the launch ends
        await trio.sleep(0.3)
        assert state(pid) == "Z"  # tracked: the supervisor's to reap
        reap(pid)

        with launches.launching():
            orphan = spawn_exited()
            await wait_state(orphan, "Z")
        other = spawn_exited()  # another SIGCHLD wakes the reaper
        await wait_state(orphan, None)
        await wait_state(other, None)
        nursery.cancel_scope.cancel()
    assert reaper.scans == 0


async def test_orphans_of_a_dead_parent_are_reaped_without_reading_proc(subreaper: None) -> None:
    """A double fork: ``sh`` starts ``sleep`` in a session of its own and exits; the sleep is
    re-parented to this process (a subreaper), as a --pid=host container's orphans are to
    the daemon, and reaped when it exits. The sh is this process's own (its session): the
    reaper waits for its waiter (here the test) to reap it, and then sees the orphan."""
    reaper = OrphanReaper(set, Launches())
    async with trio.open_nursery() as nursery:
        await nursery.start(reaper.run)
        orphans = []
        for _ in range(5):
            parent = spawn(["sh", "-c", "setsid sleep 1 & exit 0"], setsid=False)
            orphans.append(await adopted_orphan(parent, orphans))
        for orphan in orphans:
            await wait_state(orphan, None)
        nursery.cancel_scope.cancel()
    assert reaper.scans == 0


async def test_a_burst_of_orphans_is_reaped_behind_a_tracked_zombie() -> None:
    """A tracked zombie comes first in the kernel's order: the reaper waits for its waiter
    and then reaps every orphan behind it, without reading /proc."""
    tracked: set[int] = set()
    reaper = OrphanReaper(lambda: tracked, Launches())
    first = spawn_exited()
    tracked.add(first)
    await wait_state(first, "Z")
    orphans = [spawn_exited() for _ in range(20)]
    for pid in orphans:
        await wait_state(pid, "Z")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reaper.reap)
        await trio.sleep(0.2)
        assert state(first) == "Z" and all(state(p) == "Z" for p in orphans)
        reap(first)  # its supervisor's wait_pid
        tracked.discard(first)
    assert [state(p) for p in orphans] == [None] * len(orphans)
    assert reaper.scans == 0


async def test_a_zombie_nobody_reaps_makes_the_reaper_read_proc() -> None:
    """A zombie of the daemon's own session that nobody waits for hides the orphans behind
    it: after ``STUCK`` looks the reaper finds them in /proc, and at the next pass it reads
    /proc at once."""
    stuck = spawn_exited(setsid=False)
    await wait_state(stuck, "Z")
    reaper = OrphanReaper(set, Launches())
    try:
        orphan = spawn_exited()
        await wait_state(orphan, "Z")
        with trio.fail_after(5):
            await reaper.reap()
        assert state(orphan) is None and state(stuck) == "Z"
        assert reaper.scans == 1 and reaper.stuck == {stuck}
        orphan = spawn_exited()
        await wait_state(orphan, "Z")
        with trio.fail_after(0.5):  # no second wait for the stuck one
            await reaper.reap()
        assert state(orphan) is None and reaper.scans == 2
    finally:
        reap(stuck)
    await reaper.reap()
    assert reaper.stuck == set()  # no zombie left: none is stuck
