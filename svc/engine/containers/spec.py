"""A container's OCI document: its Config and HostConfig in the runtime layer's terms.

Docker conventions are translated here (``MemorySwap=-1``, ``PidsLimit=0``, ``CpuShares=0``
meaning "unset", device paths to major/minor numbers) before the runtime's ``with_*`` options
build the document. Everything the host must tell (the daemon's capabilities, its devices, a
device's numbers) is looked up here too.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from svc.engine.containers import security_opts
from svc.engine.containers.config import DEFAULT_PATH
from svc.engine.containers.container import Container
from svc.engine.containers.userdb import ExecUser
from svc.errors import InvalidParameter
from svc.models.containers import HostConfigBody as HostConfig
from svc.models.containers import ThrottleDevice
from svc.runtime import seccomp
from svc.runtime.mounts import host_devices
from svc.runtime.protocol import (
    BlkioRate,
    BlkioWeightDevice,
    Device,
    DeviceRule,
    Mount,
    Resources,
    Rlimit,
    bind_mount,
    tmpfs_mount,
)
from svc.runtime.spec import (
    DEFAULT_SHM_SIZE,
    Spec,
    SpecOpt,
    build_spec,
    default_spec,
    with_capabilities,
    with_cgroups_path,
    with_devices,
    with_hostname,
    with_mounts,
    with_namespaces,
    with_no_new_privileges,
    with_oom_score_adj,
    with_privileged,
    with_process,
    with_resources,
    with_rlimits,
    with_root,
    with_seccomp,
    with_shm_size,
)
from svc.storage.atomic import atomic_write


@dataclass(frozen=True)
class HostFacts:
    """What the host offers, read once by the engine."""

    capabilities: tuple[str, ...]
    own_oom_score_adj: int


def _device_numbers(path: str) -> tuple[str, int, int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InvalidParameter(f'error gathering device information while adding custom '
                               f'device "{path}": {exc.strerror}') from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise InvalidParameter(f'error gathering device information while adding custom device '
                               f'"{path}": not a device node')
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


def _rates(items: list[ThrottleDevice] | None) -> tuple[BlkioRate, ...]:
    out = []
    for item in items or []:
        _, major, minor, _ = _device_numbers(item.Path)
        out.append(BlkioRate(major, minor, item.Rate))
    return tuple(out)


def resources(hc: HostConfig) -> Resources:
    """HostConfig's limits in the runtime's terms (0 means "not set", as in dockerd)."""
    mem = hc.Memory
    swap = hc.MemorySwap
    if mem and not swap:
        swap = mem * 2  # dockerd: swap defaults to as much again as the memory limit
    swappiness = hc.MemorySwappiness
    weights = tuple(BlkioWeightDevice(*_device_numbers(w.Path)[1:3], w.Weight)
                    for w in hc.BlkioWeightDevice or [])
    pids = hc.PidsLimit
    return Resources(
        memory=mem or None, memory_swap=swap or None,
        memory_reservation=hc.MemoryReservation or None,
        kernel_memory=hc.KernelMemory or None,
        swappiness=swappiness if swappiness not in (None, -1) else None,
        oom_kill_disable=bool(hc.OomKillDisable) if mem else None,
        cpu_shares=hc.CpuShares or None, cpu_period=hc.CpuPeriod or None,
        cpu_quota=hc.CpuQuota or None, cpuset_cpus=hc.CpusetCpus or None,
        cpuset_mems=hc.CpusetMems or None, blkio_weight=hc.BlkioWeight or None,
        blkio_weight_devices=weights,
        blkio_read_bps=_rates(hc.BlkioDeviceReadBps),
        blkio_write_bps=_rates(hc.BlkioDeviceWriteBps),
        blkio_read_iops=_rates(hc.BlkioDeviceReadIOps),
        blkio_write_iops=_rates(hc.BlkioDeviceWriteIOps),
        pids_limit=pids if pids else None)


def _devices(hc: HostConfig) -> tuple[list[Device], list[DeviceRule]]:
    devices, rules = [], []
    for d in hc.Devices or []:
        kind, major, minor, mode = _device_numbers(d.PathOnHost)
        inside = d.PathInContainer or d.PathOnHost
        devices.append(Device(inside, kind, major, minor, mode))
        rules.append(DeviceRule(True, kind, major, minor, d.CgroupPermissions or "rwm"))
    return devices, rules


def environment(c: Container, links: list[str] | None = None) -> list[str]:
    """The process environment: PATH (if neither image nor user set it), HOSTNAME, TERM for a
    TTY, the links' variables, then the Config's Env (moby ``CreateDaemonEnvironment``)."""
    env = list(c.config.Env or [])
    keys = {e.split("=", 1)[0] for e in env}
    head = []
    if "PATH" not in keys:
        head.append(f"PATH={DEFAULT_PATH}")
    head.append(f"HOSTNAME={c.config.Hostname or c.short_id}")
    if c.tty:
        head.append("TERM=xterm")
    return replace_or_append(head + list(links or []), env)


def replace_or_append(defaults: list[str], overrides: list[str]) -> list[str]:
    """moby's ``ReplaceOrAppendEnvValues``: ``KEY=value`` replaces the default of that key or
    is appended; a bare ``KEY`` (compose's variable with no value) unsets that default and is
    never passed on (a process environment entry needs its ``=``)."""
    out: list[str | None] = list(defaults)
    where = {e.split("=", 1)[0]: i for i, e in enumerate(defaults)}
    for value in overrides:
        key, eq, _ = value.partition("=")
        if not eq:
            if key in where:
                out[where[key]] = None
            continue
        if key in where:
            out[where[key]] = value
        else:
            where[key] = len(out)
            out.append(value)
    return [e for e in out if e is not None]


def namespace_modes(hc: HostConfig, joined_net: str | None) -> dict[str, str]:
    mode = hc.NetworkMode or "default"
    net = "host" if mode == "host" else (joined_net or "new")
    return {"network": net, "pid": "host" if hc.PidMode == "host" else "new",
            "ipc": "host" if hc.IpcMode == "host" else "new",
            "uts": "host" if hc.UTSMode == "host" or mode == "host" else "new"}


def _binds(c: Container, readonly_root: bool) -> list[Mount]:
    mounts = [bind_mount(str(path), dest, readonly=readonly_root) for path, dest in (
        (c.resolv_conf_path, "/etc/resolv.conf"), (c.hostname_path, "/etc/hostname"),
        (c.hosts_path, "/etc/hosts"))]
    for m in c.mounts:
        if m.Type == "tmpfs":
            opts = [o for o in str(m.TmpfsOptions or "").split(",") if o]
            mounts.append(tmpfs_mount(m.Destination, [*opts, "rw" if m.RW else "ro"]))
        else:
            mounts.append(bind_mount(m.Source, m.Destination, readonly=not m.RW,
                                     propagation=m.Propagation or "rprivate"))
    for dest, data in (c.host_config.Tmpfs or {}).items():  # HostConfig.Tmpfs
        mounts.append(tmpfs_mount(dest, [o for o in str(data or "").split(",") if o]))
    return mounts


def oci_spec(c: Container, user: ExecUser, facts: HostFacts, cgroup_path: str,
             joined_net: str | None, link_env: list[str] | None = None) -> Spec:
    hc = c.host_config
    cfg = c.config
    readonly = hc.ReadonlyRootfs
    opts: list[SpecOpt] = [
        with_root(str(c.rootfs), readonly),
        with_process([c.path, *c.args], environment(c, link_env), cfg.WorkingDir or "/",
                     user.uid, user.gid, user.additional_gids, terminal=c.tty),
        with_namespaces(**namespace_modes(hc, joined_net)),
        with_cgroups_path(cgroup_path),
        with_resources(resources(hc)),
        with_mounts(_binds(c, readonly)),
        with_shm_size(hc.ShmSize or DEFAULT_SHM_SIZE),
    ]
    if (hc.NetworkMode or "default") != "host" and hc.UTSMode != "host":
        opts.append(with_hostname(cfg.Hostname or c.short_id))
    if hc.Privileged:
        opts.append(with_privileged(host_devices(), facts.capabilities))
    else:
        opts.append(with_capabilities(hc.CapAdd or [], hc.CapDrop or [],
                                      available=facts.capabilities))
    devices, rules = _devices(hc)
    if devices:
        opts.append(with_devices(devices, rules))
    if hc.Ulimits:
        opts.append(with_rlimits([Rlimit(u.Name, u.Soft, u.Hard) for u in hc.Ulimits]))
    score = hc.OomScoreAdj
    if score:
        opts.append(with_oom_score_adj(score))
    opts += _security(hc)
    return build_spec(default_spec(), *opts)


def _security(hc: HostConfig) -> list[SpecOpt]:
    """SecurityOpt (checked at create): a seccomp profile unless unconfined or privileged
    (as dockerd), no-new-privileges. Last: the profile depends on the final capabilities."""
    sec = security_opts.parse(hc.SecurityOpt)
    out: list[SpecOpt] = []
    if sec.no_new_privileges:
        out.append(with_no_new_privileges())
    if not hc.Privileged and sec.seccomp != "unconfined" and seccomp.supported():
        default = sec.seccomp == "default"
        profile = seccomp.default_profile() if default else seccomp.parse_profile(sec.seccomp)
        out.append(with_seccomp(profile, kernel_abis_only=default))
    return out


def write_bundle(bundle: Path, spec: Spec) -> None:
    """``<bundle>/config.json`` (blocking)."""
    bundle.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write(bundle / "config.json", json.dumps(spec).encode(), durable=False)
