"""An upgrade with live restore: a daemon of a newer build starts over the state of an older
one with containers running, and takes them back. The older build is the first one with live
restore (``OLDEST``, taken from the repository's history); what this build reads of its state
(the container record's ``monitor_pid``, the monitor directory, the cursor, conmon's files) has
not changed since, so no migration is needed yet: a change to any of it must come with one,
and this test keeps the older build's state readable."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.liverestore.conftest import alive, cli, inspect, need_conmon, wait_for
from tests.liverestore.test_live_restore import COUNTER, _numbers
from tests.support.daemon import REPO, Daemon, import_busybox

OLDEST = "5ed825a"  # "live restore: --live-restore runs containers under conmon..."


def _older_build(where: Path) -> Path:
    """The tree of the ``OLDEST`` build, from git (a clone with its history)."""
    where.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", OLDEST], capture_output=True)
    if archive.returncode != 0:
        pytest.fail(f"the older build {OLDEST} is not in this clone's history: "
                    f"{archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def test_a_newer_build_takes_back_what_an_older_one_left_running(tmp_path: Path) -> None:
    need_conmon()
    lr = Daemon(["--live-restore"])  # this build, over the older one's directory
    old = Daemon(["--live-restore", "--bip", lr.bip], workdir=lr.dir,
                 source=_older_build(tmp_path / "old"))
    try:
        _upgrade(old, lr)
    finally:
        old.kill()
        lr.cleanup()


def _upgrade(old: Daemon, lr: Daemon) -> None:
    try:
        old.start()
        import_busybox(old)
        cli(old, "run", "-d", "--name", "counter", "busybox", "sh", "-c", COUNTER)
        pid = inspect(old, "counter", "{{.State.Pid}}")
        wait_for(lambda: len(_numbers(old, "counter")) >= 5, what="the first lines")
        old.kill()  # the upgrade: the older daemon goes, the container runs on
        time.sleep(0.5)
        assert alive(int(pid))
    finally:
        old.kill()
    lr.start()
    assert inspect(lr, "counter", "{{.State.Status}} {{.State.Pid}}") == f"running {pid}"
    logged = [n for _, n in _numbers(lr, "counter")]
    assert _none_lost(logged), logged
    cli(lr, "stop", "-t", "1", "counter")
    assert inspect(lr, "counter", "{{.State.ExitCode}}") == "137"


def _none_lost(logged: list[int]) -> bool:
    """0, 1, 2, ... with nothing lost; one line may come twice, right after itself.

    The older build follows conmon's log file and writes its cursor after each batch of the
    json-file writer's writes: killed between the two, its last line is read again by the
    next daemon (CI saw ``..., 5, 6, 6, 7, ...`` once in many runs; this build's conmon
    path narrows that window to microseconds, ``engine/containers/monitored.py``). The
    svc-shim containers this build runs have none (``test_kill_cycles``)."""
    seen = [n for i, n in enumerate(logged) if i == 0 or n != logged[i - 1]]
    return seen == list(range(len(seen))) and len(logged) - len(seen) <= 1
