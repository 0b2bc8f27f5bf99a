"""Facts about this machine, read from /proc, /sys and /etc, for /info and /version.

Each function reads live values (nothing is cached except what cannot change while the daemon
runs) and degrades to a neutral value when a file is missing, because a container host may hide
parts of /sys.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup")

_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
           "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def kernel_version() -> str:
    return platform.release()


def machine() -> str:
    """The kernel's architecture name (x86_64), as /info's Architecture reports it."""
    return platform.machine()


def goarch() -> str:
    """The architecture in the GOARCH spelling clients expect from /version (amd64)."""
    m = platform.machine()
    return _GOARCH.get(m, m)


def ncpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except OSError:
        return os.cpu_count() or 1


def mem_total() -> int:
    """MemTotal in bytes from /proc/meminfo."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@functools.cache
def operating_system() -> str:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
        except OSError:
            continue
    return "Linux"


def hostname() -> str:
    return socket.gethostname()


def ipv4_forwarding() -> bool:
    try:
        return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"
    except OSError:
        return False


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def oom_score_adj() -> int:
    try:
        return int(Path("/proc/self/oom_score_adj").read_text())
    except (OSError, ValueError):
        return 0


def fs_type(path: Path) -> str:
    """The filesystem type backing ``path`` (longest matching mount point in /proc/mounts)."""
    best, kind = "", "unknown"
    target = str(path.resolve())
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) < 3:
                continue
            mnt = parts[1].replace("\\040", " ")
            inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
            if inside and len(mnt) >= len(best):
                best, kind = mnt, parts[2]
    except OSError:
        pass
    return {"ext2/ext3": "extfs", "ext4": "extfs", "ext3": "extfs"}.get(kind, kind)


class CgroupFeatures:
    """Which cgroup v1 knobs the kernel offers (what /info's MemoryLimit, SwapLimit... report)."""

    def __init__(self, root: Path = CGROUP_V1) -> None:
        self.root = root

    def _has(self, controller: str, knob: str) -> bool:
        return (self.root / controller / knob).exists()

    @property
    def memory_limit(self) -> bool:
        return self._has("memory", "memory.limit_in_bytes")

    @property
    def swap_limit(self) -> bool:
        return self._has("memory", "memory.memsw.limit_in_bytes")

    @property
    def kernel_memory(self) -> bool:
        return self._has("memory", "memory.kmem.limit_in_bytes")

    @property
    def oom_kill_disable(self) -> bool:
        return self._has("memory", "memory.oom_control")

    @property
    def cpu_cfs_period(self) -> bool:
        return self._has("cpu", "cpu.cfs_period_us")

    @property
    def cpu_cfs_quota(self) -> bool:
        return self._has("cpu", "cpu.cfs_quota_us")

    @property
    def cpu_shares(self) -> bool:
        return self._has("cpu", "cpu.shares")

    @property
    def cpuset(self) -> bool:
        return self._has("cpuset", "cpuset.cpus")

    @property
    def blkio_weight(self) -> bool:
        return self._has("blkio", "blkio.weight")


def apparmor_enabled() -> bool:
    """Whether the kernel runs AppArmor (dockerd's check)."""
    try:
        return Path("/sys/module/apparmor/parameters/enabled").read_text().strip() == "Y"
    except OSError:
        return False


def selinux_enabled() -> bool:
    """Whether SELinux is mounted and active."""
    return Path("/sys/fs/selinux/enforce").exists()
