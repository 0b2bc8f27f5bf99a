"""One container: its durable record and the live handles the daemon holds while it runs.

The record (``record()`` / ``from_record``) is what the store keeps: configuration, host
configuration, state and the paths of its files. The live part (``Live``) exists only while a
supervisor task owns a running process: the runtime's pid, the pipes or pty, the events that
waiters and stoppers watch.
"""

from __future__ import annotations

import functools
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from svc.engine.containers.attach import OutputHub
from svc.engine.containers.mounts import MountPoint
from svc.engine.containers.state import State
from svc.engine.networks.endpoints import EndpointPlan
from svc.models.containers import ContainerConfig
from svc.models.containers import HostConfigBody as HostConfig
from svc.storage.jsonlog.writer import JsonLogWriter

if TYPE_CHECKING:
    from svc.engine.containers.monitored import MonitorHandle
    from svc.engine.containers.shimmed import ShimHandle

ID_BYTES = 32


def new_id() -> str:
    return secrets.token_hex(ID_BYTES)


@dataclass
class RunState:
    """The State object of inspect, in domain terms (times in Unix ns; 0 = never)."""

    status: State = State.CREATED
    pid: int = 0
    exit_code: int = 0
    error: str = ""
    oom_killed: bool = False
    started_ns: int = 0
    finished_ns: int = 0

    def record(self) -> dict[str, Any]:
        return {"status": self.status.value, "pid": self.pid, "exit_code": self.exit_code,
                "error": self.error, "oom_killed": self.oom_killed,
                "started_ns": self.started_ns, "finished_ns": self.finished_ns}

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> RunState:
        return cls(State(rec.get("status", "created")), int(rec.get("pid", 0)),
                   int(rec.get("exit_code", 0)), str(rec.get("error", "")),
                   bool(rec.get("oom_killed", False)), int(rec.get("started_ns", 0)),
                   int(rec.get("finished_ns", 0)))


@dataclass
class Live:
    """Handles of a started container, owned by its supervisor task."""

    pid: int
    exited: trio.Event = field(default_factory=trio.Event)
    cgroup: str = ""
    console: Any = None  # runtime.process.Console for a TTY container
    stdin: Any = None  # the daemon's end of the stdin pipe (OpenStdin without TTY)
    log: JsonLogWriter | None = None  # this run's json-file writer (logs -f taps behind it)
    start_failure: tuple[int, str] | None = None  # (exit code, error) of a start runc refused
    # set once the launch has recorded the start or its failure (None: no start pending, e.g.
    # a restored container). A process that exits at once is not torn down before: runc start
    # removes its exec fifo after the process runs (and failed when runc delete took it
    # first), and ``die`` must follow ``start``
    launched: trio.Event | None = None
    # set once the process has exited and its output is delivered, before the teardown and
    # the recorded exit: ``code`` is the exit code then. The builder commits the container's
    # file system from here while the supervisor tears it down
    ended: trio.Event = field(default_factory=trio.Event)
    code: int = -1
    # under svc-shim or conmon (live restore): the monitor's process, files, descriptors
    monitor: MonitorHandle | ShimHandle | None = None


