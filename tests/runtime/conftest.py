"""Fixtures for the runtime tests against the real runc: a busybox rootfs, a private runc root, a
private cgroup parent, and a teardown that removes every container, cgroup and mount and then
checks nothing is left, whether the test passed or not."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from svc.runtime.cgroups import CgroupV1
from svc.runtime.mounts import mounts_under, unmount_all
from svc.runtime.process import is_subreaper, open_pipes, set_subreaper, wait_pid
from svc.runtime.protocol import RuntimeFailure
from svc.runtime.runc import Runc
from svc.runtime.spec import (
    SpecOpt,
    build_spec,
    cgroups_path,
    default_spec,
    with_cgroups_path,
    with_process,
    with_root,
)

RUNC = os.environ.get("SVC_TEST_RUNC") or shutil.which("runc") or "/usr/sbin/runc"
BUSYBOX = os.environ.get("SVC_TEST_BUSYBOX", "/bin/busybox")
TIMEOUT = 10.0


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "runc tests need root"
    if not os.access(RUNC, os.X_OK):
        return f"no runc at {RUNC}"
    if not os.access(BUSYBOX, os.X_OK):
        return f"no static busybox at {BUSYBOX}"
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        return "needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
    return None


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/busybox plus a symlink per applet, and the directories runc mounts onto."""
    if reason := skip_reason():
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("busybox") / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for name in set(applets) - {"busybox"}:
        (root / "bin" / name).symlink_to("busybox")
    for d in ("proc", "sys", "dev", "etc", "root", "tmp"):
        (root / d).mkdir()
    (root / "tmp").chmod(0o1777)
    return root


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: bytes


async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        into += chunk


@dataclass
class RuncEnv:
    """One test's runc: its own ``--root``, cgroup parent and bundle directory."""

    runc: Runc
    cgroups: CgroupV1
    parent: str
    rootfs: Path
    work: Path
    pids: list[int] = field(default_factory=list)

    def new_id(self) -> str:
        return "t-" + secrets.token_hex(6)

    def cgroup(self, cid: str) -> str:
        return cgroups_path(self.parent, cid)

    def bundle(self, args: list[str] | None, *opts: SpecOpt, rootfs: Path | None = None,
               readonly: bool = False) -> tuple[str, Path]:
        """A new id and a bundle directory whose config.json runs ``args`` (if given)."""
        cid = self.new_id()
        bundle = self.work / cid
        bundle.mkdir()
        base = [with_root(str(rootfs or self.rootfs), readonly),
                with_cgroups_path(self.cgroup(cid))]
        if args is not None:
            base.append(with_process(args, env=["PATH=/bin", "HOME=/root"]))
        spec = build_spec(default_spec(), *base, *opts)
        (bundle / "config.json").write_text(json.dumps(spec))
        return cid, bundle

    async def run(self, args: list[str], *opts: SpecOpt, stdin: bytes | None = None,
                  rootfs: Path | None = None, readonly: bool = False) -> Result:
        """create + start + wait + delete, with stdout/stderr (and stdin) through pipes."""
        cid, bundle = self.bundle(args, *opts, rootfs=rootfs, readonly=readonly)
        out, err = bytearray(), bytearray()
        pipes = open_pipes(stdin=stdin is not None)
        try:
            with trio.fail_after(TIMEOUT):
                created = await self.runc.create(cid, bundle, stdio=pipes)
                self.pids.append(created.pid)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(drain, pipes.stdout, out)
                    nursery.start_soon(drain, pipes.stderr, err)
                    if stdin is not None and pipes.stdin is not None:
                        await pipes.stdin.send_all(stdin)
                        await pipes.stdin.aclose()
                    await self.runc.start(cid)
                    code = await wait_pid(created.pid)
                await self.runc.delete(cid)
        finally:
            await pipes.aclose()
        return Result(code, bytes(out), bytes(err))

    async def cleanup(self) -> list[str]:
        """Delete every container, reap their inits, unmount, remove cgroups; report leftovers."""
        problems = []
        with trio.move_on_after(TIMEOUT):
            for ctr in await self.runc.list():
                try:
                    await self.runc.delete(ctr["id"], force=True)
                except RuntimeFailure as exc:
                    problems.append(f"runc delete {ctr['id']}: {exc}")
            for pid in self.pids:
                try:
                    with trio.move_on_after(2):
                        await wait_pid(pid)
                except (ProcessLookupError, ChildProcessError):
                    pass
            if left := await self.runc.list():
                problems.append(f"containers left: {[c['id'] for c in left]}")
        unmount_all(self.work)
        if left_mounts := mounts_under(self.work):
            problems.append(f"mounts left: {left_mounts}")
        if left_cgroups := self.cgroups.remove(self.parent):
            problems.append(f"cgroups left: {left_cgroups}")
        if self.cgroups.exists(self.parent):
            problems.append(f"cgroup parent {self.parent} still exists")
        return problems


@pytest.fixture
async def rt(rootfs: Path, tmp_path: Path) -> AsyncIterator[RuncEnv]:
    was_subreaper = is_subreaper()
    set_subreaper()
    env = RuncEnv(Runc(tmp_path / "runc", RUNC), CgroupV1(), f"/svc-test-{secrets.token_hex(4)}",
                  rootfs, tmp_path / "bundles")
    env.work.mkdir()
    try:
        yield env
    finally:
        problems = await env.cleanup()
        set_subreaper(was_subreaper)
        assert not problems, problems
