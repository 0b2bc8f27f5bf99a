"""OCI runtime-spec documents: engine defaults plus composable, pure ``with_*`` options.

``build_spec(default_spec(), with_process(...), with_mounts(...), ...)`` deep-copies the base once
and applies each option to that private copy, in order (moby ``createSpec``, crun ``spec.c``). An
option only touches the document it is given; none reads the host. The host facts some options
need (the daemon's capabilities for ``--privileged``, its device nodes) are read by
``process.host_capabilities`` and ``mounts.host_devices`` and passed in as plain values.

The document is a plain ``dict`` in the spec's own JSON shape, written to ``config.json`` as is.
Inputs are plain dataclasses: this layer knows nothing of Docker's ``HostConfig``; the engine
translates Docker conventions (``MemorySwap=-1``, ``PidsLimit=0``, ...) before calling.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from typing import Any

from svc.errors import InvalidParameter
from svc.runtime import seccomp
from svc.runtime.protocol import Device, DeviceRule, Mount, Resources, Rlimit

Spec = dict[str, Any]
SpecOpt = Callable[[Spec], None]

OCI_VERSION = "1.0.2-dev"  # what runc 1.1 writes and reads

# Capability numbers (include/uapi/linux/capability.h), index = bit in /proc/<pid>/status masks.
ALL_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
    "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
    "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
    "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE")

# moby oci/caps/defaults.go
DEFAULT_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE")

# moby oci/defaults.go
DEFAULT_MASKED_PATHS: tuple[str, ...] = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware")
DEFAULT_READONLY_PATHS: tuple[str, ...] = (
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
NAMESPACES: tuple[str, ...] = ("mount", "network", "uts", "pid", "ipc")
DEFAULT_SHM_SIZE = 64 * 1024 * 1024

# moby's allowlist: zero, null, urandom, random, tty, console (runc appends its own after these).
_DEFAULT_DEVICE_RULES: tuple[tuple[str, int, int], ...] = (
    ("c", 1, 5), ("c", 1, 3), ("c", 1, 9), ("c", 1, 8), ("c", 5, 0), ("c", 5, 1))


def default_spec() -> Spec:
    """The document every container starts from: moby's Linux defaults.

    Namespaces mount/network/uts/pid/ipc, moby's 14 default capabilities (bounding, effective,
    permitted; no inheritable set, as moby since CVE-2022-24769), /proc, /dev, /dev/pts,
    /dev/shm (64 MiB), /dev/mqueue, a read-only /sys and /sys/fs/cgroup, moby's masked and
    read-only /proc paths, a deny-all devices cgroup with moby's allowlist (runc appends its own
    defaults: null, zero, full, random, urandom, tty, console, ptmx, pts), and
    RLIMIT_NOFILE 1024 (containerd's default: never above the daemon's own hard limit, which
    a daemon without CAP_SYS_RESOURCE cannot exceed; ``with_rlimits`` overrides it).
    """
    caps = list(DEFAULT_CAPABILITIES)
    return {
        "ociVersion": OCI_VERSION,
        "process": {
            "terminal": False, "user": {"uid": 0, "gid": 0}, "args": [], "env": [], "cwd": "/",
            "capabilities": {"bounding": caps, "effective": list(caps), "permitted": list(caps)},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": False,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "",
        "mounts": [m.to_oci() for m in (
            Mount("/proc", "proc", "proc", ("nosuid", "noexec", "nodev")),
            Mount("/dev", "tmpfs", "tmpfs", ("nosuid", "strictatime", "mode=755", "size=65536k")),
            Mount("/dev/pts", "devpts", "devpts",
                  ("nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5")),
            Mount("/sys", "sysfs", "sysfs", ("nosuid", "noexec", "nodev", "ro")),
            Mount("/sys/fs/cgroup", "cgroup", "cgroup", ("ro", "nosuid", "noexec", "nodev")),
            Mount("/dev/mqueue", "mqueue", "mqueue", ("nosuid", "noexec", "nodev")),
            Mount("/dev/shm", "shm", "tmpfs",
                  ("nosuid", "noexec", "nodev", "mode=1777", f"size={DEFAULT_SHM_SIZE // 1024}k")),
        )],
        "linux": {
            "namespaces": [{"type": t} for t in NAMESPACES],
            "maskedPaths": list(DEFAULT_MASKED_PATHS),
            "readonlyPaths": list(DEFAULT_READONLY_PATHS),
            "devices": [],
            "resources": {"devices": [DeviceRule(False).to_oci()] + [
                DeviceRule(True, t, ma, mi).to_oci() for t, ma, mi in _DEFAULT_DEVICE_RULES]},
        },
    }


def build_spec(base: Spec, *opts: SpecOpt) -> Spec:
    """A deep copy of ``base`` with each option applied in order; ``base`` is left untouched."""
    spec = copy.deepcopy(base)
    for opt in opts:
        opt(spec)
    return spec


def with_process(args: Sequence[str], env: Sequence[str] = (), cwd: str = "/", user_uid: int = 0,
                 user_gid: int = 0, additional_gids: Sequence[int] = (),
                 terminal: bool = False) -> SpecOpt:
    """The command, environment, working directory, user and whether it gets a pty."""
    if not args:
        raise InvalidParameter("no command specified")
    if not cwd.startswith("/"):
        raise InvalidParameter(f"the working directory '{cwd}' is invalid, it needs to be absolute")

    def opt(spec: Spec) -> None:
        proc = spec["process"]
        proc.update(args=list(args), env=list(env), cwd=cwd, terminal=terminal)
        user: dict[str, Any] = {"uid": user_uid, "gid": user_gid}
        if additional_gids:
            user["additionalGids"] = list(additional_gids)
        proc["user"] = user
    return opt


def with_hostname(hostname: str) -> SpecOpt:
    def opt(spec: Spec) -> None:
        spec["hostname"] = hostname
    return opt


def with_root(path: str, readonly: bool = False) -> SpecOpt:
    """The root filesystem (absolute, or relative to the bundle) and whether it is read-only."""
    def opt(spec: Spec) -> None:
        spec["root"] = {"path": path, "readonly": readonly}
    return opt


def _depth(destination: str) -> int:
    return len([p for p in destination.split("/") if p])


def with_mounts(mounts: Sequence[Mount]) -> SpecOpt:
    """Add mounts; one at a default's destination replaces that default (moby ``WithMounts``).

    A mount on ``/dev`` also drops the default mounts below it. The new mounts go after the
    defaults, parents before children, so ``/a`` is mounted before ``/a/b``.
    """
    dests = {m.destination.rstrip("/") or "/" for m in mounts}

    def opt(spec: Spec) -> None:
        kept = [m for m in spec.get("mounts", []) if m["destination"] not in dests and not (
            "/dev" in dests and m["destination"].startswith("/dev/"))]
        added = sorted(mounts, key=lambda m: _depth(m.destination))
        spec["mounts"] = kept + [m.to_oci() for m in added]
    return opt


def with_shm_size(size: int) -> SpecOpt:
    """Set the size of the default /dev/shm tmpfs (docker ``--shm-size``), in bytes."""
    if size <= 0:
        raise InvalidParameter("SHM size must be greater than 0")

    def opt(spec: Spec) -> None:
        for m in spec.get("mounts", []):
            if m["destination"] == "/dev/shm" and m["type"] == "tmpfs":
                m["options"] = [o for o in m["options"] if not o.startswith("size=")]
                m["options"].append(f"size={size // 1024}k")
    return opt


def normalize_capability(name: str) -> str:
    """``net_admin`` / ``CAP_NET_ADMIN`` -> ``CAP_NET_ADMIN``; ``all`` -> ``ALL``."""
    up = name.strip().upper()
    if up == "ALL":
        return up
    up = up if up.startswith("CAP_") else "CAP_" + up
    if up not in ALL_CAPABILITIES:
        raise InvalidParameter(f"Unknown capability: {name!r}")
    return up


def capabilities_from_mask(mask: int) -> list[str]:
    """The capability names whose bits are set in a /proc/<pid>/status ``Cap*`` mask."""
    return [name for bit, name in enumerate(ALL_CAPABILITIES) if mask >> bit & 1]


def _ordered(caps: Collection[str]) -> list[str]:
    return sorted(set(caps), key=ALL_CAPABILITIES.index)


def with_capabilities(add: Sequence[str] = (), drop: Sequence[str] = (), privileged: bool = False,
                      available: Collection[str] | None = None) -> SpecOpt:
    """The capability sets, as moby ``TweakCapabilities`` computes them.

    ``ALL`` in ``add``: every available capability except those in ``drop``; ``ALL`` in
    ``drop``: exactly ``add``; else the defaults minus ``drop`` plus ``add``. ``privileged``
    means every available capability. ``available`` is what the daemon itself holds
    (``process.host_capabilities()``; all known ones if omitted): the result never exceeds it, and
    an explicit ``add`` of a capability outside it is refused, since runc would fail on it.

    Raises:
        InvalidParameter: an unknown name, or an added capability the daemon lacks.
    """
    adds = [normalize_capability(c) for c in add]
    drops = [normalize_capability(c) for c in drop]
    have = set(ALL_CAPABILITIES if available is None else available)
    for c in adds:
        if c != "ALL" and c not in have:
            raise InvalidParameter(f"capability {c} is not available to the daemon")
    if privileged:
        caps: list[str] = list(have)
    elif "ALL" in adds:
        caps = [c for c in have if c not in drops]
    elif "ALL" in drops:
        caps = [c for c in adds if c != "ALL"]
    else:
        caps = [c for c in DEFAULT_CAPABILITIES if c not in drops] + adds
    final = _ordered([c for c in caps if c in have])

    def opt(spec: Spec) -> None:
        spec["process"]["capabilities"] = {
            "bounding": list(final), "effective": list(final), "permitted": list(final)}
    return opt


def with_resources(r: Resources) -> SpecOpt:
    """Write the limits set in ``r`` into ``linux.resources`` (device rules are kept)."""
    mem = {k: v for k, v in (
        ("limit", r.memory), ("swap", r.memory_swap), ("reservation", r.memory_reservation),
        ("kernel", r.kernel_memory), ("swappiness", r.swappiness),
        ("disableOOMKiller", r.oom_kill_disable)) if v is not None}
    cpu = {k: v for k, v in (
        ("shares", r.cpu_shares), ("period", r.cpu_period), ("quota", r.cpu_quota),
        ("cpus", r.cpuset_cpus), ("mems", r.cpuset_mems)) if v is not None}
    blkio: dict[str, Any] = {} if r.blkio_weight is None else {"weight": r.blkio_weight}
    if r.blkio_weight_devices:
        blkio["weightDevice"] = [{"major": d.major, "minor": d.minor, "weight": d.weight}
                                 for d in r.blkio_weight_devices]
    for key, rates in (("throttleReadBpsDevice", r.blkio_read_bps),
                       ("throttleWriteBpsDevice", r.blkio_write_bps),
                       ("throttleReadIOPSDevice", r.blkio_read_iops),
                       ("throttleWriteIOPSDevice", r.blkio_write_iops)):
        if rates:
            blkio[key] = [{"major": d.major, "minor": d.minor, "rate": d.rate} for d in rates]

    def opt(spec: Spec) -> None:
        res = spec.setdefault("linux", {}).setdefault("resources", {})
        for key, part in (("memory", mem), ("cpu", cpu), ("blockIO", blkio)):
            if part:
                res.setdefault(key, {}).update(copy.deepcopy(part))
        if r.pids_limit is not None:
            res["pids"] = {"limit": r.pids_limit}
    return opt


def cgroups_path(parent: str, container_id: str) -> str:
    """``/<parent>/<id>``: absolute, so runc places it under each hierarchy's root rather than
    under the daemon's own cgroup (runc joins a relative path to its own cgroup)."""
    return "/" + "/".join(p for p in (*parent.split("/"), container_id) if p)


