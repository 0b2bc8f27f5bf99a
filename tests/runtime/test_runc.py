"""The runtime layer against the real runc, a busybox rootfs and the host's cgroup v1 hierarchies.

Each test gets its own runc root and cgroup parent (``rt`` in conftest), whose teardown deletes
every container, unmounts and removes cgroups, and fails the test if anything is left.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from svc.runtime.mounts import host_devices, mount_overlay, mounts_under, unmount
from svc.runtime.process import host_capabilities, open_pipes, wait_pid
from svc.runtime.protocol import (
    ContainerNotFound,
    ContainerStateConflict,
    Resources,
    Rlimit,
    RuntimeFailure,
)
from svc.runtime.runc import Runc
from svc.runtime.spec import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    SpecOpt,
    with_capabilities,
    with_hostname,
    with_namespaces,
    with_oom_score_adj,
    with_privileged,
    with_process,
    with_resources,
    with_rlimits,
)
from tests.runtime.conftest import TIMEOUT, RuncEnv, drain


def cap_mask(names: list[str]) -> str:
    return f"{sum(1 << ALL_CAPABILITIES.index(n) for n in names):016x}"


async def test_true_exits_zero(rt: RuncEnv) -> None:
    assert (await rt.run(["true"])).code == 0


async def test_exit_code_and_output_through_pipes(rt: RuncEnv) -> None:
    r = await rt.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (r.code, r.stdout, r.stderr) == (7, b"out\n", b"err\n")


async def test_stdin_reaches_the_container_and_closing_it_is_eof(rt: RuncEnv) -> None:
    r = await rt.run(["sh", "-c", "cat; echo done"], stdin=b"hello\nworld\n")
    assert (r.code, r.stdout) == (0, b"hello\nworld\ndone\n")


async def _started_sleeper(rt: RuncEnv, *opts: SpecOpt) -> tuple[str, int]:
    cid, bundle = rt.bundle(["sleep", "100"], *opts)
    created = await rt.runc.create(cid, bundle)
    rt.pids.append(created.pid)
    await rt.runc.start(cid)
    return cid, created.pid


async def test_sigkill_is_137(rt: RuncEnv) -> None:
    with trio.fail_after(TIMEOUT):
        cid, pid = await _started_sleeper(rt)
        assert (await rt.runc.state(cid))["status"] == "running"
        await rt.runc.kill(cid, signal.SIGKILL)
        assert await wait_pid(pid) == 137
        assert (await rt.runc.state(cid))["status"] == "stopped"
        await rt.runc.delete(cid)


async def test_sigterm_is_143_when_not_a_namespace_init(rt: RuncEnv) -> None:
    # A pid-namespace init ignores SIGTERM without a handler (docker stop waits, then kills), so
    # the process shares the host pid namespace here to die of the signal itself.
    with trio.fail_after(TIMEOUT):
        cid, pid = await _started_sleeper(rt, with_namespaces(pid="host"))
        await rt.runc.kill(cid, signal.SIGTERM)
        assert await wait_pid(pid) == 143
        await rt.runc.delete(cid)


async def test_runc_errors_carry_runc_message(rt: RuncEnv) -> None:
    cid, bundle = rt.bundle(["/no/such/binary"])
    with pytest.raises(RuntimeFailure) as info:
        await rt.runc.create(cid, bundle)
    assert 'exec: "/no/such/binary": stat /no/such/binary: no such file or directory' in str(
        info.value)
    assert info.value.command == "create" and info.value.exit_code == 1
    assert await rt.runc.list() == []
    with pytest.raises(ContainerNotFound):
        await rt.runc.state("t-nope")
    with pytest.raises(ContainerNotFound):
        await rt.runc.kill("t-nope", signal.SIGKILL)


async def test_a_failed_create_with_pipes_leaves_nothing(rt: RuncEnv) -> None:
    # Pass-through: runc's own fatal message goes to the stderr it hands the init, i.e. the
    # container's stderr pipe. The exception carries it too (read from runc's --log file).
    cid, bundle = rt.bundle(["/no/such/binary"])
    pipes = open_pipes(stdin=True)
    err = bytearray()
    try:
        with pytest.raises(RuntimeFailure, match="no such file or directory"):
            await rt.runc.create(cid, bundle, stdio=pipes)
        await drain(pipes.stderr, err)  # EOF: runc and the init are gone, child ends closed
    finally:
        await pipes.aclose()
    assert b"no such file or directory" in err
    assert await rt.runc.list() == [] and not rt.cgroups.exists(rt.cgroup(cid))


needs_no_sys_resource = pytest.mark.skipif(
    "CAP_SYS_RESOURCE" in host_capabilities(), reason="the daemon holds CAP_SYS_RESOURCE here")


@needs_no_sys_resource
async def test_without_cap_sys_resource_limits_cannot_be_raised(rt: RuncEnv) -> None:
    # Below the daemon's own oom_score_adj, or above its hard RLIMIT_NOFILE, needs the capability.
    own = int(Path("/proc/self/oom_score_adj").read_text())
    hard = int(Path("/proc/self/limits").read_text().split("Max open files")[1].split()[1])
    if own > -1000:
        cid, bundle = rt.bundle(["true"], with_oom_score_adj(own - 1))
        with pytest.raises(RuntimeFailure, match="oom_score_adj: Permission denied"):
            await rt.runc.create(cid, bundle)
    cid, bundle = rt.bundle(["true"], with_rlimits([Rlimit("nofile", hard + 1, hard + 1)]))
    with pytest.raises(RuntimeFailure, match="rlimit type 7: operation not permitted"):
        await rt.runc.create(cid, bundle)
    assert await rt.runc.list() == []


async def test_kill_of_a_stopped_container_is_a_conflict(rt: RuncEnv) -> None:
    with trio.fail_after(TIMEOUT):
        cid, pid = await _started_sleeper(rt)
        await rt.runc.kill(cid, signal.SIGKILL)
        await wait_pid(pid)
        with pytest.raises(ContainerStateConflict):
            await rt.runc.kill(cid, signal.SIGTERM)
        with pytest.raises(ContainerStateConflict):
            await rt.runc.pause(cid)


async def test_tty_through_the_console_socket(rt: RuncEnv) -> None:
    cid, bundle = rt.bundle(None, with_process(["sh"], env=["PATH=/bin"], terminal=True))
    out = bytearray()
    with trio.fail_after(TIMEOUT):
        created = await rt.runc.create(cid, bundle, terminal=True)
        rt.pids.append(created.pid)
        console = created.console
        assert console is not None
        async with console:
            console.resize(40, 132)
            await rt.runc.start(cid)
            await console.send_all(b"stty size; tty; exit 3\n")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, console, out)
                code = await wait_pid(created.pid)
        await rt.runc.delete(cid)
    assert code == 3
    text = out.decode(errors="replace").replace("\r", "")
    assert "\n40 132\n" in text
    assert "/dev/pts/0" in text or "/dev/console" in text


async def test_resize_while_running(rt: RuncEnv) -> None:
    cid, bundle = rt.bundle(None, with_process(["sh"], env=["PATH=/bin"], terminal=True))
    out = bytearray()
    with trio.fail_after(TIMEOUT):
        created = await rt.runc.create(cid, bundle, terminal=True)
        rt.pids.append(created.pid)
        assert created.console is not None
        async with created.console as console, trio.open_nursery() as nursery:
            nursery.start_soon(drain, console, out)
            await rt.runc.start(cid)
            await console.send_all(b"stty size; echo M$((1+1))\n")
            while b"M2\r\n" not in out:  # the output, not the echo of the typed line
                await trio.sleep(0.01)
            console.resize(50, 100)
            await console.send_all(b"stty size; exit\n")
            assert await wait_pid(created.pid) == 0
        await rt.runc.delete(cid)
    text = out.decode(errors="replace").replace("\r", "")
    assert "\n50 100\n" in text, text


async def test_memory_limit_is_visible_inside(rt: RuncEnv) -> None:
    r = await rt.run(["cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"],
                     with_resources(Resources(memory=64 << 20)))
    assert (r.code, r.stdout) == (0, b"67108864\n")


async def test_dropped_capability_is_refused(rt: RuncEnv) -> None:
    r = await rt.run(["sh", "-c", "grep CapBnd /proc/self/status; chown 1 /tmp"],
                     with_capabilities(drop=["chown"], available=host_capabilities()))
    assert r.code != 0
    assert b"Operation not permitted" in r.stderr
    expected = [c for c in DEFAULT_CAPABILITIES if c != "CAP_CHOWN"]
    assert r.stdout.split()[-1].decode() == cap_mask(expected)


async def test_privileged_gets_exactly_the_daemon_capabilities(rt: RuncEnv) -> None:
    have = host_capabilities()
    r = await rt.run(["sh", "-c", "grep CapEff /proc/self/status; ls /dev/null /dev/zero"],
                     with_privileged(host_devices(), have))
    assert r.code == 0, r.stderr
    assert r.stdout.split()[1].decode() == cap_mask(have)


async def test_readonly_rootfs_refuses_writes(rt: RuncEnv) -> None:
    r = await rt.run(["touch", "/newfile"], readonly=True)
    assert r.code != 0 and b"Read-only file system" in r.stderr
    assert not (rt.rootfs / "newfile").exists()


async def test_hostname_user_groups_rlimit_oom_score(rt: RuncEnv) -> None:
    script = "hostname; id -u; id -g; id -G; ulimit -n; cat /proc/self/oom_score_adj"
    r = await rt.run(
        ["sh", "-c", script], with_hostname("box1"),
        with_process(["sh", "-c", script], env=["PATH=/bin"], user_uid=1000, user_gid=1001,
                     additional_gids=[10, 20]),
        with_rlimits([Rlimit("nofile", 512, 512)]), with_oom_score_adj(500))
    assert r.code == 0, r.stderr
    lines = r.stdout.decode().split("\n")
    assert lines[:3] == ["box1", "1000", "1001"]
    assert sorted(lines[3].split()) == ["10", "1001", "20"]
    assert lines[4:6] == ["512", "500"]


async def test_pause_and_resume_use_the_freezer(rt: RuncEnv) -> None:
    with trio.fail_after(TIMEOUT):
        cid, pid = await _started_sleeper(rt)
        await rt.runc.pause(cid)
        assert (await rt.runc.state(cid))["status"] == "paused"
        assert rt.cgroups.freezer_state(rt.cgroup(cid)) == "FROZEN"
        await rt.runc.resume(cid)
        assert (await rt.runc.state(cid))["status"] == "running"
        assert rt.cgroups.freezer_state(rt.cgroup(cid)) == "THAWED"
        # The cgroups module freezes the same cgroup directly.
        await rt.cgroups.freeze(rt.cgroup(cid))
        assert (await rt.runc.state(cid))["status"] == "paused"
        await rt.cgroups.thaw(rt.cgroup(cid))
        await rt.runc.kill(cid, signal.SIGKILL)
        assert await wait_pid(pid) == 137
        await rt.runc.delete(cid)
        assert not rt.cgroups.exists(rt.cgroup(cid))


async def test_cgroup_stats_of_a_running_container(rt: RuncEnv) -> None:
    res = Resources(memory=32 << 20, pids_limit=50, cpu_shares=512, cpu_quota=50000,
                    cpu_period=100000)
    with trio.fail_after(TIMEOUT):
        cid, pid = await _started_sleeper(rt, with_resources(res))
        cg = rt.cgroup(cid)
        # runc start returns before the init (a multi-threaded Go process until it execs) has
        # become the single-threaded sleep: pids.current counts its threads for a moment.
        while (stats := rt.cgroups.stats(cg)).pids is None or stats.pids.current != 1:
            await trio.sleep(0.005)
        assert rt.cgroups.procs(cg) == [pid]
        assert stats.memory is not None and stats.memory.limit == 32 << 20
        assert stats.memory.usage > 0 and "rss" in stats.memory.stats
        assert stats.cpu is not None and stats.cpu.total_usage > 0
        assert len(stats.cpu.percpu_usage) >= 1
        assert stats.pids is not None and (stats.pids.current, stats.pids.limit) == (1, 50)
        assert stats.blkio is not None
        assert rt.cgroups.read("cpu", cg, "cpu.shares").strip() == "512"
        rt.cgroups.write("cpu", cg, "cpu.shares", 256)  # an update in place
        assert rt.cgroups.read("cpu", cg, "cpu.shares").strip() == "256"
        await rt.runc.kill(cid, signal.SIGKILL)
        await wait_pid(pid)
        await rt.runc.delete(cid)


async def test_knob_probe_reports_what_the_kernel_lacks(rt: RuncEnv) -> None:
    knobs = rt.cgroups.probe(rt.parent)
    assert knobs.has("memory.limit_in_bytes") and knobs.has("pids.max")
    assert knobs.has("freezer.state")
    # Facts of this machine, reported rather than failed on (see the runtime notes).
    print("missing cgroup knobs:", knobs.missing, "kmem effective:",
          knobs.kernel_memory_effective)
    assert rt.cgroups.children(rt.parent) == []


async def test_overlay_rootfs_mount_and_unmount(rt: RuncEnv) -> None:
    layers = rt.work / "layers"
    (layers / "l").mkdir(parents=True)
    (layers / "l" / "BASE").symlink_to(rt.rootfs)
    (layers / "top").mkdir()
    (layers / "top" / "greeting").write_text("from the top layer\n")
    (layers / "l" / "TOP").symlink_to("../top")
    upper, work, merged = rt.work / "upper", rt.work / "work", rt.work / "merged"
    for d in (upper, work, merged):
        d.mkdir()
    await mount_overlay(layers, ["l/TOP", "l/BASE"], upper, work, merged)
    try:
        assert mounts_under(merged) == [merged]
        r = await rt.run(["sh", "-c", "cat /greeting; echo new > /written; rm /greeting"],
                         rootfs=merged)
        assert (r.code, r.stdout) == (0, b"from the top layer\n")
    finally:
        assert unmount(merged)
    assert mounts_under(rt.work) == []
    assert (upper / "written").read_text() == "new\n"
    assert (layers / "top" / "greeting").exists()  # the lower is untouched; upper has a whiteout
    assert not unmount(merged)


async def test_teardown_removes_what_a_test_leaves_behind(rt: RuncEnv) -> None:
    # A running container, a created one, an open pipe and a mount, all abandoned: the ``rt``
    # teardown must delete, reap, unmount and remove the cgroups (it asserts that it did).
    await _started_sleeper(rt)
    cid, bundle = rt.bundle(["true"])
    pipes = open_pipes()
    created = await rt.runc.create(cid, bundle, stdio=pipes)
    rt.pids.append(created.pid)
    await pipes.aclose()
    target = rt.work / "tmpfs"
    target.mkdir()
    await trio.run_process(["mount", "-t", "tmpfs", "tmpfs", str(target)])
    assert len(await rt.runc.list()) == 2


def test_runc_root_is_private(tmp_path: Path) -> None:
    assert Runc(tmp_path / "r")._argv("list")[:3] == ["runc", "--root", str(tmp_path / "r")]


async def test_overlay_of_many_layers_mounts_through_short_relative_names(
        rt: RuncEnv) -> None:
    """Absolute paths of 120 layers exceed mount(2)'s page: mount(8) run in the layer root
    takes their short relative links instead, and the union is whole."""
    layers = rt.work / ("layers-with-a-long-name-" + "x" * 40)
    (layers / "l").mkdir(parents=True)
    names = []
    for i in range(120):
        d = layers / f"layer-{i:03d}"
        d.mkdir()
        (d / f"f{i:03d}").write_text(str(i))
        link = f"L{i:03d}" + "A" * 22
        (layers / "l" / link).symlink_to(f"../{d.name}")
        names.append(f"l/{link}")
    upper, work, merged = rt.work / "upper", rt.work / "work", rt.work / "merged"
    for d in (upper, work, merged):
        d.mkdir()
    await mount_overlay(layers, names, upper, work, merged)
    try:
        assert mounts_under(merged) == [merged]
        assert sorted(p.name for p in merged.iterdir()) == [f"f{i:03d}" for i in range(120)]
    finally:
        assert unmount(merged)
