"""The engines a side-by-side run measures: svcd (started by the runner) and a reference engine
(Moby's dockerd, started by hand, e.g. with ``bench/reference.sh``), each a unix socket plus the
processes whose CPU time is read from /proc.

CPU groups: ``daemon`` is the API daemon alone (svcd; dockerd), ``engine`` adds the processes
that do the daemon's work out of process (svcd: none; dockerd: the containerd it talks to).
Runtimes and shims (runc, containerd-shim) are never counted: only each process's own
``utime + stime`` (all its threads, not its children) is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import cpu_seconds

LISTENING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags column


@dataclass
class Engine:
    """One daemon under test."""

    name: str  # "svc" or "reference"
    socket: Path
    groups: dict[str, list[int]] = field(default_factory=dict)  # "daemon"/"engine" -> pids

    def cpu(self, group: str = "daemon") -> float:
        """CPU seconds (utime + stime, all threads) of the group's processes so far."""
        return sum(cpu_seconds(pid) for pid in self.groups[group])

    def cpu_all(self) -> dict[str, float]:
        return {g: self.cpu(g) for g in self.groups}

    def alive(self) -> bool:
        return all(Path(f"/proc/{pid}").exists() for pids in self.groups.values()
                   for pid in pids)

    def describe(self) -> dict[str, object]:
        return {"socket": str(self.socket), "pids": self.groups}


def svc_engine(socket: Path, pid: int) -> Engine:
    return Engine("svc", socket, {"daemon": [pid], "engine": [pid]})


def _listening_inodes(path: Path) -> set[str]:
    out = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[7] == str(path) and int(parts[3], 16) & LISTENING:
                out.add(parts[6])
    return out


def socket_owners(path: Path) -> list[int]:
    """Pids of the processes holding the listening unix socket bound at ``path``
    (/proc/net/unix gives its inode, /proc/*/fd who holds it)."""
    wanted = {f"socket:[{i}]" for i in _listening_inodes(path)}
    owners = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    if os.readlink(fd.path) in wanted:
                        owners.append(int(entry.name))
                        break
                except OSError:
                    continue
    return owners


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except OSError:
        return 0


def children_named(parent: int, comm: str) -> list[int]:
    return [int(e.name) for e in os.scandir("/proc")
            if e.name.isdigit() and _comm(int(e.name)) == comm and _ppid(int(e.name)) == parent]


def reference_engine(socket: Path, pid: int | None = None,
                     containerd_pid: int | None = None) -> Engine:
    """The reference engine on ``socket``: dockerd's pid from the socket's owner unless given,
    containerd's from dockerd's children named ``containerd`` unless given (dockerd starts one
    when none runs)."""
    if not socket.is_socket():
        raise RuntimeError(f"{socket} is not a socket: start the reference engine first "
                           "(bench/reference.sh start)")
    if pid is None:
        owners = socket_owners(socket)
        if len(owners) != 1:
            raise RuntimeError(f"cannot tell the reference daemon from the owners of {socket}: "
                               f"{owners or 'none'}; give --reference-pid")
        pid = owners[0]
    engine_pids = [pid]
    if containerd_pid is not None:
        engine_pids.append(containerd_pid)
    else:
        engine_pids += children_named(pid, "containerd")
    return Engine("reference", socket, {"daemon": [pid], "engine": engine_pids})
