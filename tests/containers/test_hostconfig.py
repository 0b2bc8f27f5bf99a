"""Each HostConfig and Config field checked from inside the container."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from svc.runtime.cgroups import CgroupV1
from svc.runtime.process import host_capabilities
from tests.containers.conftest import create, inspect, output, run
from tests.support.daemon import Daemon
from tests.support.procfs import zombie_children


async def sh(api: httpx.AsyncClient, script: str, **fields: object) -> tuple[int, str, str]:
    cid, code = await run(api, ["sh", "-c", script], **fields)
    return code, await output(api, cid), await output(api, cid, stderr=True)


async def test_hostname_domainname_env_workdir(api: httpx.AsyncClient) -> None:
    code, out, _ = await sh(api, "hostname; cat /etc/hostname; echo $FOO $HOSTNAME; pwd; "
                                 "echo $PATH", Hostname="box", Domainname="example.org",
                            Env=["FOO=bar"], WorkingDir="/work/dir")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["box", "box"]
    assert lines[2] == "bar box"
    assert lines[3] == "/work/dir"
    assert lines[4] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


async def test_default_hostname_is_the_short_id(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["hostname"])
    assert (await output(api, cid)).strip() == cid[:12]
    info = await inspect(api, cid)
    assert Path(info["HostnamePath"]).read_text() == cid[:12] + "\n"
    assert info["Config"]["Hostname"] == cid[:12]


async def test_user_by_name_and_number_and_groups(api: httpx.AsyncClient) -> None:
    code, out, _ = await sh(api, "id -u; id -g; id -G", User="nobody")
    assert code == 0
    uid, gid, _groups = out.splitlines()
    assert (uid, gid) == ("65534", "65534")
    code, out, _ = await sh(api, "id -u; id -g; id -G", User="1234:5678",
                            HostConfig={"GroupAdd": ["daemon", "99"]})
    assert out.splitlines()[:2] == ["1234", "5678"]
    assert set(out.splitlines()[2].split()) >= {"5678", "1", "99"}
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["id"],
                                                   "User": "ghost"})
    cid = r.json()["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 400 and "unable to find user ghost" in r.text


async def test_etc_hosts_and_resolv_conf(api: httpx.AsyncClient) -> None:
    code, out, _ = await sh(api, "cat /etc/hosts; echo ---; cat /etc/resolv.conf",
                            HostConfig={"ExtraHosts": ["db:10.1.2.3"], "Dns": ["10.0.0.53"],
                                        "DnsSearch": ["corp.example"],
                                        "DnsOptions": ["ndots:2"]})
    assert code == 0
    hosts, resolv = out.split("---\n")
    assert "127.0.0.1\tlocalhost" in hosts and "10.1.2.3\tdb" in hosts
    assert "nameserver 10.0.0.53" in resolv and "search corp.example" in resolv
    assert "options ndots:2" in resolv


async def test_readonly_rootfs_and_binds(api: httpx.AsyncClient, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("from host\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    code, out, err = await sh(
        api, "cat /data/in.txt; echo written > /data/out.txt; touch /x 2>&1 || echo rofs; "
             "touch /ro/y 2>&1 || echo ro-bind",
        HostConfig={"ReadonlyRootfs": True, "Binds": [f"{tmp_path}:/data",
                                                      f"{ro}:/ro:ro"]})
    assert code == 0, err
    assert "from host" in out and "rofs" in out and "ro-bind" in out
    assert (tmp_path / "out.txt").read_text() == "written\n"
    assert not (ro / "y").exists()


async def test_missing_bind_source_is_created(api: httpx.AsyncClient, tmp_path: Path) -> None:
    src = tmp_path / "made" / "here"
    code, _, _ = await sh(api, "touch /m/f", HostConfig={"Binds": [f"{src}:/m"]})
    assert code == 0 and (src / "f").exists()


async def test_capabilities_dropped_and_added(api: httpx.AsyncClient) -> None:
    code, out, _ = await sh(api, "chown nobody /tmp && echo chowned",
                            HostConfig={"CapDrop": ["CHOWN"]})
    assert code != 0 and "chowned" not in out
    code, out, _ = await sh(api, "grep CapEff /proc/self/status",
                            HostConfig={"CapAdd": ["NET_ADMIN"], "CapDrop": ["ALL"]})
    mask = int(out.split()[1], 16)
    assert mask == 1 << 12  # CAP_NET_ADMIN only


async def test_privileged_gets_every_capability_the_daemon_has(api: httpx.AsyncClient) -> None:
    code, out, err = await sh(api, "grep CapEff /proc/self/status; ls /dev | wc -l",
                              HostConfig={"Privileged": True})
    assert code == 0, err
    from svc.runtime.spec import ALL_CAPABILITIES

    mask = int(out.split()[1], 16)
    got = {name for bit, name in enumerate(ALL_CAPABILITIES) if mask >> bit & 1}
    assert got == set(host_capabilities())
    assert int(out.split()[2]) > 10  # host devices


async def test_ulimits_shm_and_oom_score(api: httpx.AsyncClient) -> None:
    own = int(Path("/proc/self/oom_score_adj").read_text())
    code, out, err = await sh(api, "ulimit -n; ulimit -s; df -k /dev/shm | tail -1; "
                                   "cat /proc/self/oom_score_adj",
                              HostConfig={"Ulimits": [{"Name": "nofile", "Soft": 512,
                                                       "Hard": 800},
                                                      {"Name": "stack", "Soft": 4 << 20,
                                                       "Hard": 4 << 20}],
                                          "ShmSize": 32 << 20, "OomScoreAdj": max(own, 500)})
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "512" and lines[1] == "4096"
    assert lines[2].split()[1] == str(32 << 10)
    assert lines[3] == str(max(own, 500))


async def test_memory_and_cpu_limits_in_the_cgroup(api: httpx.AsyncClient,
                                                   cdaemon: Daemon) -> None:
    cid = (await create(api, ["sleep", "30"], HostConfig={
        "Memory": 64 << 20, "MemoryReservation": 32 << 20, "CpuShares": 512,
        "CpuPeriod": 100000, "CpuQuota": 50000, "CpusetCpus": "0", "PidsLimit": 64}))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    cg = CgroupV1()
    path = f"{cdaemon.cgroup_parent}/{cid}"
    assert int(cg.read("memory", path, "memory.limit_in_bytes")) == 64 << 20
    assert int(cg.read("memory", path, "memory.soft_limit_in_bytes")) == 32 << 20
    assert int(cg.read("cpu", path, "cpu.shares")) == 512
    assert int(cg.read("cpu", path, "cpu.cfs_quota_us")) == 50000
    assert cg.read("cpuset", path, "cpuset.cpus").strip() == "0"
    if cg.path("pids", path).exists():
        assert cg.read("pids", path, "pids.max").strip() == "64"
    # the container sees its own limit
    r = await api.post(f"/containers/{cid}/kill")
    assert r.status_code == 204
    code, out, _ = await sh(api, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
                            HostConfig={"Memory": 64 << 20})
    assert out.strip() == str(64 << 20)


async def test_oom_kill_is_reported(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["sh", "-c", "x=$(head -c 64000000 /dev/zero | tr '\\0' a)"],
                          HostConfig={"Memory": 8 << 20, "MemorySwap": 8 << 20})
    st = (await inspect(api, cid))["State"]
    assert st["OOMKilled"] is True and code != 0


async def test_blkio_weight_warns_when_the_kernel_lacks_it(api: httpx.AsyncClient) -> None:
    from svc.runtime.cgroups import bfq_in_use

    # CFQ's knob, or BFQ's while a device really uses BFQ (this machine: neither)
    has = Path("/sys/fs/cgroup/blkio/blkio.weight").exists() or bfq_in_use()
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": {"BlkioWeight": 300}})
    assert r.status_code == 201
    warnings = r.json()["Warnings"]
    if has:
        assert warnings == []
    else:
        assert warnings == ["Your kernel does not support Block I/O weight. Weight discarded."]
        assert (await inspect(api, r.json()["Id"]))["HostConfig"]["BlkioWeight"] == 0


async def test_devices(api: httpx.AsyncClient) -> None:
    code, out, err = await sh(api, "ls -l /dev/mynull; echo x > /dev/mynull && echo ok",
                              HostConfig={"Devices": [{"PathOnHost": "/dev/null",
                                                       "PathInContainer": "/dev/mynull",
                                                       "CgroupPermissions": "rwm"}]})
    assert code == 0, err
    assert "1, " in out and "ok" in out
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"],
        "HostConfig": {"Devices": [{"PathOnHost": "/dev/nope", "CgroupPermissions": "rwm"}]}})
    cid = r.json()["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 400 and "/dev/nope" in r.text


async def test_network_none_host_and_container(api: httpx.AsyncClient) -> None:
    code, out, _ = await sh(api, "ls /sys/class/net", HostConfig={"NetworkMode": "none"})
    assert out.split() == ["lo"]
    code, out, _ = await sh(api, "hostname; ls /sys/class/net | wc -l",
                            HostConfig={"NetworkMode": "host"})
    assert out.split()[0] == os.uname().nodename
    assert int(out.split()[1]) == len(os.listdir("/sys/class/net"))
    host_net = (await create(api, ["sleep", "30"], HostConfig={"NetworkMode": "none"}))["Id"]
    await api.post(f"/containers/{host_net}/start")
    pid = (await inspect(api, host_net))["State"]["Pid"]
    cid, _ = await run(api, ["sh", "-c", "readlink /proc/self/ns/net"],
                       HostConfig={"NetworkMode": f"container:{host_net}"})
    assert (await output(api, cid)).strip() == os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.parametrize("entry, cmd, expect", [
    (None, ["echo", "a"], "a"),
    (["echo", "x"], None, "x"),
    (["echo", "x"], ["y"], "x y"),
])
async def test_entrypoint_and_cmd(api: httpx.AsyncClient, entry: list[str] | None,
                                  cmd: list[str] | None, expect: str) -> None:
    fields: dict[str, object] = {}
    if entry is not None:
        fields["Entrypoint"] = entry
    cid, code = await run(api, cmd or [], **fields) if cmd else await run(api, [], **fields)
    assert code == 0
    assert (await output(api, cid)).strip() == expect


async def test_pid_host_orphans_are_reaped(api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    """With the host's pid namespace, a container's orphans are adopted by the daemon (a
    subreaper) and must not stay zombies."""
    cid, code = await run(api, ["sh", "-c", "sleep 0.2 & sleep 0.2 & exit 0"],
                          HostConfig={"PidMode": "host"})
    assert code == 0
    import trio

    daemon_pid = cdaemon.proc.pid if cdaemon.proc else 0

    def zombies() -> list[int]:
        return zombie_children(daemon_pid)

    with trio.fail_after(5):
        while zombies():
            await trio.sleep(0.1)
    await trio.sleep(0.5)
    assert zombies() == []
