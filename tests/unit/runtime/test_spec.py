"""The OCI spec builder (``svc.runtime.spec``) option by option, plus the runtime layer's other
pure helpers (runc error parsing, overlay options, mountinfo, cgroup file parsing). No root."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from svc.errors import InvalidParameter
from svc.runtime.cgroups import parse_blkio, parse_flat_keyed
from svc.runtime.mounts import mounts_under, overlay_options
from svc.runtime.process import signal_number
from svc.runtime.protocol import (
    BlkioRate,
    BlkioWeightDevice,
    ContainerNotFound,
    ContainerStateConflict,
    Device,
    DeviceRule,
    Mount,
    Resources,
    Rlimit,
    RuntimeFailure,
    bind_mount,
    tmpfs_mount,
)
from svc.runtime.runc import failure
from svc.runtime.spec import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    DEFAULT_MASKED_PATHS,
    DEFAULT_READONLY_PATHS,
    Spec,
    SpecOpt,
    build_spec,
    capabilities_from_mask,
    cgroups_path,
    default_spec,
    normalize_capability,
    with_capabilities,
    with_cgroups_path,
    with_devices,
    with_hostname,
    with_masked_paths,
    with_mounts,
    with_namespaces,
    with_oom_score_adj,
    with_privileged,
    with_process,
    with_readonly_paths,
    with_resources,
    with_rlimits,
    with_root,
    with_shm_size,
)

# This machine's bounding set: everything up to CAP_CHECKPOINT_RESTORE except CAP_SYS_RESOURCE.
HOST_MASK = 0x1FFFEFFFFFF


def spec_with(*opts: SpecOpt) -> Spec:
    return build_spec(default_spec(), *opts)


def mount_at(spec: Spec, destination: str) -> dict[str, object]:
    [m] = [m for m in spec["mounts"] if m["destination"] == destination]
    return m  # type: ignore[no-any-return]


# -- defaults ------------------------------------------------------------------------------------


def test_default_spec_is_mobys() -> None:
    s = default_spec()
    assert s["ociVersion"] == "1.0.2-dev"
    assert [n["type"] for n in s["linux"]["namespaces"]] == ["mount", "network", "uts", "pid",
                                                             "ipc"]
    caps = s["process"]["capabilities"]
    assert set(caps) == {"bounding", "effective", "permitted"}  # no inheritable (CVE-2022-24769)
    assert caps["bounding"] == list(DEFAULT_CAPABILITIES) and len(DEFAULT_CAPABILITIES) == 14
    assert [m["destination"] for m in s["mounts"]] == [
        "/proc", "/dev", "/dev/pts", "/sys", "/sys/fs/cgroup", "/dev/mqueue", "/dev/shm"]
    assert "ro" in mount_at(s, "/sys")["options"]  # type: ignore[operator]
    assert "ro" in mount_at(s, "/sys/fs/cgroup")["options"]  # type: ignore[operator]
    assert "size=65536k" in mount_at(s, "/dev/shm")["options"]  # type: ignore[operator]
    assert s["linux"]["maskedPaths"] == list(DEFAULT_MASKED_PATHS)
    assert "/proc/kcore" in DEFAULT_MASKED_PATHS and "/proc/sys" in DEFAULT_READONLY_PATHS
    assert s["linux"]["readonlyPaths"] == list(DEFAULT_READONLY_PATHS)
    rules = s["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}
    assert {"allow": True, "access": "rwm", "type": "c", "major": 1, "minor": 3} in rules
    assert s["process"]["rlimits"] == [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]
    assert s["process"]["noNewPrivileges"] is False
    assert "seccomp" not in s["linux"]
    json.dumps(s)


def test_build_spec_copies_and_applies_in_order() -> None:
    base = default_spec()
    before = json.dumps(base, sort_keys=True)
    out = build_spec(base, with_hostname("a"), with_hostname("b"))
    assert out["hostname"] == "b"
    assert json.dumps(base, sort_keys=True) == before
    out["mounts"].clear()
    assert default_spec()["mounts"]  # each call is a fresh document


# -- process, hostname, root ---------------------------------------------------------------------


def test_with_process() -> None:
    s = spec_with(with_process(["sh", "-c", "x"], ["A=1"], "/work", 1000, 1001, [10, 20], True))
    p = s["process"]
    assert (p["args"], p["env"], p["cwd"], p["terminal"]) == (["sh", "-c", "x"], ["A=1"], "/work",
                                                               True)
    assert p["user"] == {"uid": 1000, "gid": 1001, "additionalGids": [10, 20]}
    assert spec_with(with_process(["true"]))["process"]["user"] == {"uid": 0, "gid": 0}


@pytest.mark.parametrize("kwargs", [{"args": []}, {"args": ["x"], "cwd": "rel"}])
def test_with_process_refuses(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidParameter):
        with_process(**kwargs)  # type: ignore[arg-type]


def test_with_hostname_and_root() -> None:
    s = spec_with(with_hostname("box"), with_root("/x/rootfs", readonly=True))
    assert s["hostname"] == "box"
    assert s["root"] == {"path": "/x/rootfs", "readonly": True}


# -- mounts --------------------------------------------------------------------------------------


def test_bind_and_tmpfs_mounts() -> None:
    assert bind_mount("/h", "/c").options == ("rbind", "rprivate", "rw")
    assert bind_mount("/h", "/c", readonly=True, propagation="rslave",
                      recursive=False).options == ("bind", "rslave", "ro")
    t = tmpfs_mount("/run", ["size=1m"])
    assert (t.type, t.source, t.options) == ("tmpfs", "tmpfs",
                                             ("noexec", "nosuid", "nodev", "size=1m"))


def test_with_mounts_appends_sorted_and_replaces_defaults() -> None:
    s = spec_with(with_mounts([bind_mount("/h/b", "/a/b", readonly=True), bind_mount("/h", "/a"),
                               Mount("/dev/shm", "/h/shm", "bind", ("rbind",))]))
    dests = [m["destination"] for m in s["mounts"]]
    assert dests[-3:] == ["/a", "/a/b", "/dev/shm"]  # by depth, stable
    assert dests.count("/dev/shm") == 1 and mount_at(s, "/dev/shm")["source"] == "/h/shm"
    assert mount_at(s, "/a/b")["options"] == ["rbind", "rprivate", "ro"]


def test_a_dev_mount_drops_the_default_dev_submounts() -> None:
    s = spec_with(with_mounts([bind_mount("/dev", "/dev")]))
    assert [m["destination"] for m in s["mounts"]] == ["/proc", "/sys", "/sys/fs/cgroup", "/dev"]


def test_with_shm_size() -> None:
    opts = mount_at(spec_with(with_shm_size(128 << 20)), "/dev/shm")["options"]
    assert "size=131072k" in opts and "size=65536k" not in opts  # type: ignore[operator]
    with pytest.raises(InvalidParameter):
        with_shm_size(0)


# -- capabilities --------------------------------------------------------------------------------


def caps_of(s: Spec) -> list[str]:
    c = s["process"]["capabilities"]
    assert c["bounding"] == c["effective"] == c["permitted"]
    return c["bounding"]  # type: ignore[no-any-return]


def test_capability_mask_of_this_host() -> None:
    have = capabilities_from_mask(HOST_MASK)
    assert len(have) == 40 and "CAP_SYS_RESOURCE" not in have and "CAP_SYS_ADMIN" in have
    assert capabilities_from_mask(0b101) == ["CAP_CHOWN", "CAP_DAC_READ_SEARCH"]


def test_normalize_capability() -> None:
    assert normalize_capability("net_admin") == "CAP_NET_ADMIN"
    assert normalize_capability("CAP_NET_ADMIN") == "CAP_NET_ADMIN"
    assert normalize_capability("all") == "ALL"
    with pytest.raises(InvalidParameter):
        normalize_capability("NOT_A_CAP")


def test_add_and_drop() -> None:
    caps = caps_of(spec_with(with_capabilities(add=["net_admin"], drop=["chown", "CAP_KILL"])))
    assert "CAP_NET_ADMIN" in caps and "CAP_CHOWN" not in caps and "CAP_KILL" not in caps
    assert caps == sorted(caps, key=ALL_CAPABILITIES.index)


def test_add_all_and_drop_all() -> None:
    have = capabilities_from_mask(HOST_MASK)
    caps = caps_of(spec_with(with_capabilities(add=["ALL"], drop=["mknod"], available=have)))
    assert caps == [c for c in have if c != "CAP_MKNOD"]
    caps = caps_of(spec_with(with_capabilities(add=["net_raw"], drop=["ALL"], available=have)))
    assert caps == ["CAP_NET_RAW"]


def test_privileged_is_exactly_what_the_daemon_holds() -> None:
    have = capabilities_from_mask(HOST_MASK)
    assert caps_of(spec_with(with_capabilities(privileged=True, available=have))) == have


def test_capabilities_never_exceed_the_daemon() -> None:
    with pytest.raises(InvalidParameter, match="CAP_SYS_RESOURCE"):
        with_capabilities(add=["SYS_RESOURCE"], available=capabilities_from_mask(HOST_MASK))
    few = ["CAP_CHOWN", "CAP_KILL"]
    assert caps_of(spec_with(with_capabilities(available=few))) == few


# -- resources, cgroups path ---------------------------------------------------------------------


def test_with_resources_maps_every_field() -> None:
    r = Resources(memory=1, memory_swap=2, memory_reservation=3, kernel_memory=4, swappiness=5,
                  oom_kill_disable=True, cpu_shares=6, cpu_period=7, cpu_quota=8, cpuset_cpus="0-1",
                  cpuset_mems="0", blkio_weight=9,
                  blkio_weight_devices=(BlkioWeightDevice(8, 0, 10),),
                  blkio_read_bps=(BlkioRate(8, 0, 11),), blkio_write_bps=(BlkioRate(8, 0, 12),),
                  blkio_read_iops=(BlkioRate(8, 0, 13),), blkio_write_iops=(BlkioRate(8, 0, 14),),
                  pids_limit=15)
    res = spec_with(with_resources(r))["linux"]["resources"]
    assert res["memory"] == {"limit": 1, "swap": 2, "reservation": 3, "kernel": 4,
                             "swappiness": 5, "disableOOMKiller": True}
    assert res["cpu"] == {"shares": 6, "period": 7, "quota": 8, "cpus": "0-1", "mems": "0"}
    assert res["blockIO"] == {
        "weight": 9, "weightDevice": [{"major": 8, "minor": 0, "weight": 10}],
        "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 11}],
        "throttleWriteBpsDevice": [{"major": 8, "minor": 0, "rate": 12}],
        "throttleReadIOPSDevice": [{"major": 8, "minor": 0, "rate": 13}],
        "throttleWriteIOPSDevice": [{"major": 8, "minor": 0, "rate": 14}]}
    assert res["pids"] == {"limit": 15}
    assert res["devices"] == default_spec()["linux"]["resources"]["devices"]


def test_with_resources_leaves_unset_knobs_out() -> None:
    res = spec_with(with_resources(Resources(memory=64 << 20)))["linux"]["resources"]
    assert set(res) == {"devices", "memory"} and res["memory"] == {"limit": 64 << 20}
    assert set(spec_with(with_resources(Resources()))["linux"]["resources"]) == {"devices"}


def test_cgroups_path_is_absolute() -> None:
    assert cgroups_path("svc", "abc") == "/svc/abc"
    assert cgroups_path("/a/b/", "c") == "/a/b/c"
    assert spec_with(with_cgroups_path("/svc/x"))["linux"]["cgroupsPath"] == "/svc/x"


# -- namespaces, devices, rlimits, oom, paths, privileged -----------------------------------------


def test_with_namespaces() -> None:
    s = spec_with(with_namespaces(network="/run/netns/x", pid="host", ipc="/proc/9/ns/ipc"))
    assert s["linux"]["namespaces"] == [
        {"type": "mount"}, {"type": "network", "path": "/run/netns/x"}, {"type": "uts"},
        {"type": "ipc", "path": "/proc/9/ns/ipc"}]
    assert len(spec_with(with_namespaces())["linux"]["namespaces"]) == 5
    assert [n["type"] for n in spec_with(with_namespaces(network="host", uts="host"))[
        "linux"]["namespaces"]] == ["mount", "pid", "ipc"]
    with pytest.raises(InvalidParameter):
        with_namespaces(network="container")


def test_with_devices() -> None:
    s = spec_with(with_devices([Device("/dev/fuse", "c", 10, 229)],
                               [DeviceRule(True, "c", 10, 229, "rw"), DeviceRule(True, "b")]))
    assert s["linux"]["devices"] == [{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229,
                                      "fileMode": 0o666, "uid": 0, "gid": 0}]
    rules = s["linux"]["resources"]["devices"]
    assert rules[-2:] == [{"allow": True, "access": "rw", "type": "c", "major": 10, "minor": 229},
                          {"allow": True, "access": "rwm", "type": "b"}]
    assert rules[0] == {"allow": False, "access": "rwm"}


def test_with_rlimits_replaces_by_type() -> None:
    s = spec_with(with_rlimits([Rlimit("nofile", 10, 20), Rlimit("RLIMIT_NPROC", 5, 5)]))
    assert s["process"]["rlimits"] == [{"type": "RLIMIT_NOFILE", "hard": 20, "soft": 10},
                                       {"type": "RLIMIT_NPROC", "hard": 5, "soft": 5}]
    with pytest.raises(InvalidParameter):
        with_rlimits([Rlimit("nofile", 30, 20)])


def test_with_oom_score_adj() -> None:
    assert spec_with(with_oom_score_adj(-500))["process"]["oomScoreAdj"] == -500
    with pytest.raises(InvalidParameter):
        with_oom_score_adj(1001)


def test_with_readonly_and_masked_paths() -> None:
    s = spec_with(with_readonly_paths(["/proc/x"]), with_masked_paths([]))
    assert (s["linux"]["readonlyPaths"], s["linux"]["maskedPaths"]) == (["/proc/x"], [])


def test_with_privileged() -> None:
    have = capabilities_from_mask(HOST_MASK)
    base = build_spec(default_spec(), lambda s: s["linux"].update(seccomp={"defaultAction": "x"}))
    s = build_spec(base, with_privileged([Device("/dev/sda", "b", 8, 0)], have))
    assert caps_of(s) == have
    assert s["linux"]["devices"][0]["path"] == "/dev/sda"
    assert s["linux"]["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    assert s["linux"]["maskedPaths"] == [] and s["linux"]["readonlyPaths"] == []
    assert "seccomp" not in s["linux"]
    assert "ro" not in mount_at(s, "/sys")["options"]  # type: ignore[operator]
    assert "ro" not in mount_at(s, "/sys/fs/cgroup")["options"]  # type: ignore[operator]


# -- the runtime layer's other pure helpers ----------------------------------------------------


def test_runc_failure_keeps_runcs_message() -> None:
    log = ('{"level":"warning","msg":"Kernel memory settings are ignored","time":"t"}\n'
           '{"level":"error","msg":"runc create failed: unable to start container process: exec:'
           ' \\"/no/such/binary\\": stat /no/such/binary: no such file or directory","time":"t"}')
    err = failure("create", 1, log)
    assert type(err) is RuntimeFailure and err.exit_code == 1 and err.command == "create"
    assert str(err) == ('unable to start container process: exec: "/no/such/binary": stat '
                        '/no/such/binary: no such file or directory')
    assert isinstance(failure("state", 1, '{"level":"error","msg":"container does not exist"}'),
                      ContainerNotFound)
    assert isinstance(failure("kill", 1, '{"level":"error","msg":"container not running"}'),
                      ContainerStateConflict)
    rootfs = '{"level":"error","msg":"runc create failed: rootfs (\\"/x\\") does not exist"}'
    assert type(failure("create", 1, rootfs)) is RuntimeFailure
    nsexec = ('{"level":"fatal","msg":"nsexec[1]: failed to update /proc/self/oom_score_adj: '
              'Permission denied"}\n{"level":"error","msg":"runc create failed: unable to start '
              'container process: can\'t get final child\'s PID from pipe: EOF"}')
    assert str(failure("create", 1, nsexec)) == (
        "unable to start container process: can't get final child's PID from pipe: EOF "
        "(nsexec[1]: failed to update /proc/self/oom_score_adj: Permission denied)")
    assert str(failure("start", 2, "panic: boom\n")) == "panic: boom"
    assert str(failure("start", 3, "")) == "runc start exited with status 3"


def test_overlay_options() -> None:
    assert overlay_options(["l/A", "l/B"], "x/diff", "x/work") == (
        "lowerdir=l/A:l/B,upperdir=x/diff,workdir=x/work,index=off,redirect_dir=off,metacopy=off")
    assert overlay_options(["l/A", "l/B"], None, None, features=()) == "lowerdir=l/A:l/B"
    with pytest.raises(ValueError):
        overlay_options([], None, None)


def test_mounts_under_reads_mountinfo(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
        "30 22 0:40 / /srv/c/merged rw - overlay overlay rw\n"
        "31 30 0:41 / /srv/c/merged/with\\040space rw - tmpfs tmpfs rw\n"
        "32 22 0:42 / /srv/cc rw - tmpfs tmpfs rw\n")
    assert mounts_under(Path("/srv/c"), info) == [Path("/srv/c/merged/with space"),
                                                  Path("/srv/c/merged")]


def test_cgroup_file_parsers() -> None:
    assert parse_flat_keyed("user 10\nsystem 5\nbad line here\n") == {"user": 10, "system": 5}
    entries = parse_blkio("254:0 Read 4096\n254:0 Write 0\nTotal 4096\n")
    assert [(e.major, e.minor, e.op, e.value) for e in entries] == [(254, 0, "Read", 4096),
                                                                     (254, 0, "Write", 0)]


def test_signal_number() -> None:
    assert signal_number("KILL") == signal_number("SIGKILL") == signal_number("9") == 9
    assert signal_number(signal.SIGTERM) == 15
    with pytest.raises(ValueError):
        signal_number("NOPE")
