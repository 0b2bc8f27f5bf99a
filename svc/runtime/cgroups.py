"""cgroup v1: a container's cgroups, their statistics, the freezer, and which knobs exist.

runc creates a container's cgroups from the spec's absolute ``cgroupsPath`` (``/<parent>/<id>``)
under every mounted hierarchy, including ``name=systemd`` and, on a hybrid host, the cgroup2
``unified`` one, and removes them on ``runc delete``. This module reads and updates them, and
removes what a crash left behind. A *cgroup* here is that absolute path; each controller's
directory is ``<root>/<controller><cgroup>``.

Reads and writes of cgroupfs files are short synchronous calls; only ``freeze``/``thaw`` wait.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import trio

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "blkio", "cpuset", "freezer", "devices")
# Knobs the engine may set, by the Docker option they serve; ``Knobs.missing`` names the absent.
WANTED_KNOBS = (
    "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes",
    "memory.kmem.limit_in_bytes", "memory.swappiness", "memory.oom_control", "cpu.shares",
    "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpuset.cpus", "cpuset.mems", "blkio.weight",
    "blkio.weight_device", "blkio.bfq.weight", "blkio.throttle.read_bps_device",
    "blkio.throttle.write_bps_device", "blkio.throttle.read_iops_device",
    "blkio.throttle.write_iops_device", "pids.max", "freezer.state")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


@dataclass(frozen=True)
class MemoryStats:
    usage: int
    max_usage: int
    limit: int
    failcnt: int
    stats: dict[str, int] = field(default_factory=dict)  # memory.stat


@dataclass(frozen=True)
class CpuStats:
    total_usage: int  # ns
    percpu_usage: list[int]  # ns per cpu
    usage_in_kernelmode: int  # ns
    usage_in_usermode: int  # ns
    throttling_periods: int = 0
    throttled_periods: int = 0
    throttled_time: int = 0  # ns


@dataclass(frozen=True)
class BlkioEntry:
    major: int
    minor: int
    op: str  # Read, Write, Sync, Async, Discard, Total
    value: int


@dataclass(frozen=True)
class BlkioStats:
    io_service_bytes_recursive: list[BlkioEntry]
    io_serviced_recursive: list[BlkioEntry]


@dataclass(frozen=True)
class PidsStats:
    current: int
    limit: int | None  # None: "max"


@dataclass(frozen=True)
class CgroupStats:
    """One reading; a part is ``None`` when its controller is not mounted or the cgroup is gone."""

    memory: MemoryStats | None
    cpu: CpuStats | None
    blkio: BlkioStats | None
    pids: PidsStats | None


@dataclass(frozen=True)
class Knobs:
    """Which cgroup files exist in a fresh cgroup (some exist only below the root)."""

    available: frozenset[str]
    kernel_memory_effective: bool  # writes to memory.kmem.limit_in_bytes take effect
    bfq_in_use: bool = False  # some block device has the BFQ scheduler selected

    def has(self, knob: str) -> bool:
        return knob in self.available

    @property
    def blkio_weight(self) -> bool:
        """A weight has an effect: CFQ's ``blkio.weight``, or BFQ's on a device using BFQ
        (the knob exists whenever the module is loaded, even if no device uses it)."""
        return self.has("blkio.weight") or (self.has("blkio.bfq.weight") and self.bfq_in_use)

    @property
    def missing(self) -> list[str]:
        return [k for k in WANTED_KNOBS if k not in self.available]


def _maybe(read: Callable[[str], T], cgroup: str) -> T | None:
    """A reading, or None where the cgroup cannot give it: missing, or going away with its
    last process (its files then answer ENODEV)."""
    try:
        return read(cgroup)
    except (OSError, ValueError):
        return None


def _int(text: str) -> int:
    return int(text.strip() or 0)


def parse_flat_keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, cpu.stat, cpuacct.stat)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_blkio(text: str) -> list[BlkioEntry]:
    """``maj:min Op value`` lines; the closing ``Total n`` line is not per device and is dropped."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and ":" in parts[0] and parts[2].isdigit():
            major, _, minor = parts[0].partition(":")
            out.append(BlkioEntry(int(major), int(minor), parts[1], int(parts[2])))
    return out