def with_cgroups_path(path: str) -> SpecOpt:
    def opt(spec: Spec) -> None:
        spec.setdefault("linux", {})["cgroupsPath"] = path
    return opt


def with_namespaces(network: str = "new", pid: str = "new", ipc: str = "new",
                    uts: str = "new") -> SpecOpt:
    """Per namespace: ``"new"`` (own), ``"host"`` (share the daemon's), or a path such as
    ``/proc/<pid>/ns/net`` to join (``--net=container:``, a pre-made network namespace)."""
    wanted = {"network": network, "pid": pid, "ipc": ipc, "uts": uts}
    for kind, mode in wanted.items():
        if mode not in ("new", "host") and not mode.startswith("/"):
            raise InvalidParameter(f"invalid {kind} namespace mode: {mode!r}")

    def opt(spec: Spec) -> None:
        linux = spec.setdefault("linux", {})
        out = []
        for ns in linux.get("namespaces", []):
            mode = wanted.get(ns["type"], "keep")
            if mode == "host":
                continue
            out.append({"type": ns["type"], "path": mode} if mode.startswith("/")
                       else {"type": ns["type"]})
        linux["namespaces"] = out
    return opt


def with_devices(devices: Sequence[Device] = (), rules: Sequence[DeviceRule] = ()) -> SpecOpt:
    """Add device nodes and append devices-cgroup rules (``--device``: node plus an allow rule)."""
    def opt(spec: Spec) -> None:
        linux = spec.setdefault("linux", {})
        linux["devices"] = linux.get("devices", []) + [d.to_oci() for d in devices]
        res = linux.setdefault("resources", {})
        res["devices"] = res.get("devices", []) + [r.to_oci() for r in rules]
    return opt


