"""The orphan reaper: exited processes re-parented to the daemon that nobody waits for.

Why the daemon gets children it never started: it is a child subreaper
(``process.set_subreaper``), and Linux hands the children of an exiting process to the
nearest subreaper among its ancestors *in the exiting process's own pid namespace*, or else
to that namespace's init (kernel/exit.c, ``find_new_reaper``). So the daemon adopts:

* a container's init and an exec's process when ``runc create`` / ``runc exec --detach``
  exits. Their supervisors reap them through ``process.wait_pid`` once their pids are
  recorded (``tracked``); ``Launches`` covers the moment before, when the process may
  already have exited but nobody has its pid yet;
* the orphans of a container that shares the daemon's pid namespace (``--pid=host``). A
  container with a namespace of its own has its init adopt them: there the dying parent's
  namespace is the container's, and the daemon is not in it;
* whatever a runc or helper process left when it died before reaping its children.

Nobody waits for those of the last two kinds. They are told apart from the daemon's own
children (runc, mount..., each reaped by whoever started it) by their session: runc's init
starts a new one, and nothing the daemon starts itself does. (An orphan of the daemon's own
session is left alone, as a child someone may still wait for.)

Finding them without reading every process's status: on each SIGCHLD,
``waitid(P_ALL, WNOWAIT)`` names the first exited child without reaping it and one
``getsid`` says whose it is. An orphan is reaped and the next one looked at; anyone else's
zombie goes as soon as its waiter runs (looked at again every ``POLL`` seconds), and then
the one behind it shows. Only a zombie that nobody reaps (still there after ``STUCK`` looks)
would hide the others for good: then, and only then, the status of every process on the host
is read (``orphan_zombies``), as it was at every SIGCHLD before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import trio

log = logging.getLogger("svc.runtime.reaper")

POLL = 0.01  # seconds between looks at a zombie whose waiter has not run yet
STUCK = 100  # looks after which such a zombie is taken to hide others: /proc is read
SETTLE = 0.05  # seconds to let a burst of exits arrive together


class Launches:
    """Container processes being started whose pids nobody tracks yet.

    Between runc starting a process (an exec's command, a container's init) and the engine
    recording its pid, the process may already have exited and, once runc is gone, be a
    zombie child of the daemon that no tracked pid names. Its exit code belongs to its
    supervisor, so the orphan reaper waits until no launch is in flight and, after a scan of
    /proc (which yields), scans again if one began meanwhile. (A steady stream of
    overlapping launches only delays it.)
    """

    def __init__(self) -> None:
        self.count = 0
        self.generation = 0  # launches begun so far
        self._idle = trio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        """Hold the reaper off from entry until the pid is recorded (the block's end)."""
        self.count += 1
        self.generation += 1
        if self.count == 1:
            self._idle = trio.Event()
        try:
            yield
        finally:
            self.count -= 1
            if not self.count:
                self._idle.set()

    async def wait_idle(self) -> int:
        """Wait until no launch is in flight; returns the generation seen then. Not a
        checkpoint when none is: the caller may rely on no launch beginning until its next
        checkpoint."""
        while self.count:
            await self._idle.wait()
        return self.generation


def first_exited_child() -> int | None:
    """The pid of an exited, unreaped child of this process (the kernel's first), or None.
    Nothing is reaped: its status stays for whoever waits for it."""
    try:
        result = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # no children at all
        return None
    return result.si_pid if result is not None else None


def is_orphan(pid: int, tracked: Collection[int], my_sid: int) -> bool:
    """Whether our zombie child ``pid`` is the reaper's: nobody tracks it, and it is not of the
    daemon's session (a zombie keeps its session until reaped)."""
    if pid in tracked:
        return False
    try:
        return os.getsid(pid) != my_sid
    except ProcessLookupError:  # its waiter (in another thread) reaped it just now
        return False


def orphan_zombies(tracked: Collection[int], proc: Path = Path("/proc")) -> list[int]:
    """Every exited child of this process that ``is_orphan`` would name, from the status of
    every process on the host (a file read each: the reaper's last resort)."""
    me, my_sid = os.getpid(), os.getsid(0)
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # fields: state ppid pgrp session ...
        if fields[0] == "Z" and int(fields[1]) == me and int(fields[3]) != my_sid:
            pid = int(entry.name)
            if pid not in tracked:
                found.append(pid)
    return found


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # a zombie: returns at once


class OrphanReaper:
    """Reaps the orphans described above, on each SIGCHLD (``run``).

    ``tracked`` gives the pids supervisors wait for (container inits, execs).
    """

    def __init__(self, tracked: Callable[[], Collection[int]], launches: Launches) -> None:
        self.tracked = tracked
        self.launches = launches
        self.stuck: set[int] = set()  # zombies nobody reaped within STUCK looks
        self.scans = 0  # reads of all of /proc so far

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Reap on each SIGCHLD until cancelled.

        Cancellation: a pass is cut short; the orphans it did not reach stay zombies until
        a reaper runs again (a zombie is not lost: it waits for its parent).
        """
        with trio.open_signal_receiver(signal.SIGCHLD) as signals:
            task_status.started()
            async for _ in signals:
                await trio.sleep(SETTLE)
                await self.reap()

    async def reap(self) -> None:
        """Reap every orphan that has exited by now, one at a time, first come first.

        From ``wait_idle`` to the reap there is no checkpoint, so no launch can begin in
        between: a zombie untracked then is no launch's.

        Cancellation: a checkpoint; the orphans not reached yet stay zombies for the next pass.
        """
        my_sid = os.getsid(0)
        blocker, looks = 0, 0
        while True:
            await self.launches.wait_idle()
            pid = first_exited_child()
            if pid is None:
                self.stuck.clear()  # no zombie at all: none is stuck
                return
            if is_orphan(pid, self.tracked(), my_sid):
                _reap(pid)
                await trio.lowlevel.checkpoint()
                continue
            blocker, looks = pid, looks + 1 if pid == blocker else 1
            if pid in self.stuck or looks > STUCK:
                if pid not in self.stuck:
                    log.info("zombie child %d is reaped by nobody: the orphans behind it are "
                             "looked for in /proc at each exit until it goes", pid)
                    self.stuck.add(pid)
                await self.scan()
                return
            await trio.sleep(POLL)

    async def scan(self) -> None:
        """Read the status of every process for orphans a stuck zombie hides, and reap them;
        the scan is done again if a launch began while it ran (its process could be among
        those found).

        Cancellation: a checkpoint; cancelled, nothing is reaped (the scan's thread finishes
        on its own, reading only)."""
        while True:
            seen = await self.launches.wait_idle()
            self.scans += 1
            pids = await trio.to_thread.run_sync(orphan_zombies, set(self.tracked()))
            if not self.launches.count and self.launches.generation == seen:
                break
        for pid in pids:  # no checkpoint from the check to here: nothing can start
            _reap(pid)


async def reap_orphans(tracked: Callable[[], Collection[int]], launches: Launches, *,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """``OrphanReaper(tracked, launches).run()``: reap container orphans until cancelled."""
    await OrphanReaper(tracked, launches).run(task_status=task_status)
