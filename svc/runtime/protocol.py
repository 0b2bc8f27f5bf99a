"""The runtime layer's interface: the ``Runtime`` Protocol and the plain values it takes.

The engine depends on ``Runtime`` (runc today; crun speaks the same CLI) and on these
dataclasses, never on Docker's names: it translates ``HostConfig`` into ``Resources``,
``Mount``... and an OCI document built by ``spec.build_spec``.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from svc.errors import Conflict, NotFound, SystemError_

if TYPE_CHECKING:
    from svc.runtime.process import Console, ContainerPipes, StdioFds


class RuntimeFailure(SystemError_):
    """The OCI runtime refused or failed a command; ``str()`` is the runtime's own message."""

    def __init__(self, message: str, *, command: str = "", exit_code: int | None = None,
                 output: str = "") -> None:
        super().__init__(message)
        self.command = command
        self.exit_code = exit_code
        self.output = output  # everything the runtime logged, for the daemon's log


class ContainerNotFound(NotFound, RuntimeFailure):
    """The runtime has no container by that id: a 404 for the client (NotFound comes
    first), a RuntimeFailure for the engine."""


class ContainerStateConflict(Conflict, RuntimeFailure):
    """The container is not in a state that allows the command (kill a stopped one...): a
    409 for the client (Conflict comes first), a RuntimeFailure for the engine."""


@dataclass(frozen=True)
class Mount:
    """One OCI mount; build them with ``bind_mount`` / ``tmpfs_mount`` or directly."""

    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ()

    def to_oci(self) -> dict[str, Any]:
        return {"destination": self.destination, "type": self.type, "source": self.source,
                "options": list(self.options)}


def bind_mount(source: str, destination: str, *, readonly: bool = False,
               propagation: str = "rprivate", recursive: bool = True) -> Mount:
    """A bind mount as moby writes it: ``rbind``, a propagation mode, then ``ro`` or ``rw``."""
    opts = ("rbind" if recursive else "bind", propagation, "ro" if readonly else "rw")
    return Mount(destination, source, "bind", opts)


def tmpfs_mount(destination: str, options: Sequence[str] = ()) -> Mount:
    """A tmpfs (``--tmpfs``): ``noexec,nosuid,nodev`` plus the caller's options (size=, mode=)."""
    return Mount(destination, "tmpfs", "tmpfs", ("noexec", "nosuid", "nodev", *options))


@dataclass(frozen=True)
class BlkioRate:
    """A throttle for one block device: bytes (or IOs) per second."""

    major: int
    minor: int
    rate: int


@dataclass(frozen=True)
class BlkioWeightDevice:
    major: int
    minor: int
    weight: int


@dataclass(frozen=True)
class Resources:
    """cgroup limits in the spec's units; ``None`` leaves a knob unset (the kernel default)."""

    memory: int | None = None  # bytes
    memory_swap: int | None = None  # memory+swap bytes; -1 unlimited
    memory_reservation: int | None = None
    kernel_memory: int | None = None  # runc 1.1 ignores it (kernel >= 5.x dropped kmem limits)
    swappiness: int | None = None
    oom_kill_disable: bool | None = None
    cpu_shares: int | None = None
    cpu_period: int | None = None
    cpu_quota: int | None = None
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    blkio_weight: int | None = None
    blkio_weight_devices: tuple[BlkioWeightDevice, ...] = ()
    blkio_read_bps: tuple[BlkioRate, ...] = ()
    blkio_write_bps: tuple[BlkioRate, ...] = ()
    blkio_read_iops: tuple[BlkioRate, ...] = ()
    blkio_write_iops: tuple[BlkioRate, ...] = ()
    pids_limit: int | None = None  # -1 unlimited


@dataclass(frozen=True)
class Device:
    """A device node created in the container's /dev."""

    path: str
    type: str  # "c", "b" or "p"
    major: int
    minor: int
    file_mode: int = 0o666
    uid: int = 0
    gid: int = 0

    def to_oci(self) -> dict[str, Any]:
        return {"path": self.path, "type": self.type, "major": self.major, "minor": self.minor,
                "fileMode": self.file_mode, "uid": self.uid, "gid": self.gid}


@dataclass(frozen=True)
class DeviceRule:
    """A devices-cgroup rule; ``None`` major/minor means any (``*``)."""

    allow: bool
    type: str | None = None  # "a", "c", "b" or None (all)
    major: int | None = None
    minor: int | None = None
    access: str = "rwm"

    def to_oci(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"allow": self.allow, "access": self.access}
        if self.type is not None:
            rule["type"] = self.type
        if self.major is not None:
            rule["major"] = self.major
        if self.minor is not None:
            rule["minor"] = self.minor
        return rule


@dataclass(frozen=True)
class Rlimit:
    """A resource limit; ``type`` is ``RLIMIT_NOFILE`` or docker's ``nofile`` spelling."""

    type: str
    soft: int
    hard: int


@dataclass
class Created:
    """What ``create`` leaves: the init's pid (waiting on the exec fifo until ``start``) and,
    for a terminal container, the pty master."""

    pid: int
    console: Console | None = None


class Runtime(Protocol):
    """An OCI runtime driven by container id; every call may raise ``RuntimeFailure`` (or its
    ``ContainerNotFound`` / ``ContainerStateConflict`` kinds)."""

    async def create(self, container_id: str, bundle: Path, *,
                     stdio: StdioFds | ContainerPipes | None = None, terminal: bool = False,
                     pid_file: Path | None = None) -> Created: ...

    async def start(self, container_id: str) -> None: ...

    async def exec(self, container_id: str, process: dict[str, Any], *,
                   stdio: StdioFds | ContainerPipes | None = None,
                   terminal: bool = False) -> Created: ...

    async def kill(self, container_id: str, sig: int = signal.SIGTERM, *,
                   all: bool = False) -> None: ...

    async def pause(self, container_id: str) -> None: ...

    async def resume(self, container_id: str) -> None: ...

    async def update(self, container_id: str, resources: dict[str, Any]) -> None: ...

    async def delete(self, container_id: str, *, force: bool = False) -> None: ...

    def has_state(self, container_id: str) -> bool:
        """Whether the runtime keeps anything for ``container_id`` (blocking, one stat):
        without it, ``delete`` has nothing to do."""
        ...

    async def state(self, container_id: str) -> dict[str, Any]: ...

    async def list(self) -> list[dict[str, Any]]: ...