def _rlimit_name(name: str) -> str:
    up = name.strip().upper()
    return up if up.startswith("RLIMIT_") else "RLIMIT_" + up


def with_rlimits(limits: Sequence[Rlimit]) -> SpecOpt:
    """Set rlimits, replacing any of the same type. Raising a hard limit above the daemon's own
    needs CAP_SYS_RESOURCE, which the daemon may lack: runc then fails at create."""
    for lim in limits:
        if lim.soft > lim.hard:
            raise InvalidParameter(f"ulimit soft limit must be less than or equal to hard limit: "
                                   f"{lim.soft} > {lim.hard}")
    new = {_rlimit_name(lim.type): lim for lim in limits}

    def opt(spec: Spec) -> None:
        proc = spec["process"]
        kept = [x for x in proc.get("rlimits", []) if x["type"] not in new]
        proc["rlimits"] = kept + [{"type": t, "hard": x.hard, "soft": x.soft}
                                  for t, x in new.items()]
    return opt


def with_seccomp(profile: dict[str, Any], *, kernel_abis_only: bool = False) -> SpecOpt:
    """Filter system calls with ``profile`` (Docker's format), its conditions evaluated for
    the bounding capabilities the spec holds when this option applies (apply it last);
    ``kernel_abis_only``: only for the ABIs this kernel runs (see ``seccomp``)."""
    def opt(spec: Spec) -> None:
        caps = list(spec["process"].get("capabilities", {}).get("bounding") or [])
        spec.setdefault("linux", {})["seccomp"] = seccomp.to_oci(
            profile, caps, kernel_abis_only=kernel_abis_only)
    return opt


