"""A full disk is an ordinary condition (issue 24, item 2): a container that fills the daemon's
root while writing to stdout keeps a true state, stop/kill/rm answer, other operations fail
with a clear error and leave nothing half-made, and the daemon stops within its timeout.

The daemon's root is a small tmpfs the test mounts (and unmounts, whatever happens)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon, with_busybox
from tests.support.descriptors import files_open

SIZE = "48m"
NOISY = ["sh", "-c", "while :; do echo 0123456789012345678901234567890123456789012345678901234"
                     "5678901234567890123456789012345678901234567890123456789; done"]


class FullDiskDaemon(Daemon):
    """A daemon whose --root is a tmpfs of ``SIZE`` (its socket and log stay elsewhere)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.root = Path(tempfile.mkdtemp(prefix="svct-full-", dir="/tmp"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "svct-full",
                        str(self.root)], check=True)

    def cleanup(self) -> None:
        try:
            super().cleanup()
        finally:
            subprocess.run(["umount", "-l", str(self.root)], check=False)
            shutil.rmtree(self.root, ignore_errors=True)


def _free(root: Path) -> int:
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize


def _fill_rest(root: Path) -> Path:
    """Take what space is left with a plain file (removed to free it again)."""
    filler = root / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


@pytest.fixture
def full() -> Iterator[tuple[FullDiskDaemon, httpx.Client]]:
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox(FullDiskDaemon()) as d, httpx.Client(
            transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
            timeout=30) as c:
        yield d, c  # type: ignore[misc]


def _run(c: httpx.Client, cmd: list[str], **fields: Any) -> str:
    r = c.post("/containers/create", json={"Image": "busybox", "Cmd": cmd, **fields})
    assert r.status_code == 201, r.text
    cid = str(r.json()["Id"])
    r = c.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    return cid


def _state(c: httpx.Client, cid: str) -> dict[str, Any]:
    r = c.get(f"/containers/{cid}/json")
    assert r.status_code == 200, r.text
    return dict(r.json()["State"])


def _wait_for(what: str, check: Any, timeout: float = 30,
              why: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}\n{why()}"
        time.sleep(0.1)


def _where_the_space_is(d: FullDiskDaemon) -> str:
    """What holds the root's space: its biggest files, the mounts under it, files deleted
    but still open on it (by which process), and the daemon log's tail."""
    dev = os.stat(d.root).st_dev
    sizes = []
    for p in d.root.rglob("*"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if st.st_dev == dev and p.is_file():
            sizes.append((st.st_blocks * 512, str(p.relative_to(d.root))))
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if str(d.root) in line]
    held = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
            if target.endswith(" (deleted)") and os.stat(fd).st_dev == dev:
                comm = (fd.parent.parent / "comm").read_text().strip()
                held.append(f"{fd} {comm} {target}")
        except OSError:
            continue
    return "\n".join([f"free {_free(d.root)}", "biggest:",
                      *(f"  {n} {p}" for n, p in sorted(sizes, reverse=True)[:15]),
                      "mounts:", *mounts, "deleted but open:", *held,
                      "log tail:", *d.log().splitlines()[-60:]])


