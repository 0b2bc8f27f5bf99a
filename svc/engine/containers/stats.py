"""``GET /containers/{id}/stats``: cgroup v1 figures, the host's CPU time and the container's
network counters, one object per second (or one, with ``stream=false``).

A reading costs a few small file reads (in a worker thread). ``precpu_stats`` is the previous
reading of the same container, kept per container: a ``stream=false`` request with no recent
reading takes two, ``PRE_SAMPLE`` apart, so the first object already gives a CPU percentage.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

from svc.engine.containers.container import Container
from svc.engine.containers.run import Runner
from svc.engine.containers.state import State
from svc.runtime import host
from svc.runtime.cgroups import CgroupStats, CgroupV1, system_cpu_usage
from svc.wire.timefmt import rfc3339_nano

HOST_MEMORY = host.mem_total()  # an unlimited container's limit is the machine's memory
log = logging.getLogger("svc.engine.containers")
INTERVAL = 1.0
PRE_SAMPLE = 0.025
FRESH = 2.0  # a cached reading younger than this serves as precpu_stats
NET_FIELDS = ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "tx_bytes", "tx_packets",
              "tx_errors", "tx_dropped")


def read_net_dev(pid: int) -> dict[str, dict[str, int]]:
    """Per-interface counters in the network namespace of ``pid`` (/proc/<pid>/net/dev)."""
    out: dict[str, dict[str, int]] = {}
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return out
    for line in lines:
        name, _, rest = line.partition(":")
        v = [int(x) for x in rest.split()]
        if len(v) < 16:
            continue
        name = name.strip()
        out[name] = {"rx_bytes": v[0], "rx_packets": v[1], "rx_errors": v[2],
                     "rx_dropped": v[3], "tx_bytes": v[8], "tx_packets": v[9],
                     "tx_errors": v[10], "tx_dropped": v[11]}
    return out


def _cpu(stats: CgroupStats, system: int) -> dict[str, Any]:
    cpu = stats.cpu
    if cpu is None:
        return {"cpu_usage": {"total_usage": 0, "percpu_usage": [], "usage_in_kernelmode": 0,
                              "usage_in_usermode": 0},
                "system_cpu_usage": system,
                "throttling_data": {"periods": 0, "throttled_periods": 0, "throttled_time": 0}}
    return {"cpu_usage": {"total_usage": cpu.total_usage, "percpu_usage": cpu.percpu_usage,
                          "usage_in_kernelmode": cpu.usage_in_kernelmode,
                          "usage_in_usermode": cpu.usage_in_usermode},
            "system_cpu_usage": system,
            "throttling_data": {"periods": cpu.throttling_periods,
                                "throttled_periods": cpu.throttled_periods,
                                "throttled_time": cpu.throttled_time}}


def _blkio(stats: CgroupStats) -> dict[str, Any]:
    def rows(entries: list[Any]) -> list[dict[str, Any]]:
        return [{"major": e.major, "minor": e.minor, "op": e.op, "value": e.value}
                for e in entries]
    b = stats.blkio
    out: dict[str, Any] = {k: [] for k in (
        "io_service_bytes_recursive", "io_serviced_recursive", "io_queue_recursive",
        "io_service_time_recursive", "io_wait_time_recursive", "io_merged_recursive",
        "io_time_recursive", "sectors_recursive")}
    if b is not None:
        out["io_service_bytes_recursive"] = rows(b.io_service_bytes_recursive)
        out["io_serviced_recursive"] = rows(b.io_serviced_recursive)
    return out


class Sample:
    """One reading: the JSON parts and when it was taken (monotonic)."""

    def __init__(self, read_ns: int, at: float, doc: dict[str, Any]) -> None:
        self.read_ns = read_ns
        self.at = at
        self.doc = doc


def take_sample(cgroups: CgroupV1, cgroup: str, pid: int, system: int | None = None) -> Sample:
    """Blocking: one reading of the container (``system``: /proc/stat's total, if read)."""
    stats = cgroups.stats(cgroup)
    system = system_cpu_usage() if system is None else system
    mem = stats.memory
    doc: dict[str, Any] = {
        "cpu_stats": _cpu(stats, system),
        "memory_stats": ({"usage": mem.usage, "max_usage": mem.max_usage, "stats": mem.stats,
                          "failcnt": mem.failcnt, "limit": min(mem.limit, HOST_MEMORY)}
                         if mem else {}),
        "blkio_stats": _blkio(stats),
        "pids_stats": {"current": stats.pids.current} if stats.pids else {},
        "networks": read_net_dev(pid) if pid else {},
    }
    return Sample(time.time_ns(), time.monotonic(), doc)


def empty_sample() -> Sample:
    """What a stopped container reports (dockerd sends zeros)."""
    doc: dict[str, Any] = {
        "cpu_stats": _cpu(CgroupStats(None, None, None, None), 0),
        "memory_stats": {}, "blkio_stats": _blkio(CgroupStats(None, None, None, None)),
        "pids_stats": {}, "networks": {}}
    return Sample(0, time.monotonic(), doc)


def take_samples(cgroups: CgroupV1, targets: list[tuple[str, str, int]]
                 ) -> list[tuple[str, Sample | None]]:
    """Blocking: one reading of each (id, cgroup, pid), /proc/stat read once for all."""
    system = system_cpu_usage()
    out: list[tuple[str, Sample | None]] = []
    for cid, cgroup, pid in targets:
        try:
            out.append((cid, take_sample(cgroups, cgroup, pid, system)))
        except OSError:
            out.append((cid, None))
    return out


class StatsService:
    """One-shot readings, and one collector task that reads every streamed container once a
    second (in one worker-thread trip, /proc/stat read once) and hands each stream its
    reading, as dockerd's stats collector does: a hundred streams cost one tick, not a
    hundred."""

    def __init__(self, runner: Runner, cgroups: CgroupV1) -> None:
        self.runner = runner
        self.cgroups = cgroups
        self.last: dict[str, Sample] = {}
        self._subs: dict[str, set[trio.MemorySendChannel[Sample | None]]] = {}
        self._containers: dict[str, Container] = {}
        self._wake = trio.Event()

    async def _sample(self, c: Container) -> Sample | None:
        live = c.live
        if live is None or c.state.status not in (State.RUNNING, State.PAUSED):
            return None
        try:
            return await trio.to_thread.run_sync(take_sample, self.cgroups,
                                                 self.runner.cgroup_of(c), live.pid)
        except OSError:  # its process exited under the reading: answer as for a stopped one
            await self.runner.settle_exit(c)
            return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """The collector: a reading per subscribed container each INTERVAL (until cancelled).
        A stopped container's streams get None and end."""
        task_status.started()
        while True:
            if not self._subs:
                self._wake = trio.Event()
                await self._wake.wait()
            targets = []
            for cid in list(self._subs):
                c = self._containers.get(cid)
                live = c.live if c is not None else None
                if c is None or live is None or c.state.status not in (State.RUNNING,
                                                                       State.PAUSED):
                    self._deliver(cid, None)
                else:
                    targets.append((cid, self.runner.cgroup_of(c), live.pid))
            if targets:
                try:
                    samples = await trio.to_thread.run_sync(take_samples,
                                                            self.cgroups, targets)
                except Exception:  # never let a reading stop the daemon
                    log.exception("reading container stats failed")
                    samples = []
                for cid, sample in samples:
                    if sample is not None:
                        self.last[cid] = sample
                    self._deliver(cid, sample)
            await trio.sleep(INTERVAL)

    def _deliver(self, cid: str, sample: Sample | None) -> None:
        for ch in list(self._subs.get(cid, ())):
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                ch.send_nowait(sample)  # a reader that has not taken the last one skips this

    async def stream(self, c: Container, *, stream: bool) -> AsyncIterator[dict[str, Any]]:
        """The stats objects (JSON-ready, v1.21+ shape; the API layer shapes older ones)."""
        ident = {"name": c.name, "id": c.id}
        prev = self.last.get(c.id)
        if prev is None or time.monotonic() - prev.at > FRESH:
            prev = await self._sample(c)
            if prev is not None and not stream:
                await trio.sleep(PRE_SAMPLE)
        cur = await self._sample(c)
        if cur is None:
            yield _doc(empty_sample(), prev) | ident
            return
        self.last[c.id] = cur
        yield _doc(cur, prev) | ident
        if not stream:
            return
        send, recv = trio.open_memory_channel[Sample | None](1)
        self._containers[c.id] = c
        self._subs.setdefault(c.id, set()).add(send)
        self._wake.set()
        try:
            async with recv:
                async for sample in recv:
                    if sample is None:
                        return
                    yield _doc(sample, cur) | ident
                    cur = sample
        finally:
            subs = self._subs.get(c.id)
            if subs is not None:
                subs.discard(send)
                if not subs:
                    del self._subs[c.id]
                    self._containers.pop(c.id, None)

    def forget(self, c: Container) -> None:
        self.last.pop(c.id, None)


def _doc(cur: Sample, prev: Sample | None) -> dict[str, Any]:
    pre = prev.doc["cpu_stats"] if prev is not None else _cpu(
        CgroupStats(None, None, None, None), 0)
    out = {"read": rfc3339_nano(cur.read_ns) if cur.read_ns else "0001-01-01T00:00:00Z",
           "precpu_stats": pre}
    out.update(cur.doc)
    return out