class CgroupV1:
    """The cgroup v1 hierarchies mounted under ``root`` (one directory per controller)."""

    def __init__(self, root: Path = CGROUP_ROOT) -> None:
        self.root = root

    def path(self, controller: str, cgroup: str) -> Path:
        return self.root / controller / _rel(cgroup)

    def hierarchies(self) -> list[Path]:
        """Every hierarchy directory under ``root`` (controllers, ``systemd``, ``unified``)."""
        try:
            entries = sorted(self.root.iterdir())
        except OSError:
            return []
        return [p for p in entries if p.is_dir() and not p.is_symlink()
                and (p / "cgroup.procs").exists()]

    def exists(self, cgroup: str) -> bool:
        return any((h / _rel(cgroup)).is_dir() for h in self.hierarchies())

    def read(self, controller: str, cgroup: str, knob: str) -> str:
        return (self.path(controller, cgroup) / knob).read_text()

    def write(self, controller: str, cgroup: str, knob: str, value: str | int) -> None:
        """Write one knob (``docker update``).

        Raises:
            OSError: the kernel refused the value, or the knob is missing.
        """
        (self.path(controller, cgroup) / knob).write_text(str(value))

    def create(self, cgroup: str, controllers: tuple[str, ...] = CONTROLLERS) -> None:
        """Create ``cgroup`` (and missing parents) under each controller present. New cpuset
        levels get their parent's cpus and mems, without which no task may join them."""
        for ctrl in controllers:
            if not (self.root / ctrl).is_dir():
                continue
            current = self.root / ctrl
            for part in [p for p in cgroup.split("/") if p]:
                parent, current = current, current / part
                if current.is_dir():
                    continue
                current.mkdir()
                if ctrl == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (current / knob).write_text((parent / knob).read_text())

    def remove(self, cgroup: str) -> list[Path]:
        """Remove ``cgroup`` and its descendants from every hierarchy, deepest first.

        Returns:
            The directories that could not be removed (processes still in them), empty on success.
        """
        left = []
        for h in self.hierarchies():
            top = h / _rel(cgroup)
            if not top.is_dir() or top == h:
                continue
            dirs = [Path(d) for d, _, _ in os.walk(top)]
            for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(d)
        return left

    def children(self, parent: str, controller: str = "memory") -> list[str]:
        """The cgroups directly below ``parent`` (e.g. leftover containers after a crash)."""
        base = self.path(controller, parent)
        try:
            names = sorted(p.name for p in base.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []
        return ["/" + "/".join(x for x in (*parent.split("/"), n) if x) for n in names]

    def procs(self, cgroup: str, controller: str = "memory") -> list[int]:
        try:
            return [int(x) for x in self.read(controller, cgroup, "cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def memory_stats(self, cgroup: str) -> MemoryStats:
        def rd(knob: str) -> str:
            return self.read("memory", cgroup, knob)
        return MemoryStats(
            usage=_int(rd("memory.usage_in_bytes")),
            max_usage=_int(rd("memory.max_usage_in_bytes")),
            limit=_int(rd("memory.limit_in_bytes")), failcnt=_int(rd("memory.failcnt")),
            stats=parse_flat_keyed(rd("memory.stat")))

    def cpu_stats(self, cgroup: str) -> CpuStats:
        ticks = parse_flat_keyed(self.read("cpuacct", cgroup, "cpuacct.stat"))
        to_ns = 1_000_000_000 // _CLK_TCK
        try:
            throttle = parse_flat_keyed(self.read("cpu", cgroup, "cpu.stat"))
        except FileNotFoundError:
            throttle = {}
        return CpuStats(
            total_usage=_int(self.read("cpuacct", cgroup, "cpuacct.usage")),
            percpu_usage=[int(x) for x in self.read("cpuacct", cgroup,
                                                    "cpuacct.usage_percpu").split()],
            usage_in_kernelmode=ticks.get("system", 0) * to_ns,
            usage_in_usermode=ticks.get("user", 0) * to_ns,
            throttling_periods=throttle.get("nr_periods", 0),
            throttled_periods=throttle.get("nr_throttled", 0),
            throttled_time=throttle.get("throttled_time", 0))

    def blkio_stats(self, cgroup: str) -> BlkioStats:
        """CFQ's counters if present, else BFQ's, else the throttle layer's (which counts every
        IO even with no weight-based scheduler), as libcontainer reads them."""
        base = self.path("blkio", cgroup)
        for prefix in ("blkio.", "blkio.bfq.", "blkio.throttle."):
            nbytes = base / f"{prefix}io_service_bytes_recursive"
            if nbytes.exists():
                entries = parse_blkio(nbytes.read_text())
                if entries or prefix == "blkio.throttle.":
                    return BlkioStats(entries, parse_blkio(
                        (base / f"{prefix}io_serviced_recursive").read_text()))
        return BlkioStats([], [])

    def pids_stats(self, cgroup: str) -> PidsStats:
        limit = self.read("pids", cgroup, "pids.max").strip()
        return PidsStats(_int(self.read("pids", cgroup, "pids.current")),
                         None if limit == "max" else int(limit))

    def stats(self, cgroup: str) -> CgroupStats:
        """Everything ``docker stats`` shows, each part ``None`` if unreadable."""
        return CgroupStats(_maybe(self.memory_stats, cgroup), _maybe(self.cpu_stats, cgroup),
                           _maybe(self.blkio_stats, cgroup), _maybe(self.pids_stats, cgroup))

    def freezer_state(self, cgroup: str) -> str:
        """``THAWED``, ``FREEZING`` or ``FROZEN``."""
        return self.read("freezer", cgroup, "freezer.state").strip()

    async def freeze(self, cgroup: str, *, poll: float = 0.005) -> None:
        """Freeze every task of ``cgroup`` and wait until the kernel reports ``FROZEN``.

        Cancellation: a checkpoint; cancelled, the cgroup may be FREEZING (``thaw`` it).
        """
        await self._set_freezer(cgroup, "FROZEN", poll)

    async def thaw(self, cgroup: str, *, poll: float = 0.005) -> None:
        """Thaw ``cgroup`` and wait for ``THAWED``.

        Cancellation: a checkpoint; cancelled, the cgroup may still be frozen.
        """
        await self._set_freezer(cgroup, "THAWED", poll)

    async def _set_freezer(self, cgroup: str, state: str, poll: float) -> None:
        while True:
            # Re-write on every round: a task forking while the cgroup freezes can leave it
            # FREEZING until asked again (runc does the same).
            self.write("freezer", cgroup, "freezer.state", state)
            if self.freezer_state(cgroup) == state:
                return
            await trio.sleep(poll)

    def probe(self, parent: str = "/") -> Knobs:
        """Create a throwaway cgroup below ``parent``, list its knobs, and check whether a
        kernel-memory limit sticks (kernels since 6.x accept the write and ignore it)."""
        name = f"{parent.rstrip('/')}/svc-probe-{secrets.token_hex(4)}"
        self.create(name)
        try:
            available: set[str] = set()
            for ctrl in CONTROLLERS:
                d = self.path(ctrl, name)
                if d.is_dir():
                    available.update(p.name for p in d.iterdir())
            kmem = False
            if "memory.kmem.limit_in_bytes" in available:
                try:
                    self.write("memory", name, "memory.kmem.limit_in_bytes", 64 << 20)
                    kmem = _int(self.read("memory", name, "memory.kmem.limit_in_bytes")) == 64 << 20
                except OSError:
                    kmem = False
            return Knobs(frozenset(available), kmem, bfq_in_use())
        finally:
            self.remove(name)


def bfq_in_use(block: Path = Path("/sys/block")) -> bool:
    """Whether any block device has BFQ as its selected I/O scheduler."""
    try:
        devices = list(block.iterdir())
    except OSError:
        return False
    for dev in devices:
        with contextlib.suppress(OSError):
            if "[bfq]" in (dev / "queue" / "scheduler").read_text():
                return True
    return False


def system_cpu_usage(proc_stat: Path = Path("/proc/stat")) -> int:
    """Host CPU time in ns (the ``cpu`` line of /proc/stat), ``docker stats``' denominator."""
    for line in proc_stat.read_text().splitlines():
        if line.startswith("cpu "):
            return sum(int(x) for x in line.split()[1:8]) * (1_000_000_000 // _CLK_TCK)
    return 0


def _rel(cgroup: str) -> str:
    """A cgroup path relative to a hierarchy's root that cannot leave it (as runc cleans it:
    ``..`` stops at the root)."""
    parts: list[str] = []
    for p in cgroup.split("/"):
        if p == "..":
            if parts:
                parts.pop()
        elif p not in ("", "."):
            parts.append(p)
    return "/".join(parts)