def with_no_new_privileges() -> SpecOpt:
    """Neither setuid binaries nor file capabilities give the process anything more."""
    def opt(spec: Spec) -> None:
        spec["process"]["noNewPrivileges"] = True
    return opt


def with_oom_score_adj(score: int) -> SpecOpt:
    """Set the init's oom_score_adj (-1000..1000); going below the daemon's own needs
    CAP_SYS_RESOURCE."""
    if not -1000 <= score <= 1000:
        raise InvalidParameter(f"Invalid value {score}, range for oom score adj is [-1000, 1000]")

    def opt(spec: Spec) -> None:
        spec["process"]["oomScoreAdj"] = score
    return opt


def with_readonly_paths(paths: Sequence[str]) -> SpecOpt:
    def opt(spec: Spec) -> None:
        spec.setdefault("linux", {})["readonlyPaths"] = list(paths)
    return opt


def with_masked_paths(paths: Sequence[str]) -> SpecOpt:
    def opt(spec: Spec) -> None:
        spec.setdefault("linux", {})["maskedPaths"] = list(paths)
    return opt


def with_privileged(devices: Sequence[Device], capabilities: Collection[str]) -> SpecOpt:
    """``--privileged``: all the given capabilities (the daemon's own) and host devices, an
    allow-all devices cgroup, no masked or read-only paths, no seccomp, writable /sys and
    /sys/fs/cgroup (moby)."""
    caps = _ordered(capabilities)

    def opt(spec: Spec) -> None:
        spec["process"]["capabilities"] = {
            "bounding": list(caps), "effective": list(caps), "permitted": list(caps)}
        linux = spec.setdefault("linux", {})
        linux["devices"] = [d.to_oci() for d in devices]
        linux.setdefault("resources", {})["devices"] = [DeviceRule(True).to_oci()]
        linux["maskedPaths"] = []
        linux["readonlyPaths"] = []
        linux.pop("seccomp", None)
        for m in spec.get("mounts", []):
            if m["type"] in ("sysfs", "cgroup"):
                m["options"] = [o for o in m["options"] if o != "ro"]
    return opt
