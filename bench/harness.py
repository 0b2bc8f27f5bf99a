"""Shared pieces of the benchmarks: figures and targets, raw HTTP/1.1 over unix sockets, and
/proc readings. The servers under test are started by ``bench.procs``.

Everything here is blocking and standard library only, so the benchmark clients stay cheap and
never share an event loop with what they measure.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_VENV_PYTHON = REPO / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Target:
    """A floor (``>=``) or a ceiling (``<``, ``<=``) that a figure should meet."""

    op: str
    value: float

    def met(self, x: float) -> bool:
        if self.op == ">=":
            return x >= self.value
        return x <= self.value if self.op == "<=" else x < self.value


@dataclass
class Figure:
    """One measured number, with its target and the same measurement on the floor server."""

    bench: str
    metric: str
    value: float
    unit: str
    target: Target | None = None
    floor: float | None = None
    note: str = ""

    @property
    def status(self) -> str:
        if self.target is None:
            return "-"
        return "OK" if self.target.met(self.value) else "MISS"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status
        return out


@dataclass
class Outcome:
    """What one benchmark hands back to the runner."""

    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# -- raw HTTP over a unix socket ------------------------------------------------------------


def request_bytes(method: str, target: str, *, body: bytes = b"") -> bytes:
    """A minimal HTTP/1.1 keep-alive request, as a Docker client would send it."""
    head = f"{method} {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: svc-bench\r\n"
    if body or method in ("POST", "PUT"):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def parse_head(head: bytes) -> tuple[int, int | None]:
    """Status code and Content-Length (None when absent) of a response head."""
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return status, length


def read_head(sock: socket.socket, buf: bytes = b"") -> tuple[bytes, bytes]:
    """Read up to the end of a response head; returns (head, bytes already read after it)."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed before the response head")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def exchange(sock: socket.socket, raw: bytes) -> tuple[int, bytes, bytes]:
    """Send one request and read a Content-Length response: (status, head, full response)."""
    sock.sendall(raw)
    head, body = read_head(sock)
    status, length = parse_head(head)
    if length is None:
        raise ValueError("the response has no Content-Length")
    while len(body) < length:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed in the middle of the body")
        body += data
    return status, head, head + b"\r\n\r\n" + body[:length]


def connect(path: Path | str, timeout: float | None = 30.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def call(path: Path | str, method: str, target: str,
         timeout: float = 30.0) -> tuple[int, bytes]:
    """One request on a fresh connection; returns (status, whole raw response)."""
    with connect(path, timeout) as sock:
        status, _, raw = exchange(sock, request_bytes(method, target))
    return status, raw


def body_of(raw: bytes) -> bytes:
    return raw.partition(b"\r\n\r\n")[2]


# -- /proc --------------------------------------------------------------------------------


def proc_status_kib(pid: int) -> dict[str, int]:
    """The ``Vm*`` lines of /proc/PID/status, in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Vm"):
                name, _, value = line.partition(":")
                out[name] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (all its threads, those that ended
    too; not its children), to the nanosecond.

    ``/proc/PID/stat`` counts in clock ticks (10 ms): 100 streams opened at 0.05 ms each read
    as 0 or 0.1 ms. The process's CPU clock (``clock_getcpuclockid``: the clock id is
    ``(~pid << 3) | 2``, Linux's process-wide scheduler clock) is the same sum, exact. The
    ticks are the fallback where that clock cannot be read."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def core_wait_seconds(pid: int | None = None) -> float:
    """Time the threads of ``pid`` (None: the calling thread) have spent runnable but waiting
    for a core, so far (``/proc/.../schedstat``'s second field, ns; live threads only)."""
    if pid is None:
        paths = [Path("/proc/thread-self/schedstat")]
    else:
        paths = list(Path(f"/proc/{pid}/task").glob("*/schedstat"))
    total = 0
    for path in paths:
        try:
            total += int(path.read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that just ended
            continue
    return total / 1e9


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values), max(1, math.ceil(p / 100 * len(sorted_values)))) - 1
    return sorted_values[k]


def wait_until(pred: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())