@dataclass
class Container:
    id: str
    name: str  # with the leading "/"
    created_ns: int
    path: str
    args: list[str]
    config: ContainerConfig  # validated at create, image defaults merged
    host_config: HostConfig  # validated at create, dockerd's defaults filled in
    image_id: str
    state: RunState = field(default_factory=RunState)
    restart_count: int = 0
    has_been_started: bool = False
    manually_stopped: bool = False  # ends restart loops; unless-stopped stays down at boot
    warnings: list[str] = field(default_factory=list)
    dir: Path = Path("/")  # <root>/containers/<id>
    live: Live | None = None
    exec_ids: list[str] = field(default_factory=list)
    monitor_pid: int = 0  # its svc-shim (or conmon) while it runs under one (live restore)
    monitor_kind: str = ""  # "shim", or "conmon" (what builds before svc-shim used)
    mounts: list[MountPoint] = field(default_factory=list)  # mounts.plan
    net_config: dict[str, EndpointPlan] = field(default_factory=dict)  # by network id
    restart_scope: trio.CancelScope | None = None  # the pending delay of a restart
    fs_users: int = 0  # archive/export/commit readers holding the overlay mounted
    # The trio objects (``lock``, ``mount_lock``, ``changed``, ``hub``) are made on first
    # use: most containers are never started nor attached to, and the four cost 2 KiB (no
    # checkpoint between the test and the assignment, so two tasks never make two).
    _changed: trio.Event | None = field(default=None, repr=False)
    revision: int = 0  # bumped by every save: lets views cache what they derive
    exits: int = 0  # exits seen since the daemon started: ``wait`` returns at the next one
    last_exit_code: int = 0  # that exit's code (a restart resets State.ExitCode to 0)
    view_cache: dict[Any, Any] = field(default_factory=dict)
    # overlay lower dirs above the image's layers (relative to the layer store's root): a
    # build's RUN on a layer still being committed, until ``ContainerService.rebase``; not
    # saved (a restart finds the container on its image)
    build_lowers: tuple[str, ...] = ()

    @functools.cached_property
    def lock(self) -> trio.Lock:
        """Serialises lifecycle verbs."""
        return trio.Lock()

    @functools.cached_property
    def mount_lock(self) -> trio.Lock:
        """Serialises mounting and unmounting the overlay (two mounts of one upper/work dir
        at once: the second fails with EBUSY)."""
        return trio.Lock()

    @functools.cached_property
    def hub(self) -> OutputHub:
        """The attached clients, across runs."""
        return OutputHub()

    @property
    def changed(self) -> trio.Event:
        """Set (and replaced) on each change: see ``notify``."""
        if self._changed is None:
            self._changed = trio.Event()
        return self._changed

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def bare_name(self) -> str:
        return self.name.lstrip("/")

    @property
    def tty(self) -> bool:
        return self.config.Tty

    @property
    def log_path(self) -> Path:
        return self.dir / f"{self.id}-json.log"

    @property
    def hostname_path(self) -> Path:
        return self.dir / "hostname"

    @property
    def hosts_path(self) -> Path:
        return self.dir / "hosts"

    @property
    def resolv_conf_path(self) -> Path:
        return self.dir / "resolv.conf"

    @property
    def upper_dir(self) -> Path:
        return self.dir / "fs" / "diff"

    @property
    def work_dir(self) -> Path:
        return self.dir / "fs" / "work"

    @property
    def init_dir(self) -> Path:
        return self.dir / "fs" / "init"

    @property
    def rootfs(self) -> Path:
        return self.dir / "fs" / "merged"

    @property
    def view_dir(self) -> Path:
        """Where ``Runner.image_view`` mounts the image's read-only view."""
        return self.dir / "fs" / "view"

    def notify(self) -> None:
        """Wake whoever waits for a change of this container (wait, restart loops)."""
        if self._changed is not None:  # else nobody waits
            self._changed.set()
            self._changed = None

    def log_driver(self) -> str:
        return self.host_config.LogConfig.Type or "json-file"

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "created_ns": self.created_ns,
                "path": self.path, "args": self.args,
                "config": self.config.model_dump(mode="json"),
                "host_config": self.host_config.model_dump(mode="json"), "image_id": self.image_id,
                "state": self.state.record(), "restart_count": self.restart_count,
                "has_been_started": self.has_been_started,
                "manually_stopped": self.manually_stopped,
                "mounts": [m.model_dump() for m in self.mounts],
                "net_config": {k: v.record() for k, v in self.net_config.items()},
                **({"monitor_pid": self.monitor_pid, "monitor_kind": self.monitor_kind}
                   if self.monitor_pid else {})}

    @classmethod
    def from_record(cls, rec: dict[str, Any], containers_dir: Path) -> Container:
        cid = str(rec["id"])
        return cls(id=cid, name=str(rec["name"]), created_ns=int(rec["created_ns"]),
                   path=str(rec["path"]), args=[str(a) for a in rec["args"]],
                   config=ContainerConfig.model_validate(rec["config"]),
                   host_config=HostConfig.model_validate(rec["host_config"]),
                   image_id=str(rec["image_id"]),
                   state=RunState.from_record(dict(rec.get("state") or {})),
                   restart_count=int(rec.get("restart_count", 0)),
                   has_been_started=bool(rec.get("has_been_started", False)),
                   manually_stopped=bool(rec.get("manually_stopped", False)),
                   mounts=[MountPoint.model_validate(m) for m in rec.get("mounts") or []],
                   net_config={str(k): EndpointPlan.from_record(dict(v))
                               for k, v in (rec.get("net_config") or {}).items()},
                   monitor_pid=int(rec.get("monitor_pid") or 0),
                   # (a record without a kind was written by a build that used only conmon)
                   monitor_kind=str(rec.get("monitor_kind") or "conmon"),
                   dir=containers_dir / cid)


def now_ns() -> int:
    return time.time_ns()