def _timed(c: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
    start = time.monotonic()
    r = c.request(method, path, **kw)
    assert time.monotonic() - start < 10, f"{method} {path} took {time.monotonic() - start:.1f}s"
    return r


def test_a_container_filling_the_disk_through_its_log(
        full: tuple[FullDiskDaemon, httpx.Client]) -> None:
    d, c = full
    noisy = _run(c, NOISY)
    _wait_for("the disk filled", lambda: _free(d.root) < 64 << 10)
    _wait_for("the daemon noticed", lambda: "its log cannot be written" in d.log())
    # the state is true: the process runs on (its output dropped), and inspect says so
    st = _state(c, noisy)
    assert st["Running"] is True and st["Pid"] > 0
    assert Path(f"/proc/{st['Pid']}").exists()
    time.sleep(0.5)
    assert _state(c, noisy)["Running"] is True
    # every operation answers: ones that need room fail clearly and leave nothing behind
    networks = {n["Name"] for n in c.get("/networks").json()}
    r = _timed(c, "POST", "/networks/create", json={"Name": "fullnet", "Driver": "bridge"})
    assert r.status_code in (201, 507), r.text
    if r.status_code == 507:
        assert "no space left on device" in r.text
        assert {n["Name"] for n in c.get("/networks").json()} == networks
        assert "fullnet" not in subprocess.run(["iptables-save"], capture_output=True,
                                               text=True).stdout
    r = _timed(c, "POST", "/volumes/create", json={"Name": "fullvol"})
    assert r.status_code in (201, 507), r.text
    r = _timed(c, "POST", "/containers/create", json={"Image": "busybox", "Cmd": ["true"]})
    assert r.status_code in (201, 507), r.text
    assert r.status_code == 201 or "no space left on device" in r.text
    # stop answers within its timeout, and the container's end is recorded
    r = _timed(c, "POST", f"/containers/{noisy}/stop", params={"t": "1"})
    assert r.status_code == 204, r.text
    st = _state(c, noisy)
    assert st["Running"] is False and st["Status"] == "exited"
    assert "Traceback" not in d.log()


def test_stop_kill_rm_and_the_daemon_stop_answer_on_a_full_disk(
        full: tuple[FullDiskDaemon, httpx.Client]) -> None:
    d, c = full
    # one will write into its own root (the overlay's upper dir on the disk) and fail
    writer = _run(c, ["sh", "-c", "sleep 2; dd if=/dev/zero of=/fill bs=1M count=100; echo $?"])
    late = c.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"]}).json()["Id"]
    ids = [_run(c, NOISY) for _ in range(3)]
    _wait_for("the disk filled", lambda: _free(d.root) < 64 << 10)
    filler = _fill_rest(d.root)
    # a start on a full disk fails clearly and leaves nothing behind (or runs, if it could)
    r = _timed(c, "POST", f"/containers/{late}/start")
    assert r.status_code == 204 or (r.status_code == 507 and "no space left" in r.text), r.text
    if r.status_code == 507:
        assert _state(c, late)["Running"] is False
    _wait_for("the writer ended", lambda: _state(c, writer)["Status"] == "exited")
    assert _state(c, writer)["ExitCode"] == 0  # its shell printed dd's failure and ended
    assert _timed(c, "POST", f"/containers/{ids[0]}/kill").status_code == 204
    _wait_for("the kill was recorded", lambda: _state(c, ids[0])["Status"] == "exited", 10)
    assert _timed(c, "POST", f"/containers/{ids[1]}/stop", params={"t": "1"}).status_code \
        == 204
    assert _timed(c, "DELETE", f"/containers/{ids[2]}", params={"force": "1"}).status_code \
        == 204
    assert c.get(f"/containers/{ids[2]}/json").status_code == 404
    # with room again (the filler and the stopped containers' logs gone), everything works
    # as before, logging included
    filler.unlink()
    for cid in (ids[0], ids[1], writer):
        assert c.delete(f"/containers/{cid}").status_code == 204
    for cid in (*ids, writer):  # their logs are held open by no one: they leave with the names
        assert files_open(d, cid) == []
    # (a removed container's files leave the disk in the background: svc.engine.trash)
    _wait_for("room again", lambda: _free(d.root) > 8 << 20,
              why=lambda: _where_the_space_is(d))
    again = _run(c, ["sh", "-c", "echo back; sleep 30"])
    _wait_for("logged again", lambda: b"back" in c.get(
        f"/containers/{again}/logs", params={"stdout": "1"}).content)
    # a daemon stop ends within its timeout with a container still writing to a full disk
    _run(c, NOISY)
    _fill_rest(d.root)
    start = time.monotonic()
    assert d.stop(timeout=20) == 0
    assert time.monotonic() - start < 15
    assert "Traceback" not in d.log()


def _snapshot(d: FullDiskDaemon) -> tuple[list[str], list[str], list[str]]:
    """What a failed create must not leave: files under the root (the filler aside), bridges,
    iptables rules."""
    # the store's own empty volumes directory, and the event log, which the daemon's flush
    # creates or rewrites in the background at any moment, are not what a create made
    files = sorted(str(p.relative_to(d.root)) for p in d.root.rglob("*")
                   if p.name != "filler" and "/diff/" not in str(p)
                   and not p.name.startswith("events.jsonl")
                   and str(p.relative_to(d.root)) != "volumes")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    bridges = sorted(line.split(":")[1].strip() for line in links.splitlines()
                     if ": br-" in line)
    rules = sorted(subprocess.run(["iptables-save"], capture_output=True,
                                  text=True).stdout.splitlines())
    # the rules, not the chains' packet counters (any traffic of the host moves them)
    return files, bridges, [re.sub(r" \[\d+:\d+\]$", "", r) for r in rules
                            if not r.startswith("#")]


def test_creates_on_a_full_disk_fail_clearly_and_leave_nothing(
        full: tuple[FullDiskDaemon, httpx.Client]) -> None:
    d, c = full
    made = c.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"]}).json()["Id"]
    assert c.post(f"/containers/{made}/start").status_code == 204
    assert c.post(f"/containers/{made}/wait").json()["StatusCode"] == 0
    filler = _fill_rest(d.root)
    try:
        before = _snapshot(d)
        r = _timed(c, "POST", "/commit", params={"container": made, "repo": "full-commit"})
        assert r.status_code == 507 and "no space left on device" in r.text, r.text
        for path, body in (("/networks/create", {"Name": "full-net"}),
                           ("/volumes/create", {"Name": "full-vol"}),
                           ("/containers/create", {"Image": "busybox", "Cmd": ["true"]})):
            r = _timed(c, "POST", path, json=body)
            assert r.status_code == 507, (path, r.status_code, r.text)
            assert "no space left on device" in r.text, r.text
        r = _timed(c, "POST", "/images/create", params={"fromSrc": "-", "repo": "full-img"},
                   content=timg.layer_tar([timg.file("big", os.urandom(1 << 20))]))
        last = r.text.strip().splitlines()[-1]
        assert "no space left on device" in last, last
        after = _snapshot(d)
        for was, now in zip(before, after, strict=True):
            assert now == was, (sorted(set(now) - set(was)), sorted(set(was) - set(now)))
        assert c.get("/networks").json() and "full-net" not in c.get("/networks").text
        assert "full-vol" not in c.get("/volumes").text
        assert [x["Id"] for x in c.get("/containers/json", params={"all": "1"}).json()] \
            == [made]
        assert "full-img" not in c.get("/images/json").text
        assert "full-commit" not in c.get("/images/json").text
    finally:
        filler.unlink()
    # room again: the same requests succeed
    assert c.post("/networks/create", json={"Name": "full-net"}).status_code == 201
    assert c.post("/volumes/create", json={"Name": "full-vol"}).status_code == 201
    assert "Traceback" not in d.log()
