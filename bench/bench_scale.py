"""Scale and hostile load, each on a daemon of its own (so the shared daemon's later figures
are not skewed): network operations with 1 and with 100 networks present, the daemon's start
and stop with 100 networks and 500 containers, and svcd's memory after the fuzz run.

* **network create / remove** (median of 20 each): ``POST /networks/create`` with an explicit
  /24 and ``DELETE /networks/{id}``, first with one user network present, then with 100. The
  figure with 100 is set beside the one with 1 (the floor); target: at most 1.5x it plus 5 ms.
  Before the fix each create added one iptables run per existing network (20 s at 48).
* **start / stop with 100 networks and 500 containers**: the 500 are created (not started), a
  fifth of them on user networks; then SIGTERM (time to exit 0) and a start (time from spawn to
  the first ``/_ping`` answered). The floor is the same start of the daemon with nothing in it;
  target: start within 3 s (it took 45 s with 48 networks), stop within 5 s (106 s before).
* **RSS after a fuzz run**: the fuzz test's 4,000 schema-driven requests
  (``tests.support.fuzz``, same seed) against a fresh daemon; ``VmRSS`` 2.5 s before and 4.5 s
  after (the heap scavenger's rounds), and ``VmHWM``. Target: growth <= 64 MiB (it grew
  74 -> 176 MiB before).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import httpx
import trio

from bench.bench_containers import IMAGE, Client, _check, _import_busybox
from bench.context import Context
from bench.harness import Figure, Outcome, Target, proc_status_kib
from tests.conftest import http_client
from tests.support import fuzz
from tests.support.daemon import Daemon

NETWORKS = 100
CONTAINERS = 500
CYCLES = 20
MS = 1000.0


def _subnet(i: int) -> str:
    return f"10.198.{i}.0/24"


def _create_network(c: Client, name: str, i: int) -> str:
    status, raw = c.call("POST", "/v1.23/networks/create",
                         {"Name": name, "IPAM": {"Config": [{"Subnet": _subnet(i)}]}})
    _check(status, raw, 201, f"create the network {name}")
    return str(json.loads(raw)["Id"])


def _cycles(c: Client, runs: int) -> tuple[list[float], list[float]]:
    """Create and remove a network ``runs`` times: the create and the remove seconds."""
    creates, removes = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        nid = _create_network(c, "scale-probe", 250)
        t1 = time.perf_counter()
        status, raw = c.call("DELETE", f"/v1.23/networks/{nid}")
        t2 = time.perf_counter()
        _check(status, raw, 204, "remove the probe network")
        creates.append(t1 - t0)
        removes.append(t2 - t1)
    return creates, removes


def _restart_times(d: Daemon) -> tuple[float, float]:
    """SIGTERM to exit, then spawn to the first ``/_ping`` answered."""
    t0 = time.perf_counter()
    code = d.stop(timeout=120)
    stop = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"svcd exited with {code} on SIGTERM:\n{d.log()[-2000:]}")
    t0 = time.perf_counter()
    d.start(timeout=300)
    return stop, time.perf_counter() - t0


def _flat(floor: float) -> Target:
    """As good as flat: within 1.5x the figure with one network, plus 5 ms of noise."""
    return Target("<=", floor * 1.5 + 5.0)


def network_scale(ctx: Context) -> Outcome:
    """Network create/remove with 1 and 100 networks; start/stop with 100 networks and 500
    containers (targets: flat; start <= 3 s, stop <= 5 s)."""
    d = Daemon()
    try:
        t0 = time.perf_counter()
        d.start(timeout=60)
        empty_start = time.perf_counter() - t0
        c = Client(d.sock)
        try:
            _import_busybox(c)
            runs = ctx.scaled(CYCLES, 5)
            nets = [_create_network(c, "scale-0", 0)]
            _cycles(c, 2)  # warm-up
            c1, r1 = _cycles(c, runs)
            nets += [_create_network(c, f"scale-{i}", i) for i in range(1, NETWORKS)]
            c100, r100 = _cycles(c, runs)
            for i in range(CONTAINERS):
                mode = f"scale-{i % NETWORKS}" if i % 5 == 0 else "default"
                status, raw = c.call("POST", "/v1.23/containers/create", {
                    "Image": IMAGE, "Cmd": ["true"], "HostConfig": {"NetworkMode": mode}})
                _check(status, raw, 201, "create a container")
        finally:
            c.close()
        stop, start = _restart_times(d)
        c = Client(d.sock)
        try:
            status, raw = c.call("GET", "/v1.23/containers/json?all=1")
            _check(status, raw, 200, "list after the restart")
            if len(json.loads(raw)) != CONTAINERS:
                raise RuntimeError(f"{len(json.loads(raw))} containers after the restart")
            for nid in nets:  # bridges outlive a stopped daemon: remove them with the API
                status, raw = c.call("DELETE", f"/v1.23/networks/{nid}")
                _check(status, raw, 204, "remove a network")
        finally:
            c.close()
    finally:
        d.cleanup()
    m = statistics.median
    out = Outcome(details={
        "create_ms_1": [round(x * MS, 2) for x in c1], "create_ms_100": [round(x * MS, 2)
                                                                         for x in c100],
        "remove_ms_1": [round(x * MS, 2) for x in r1], "remove_ms_100": [round(x * MS, 2)
                                                                         for x in r100],
        "empty_start_s": round(empty_start, 3), "stop_s": round(stop, 3),
        "start_s": round(start, 3)})
    for what, one, hundred in (("create", c1, c100), ("remove", r1, r100)):
        floor, value = m(one) * MS, m(hundred) * MS
        out.figures.append(Figure(
            "network_scale", f"network {what} with {NETWORKS} networks (median)", value, "ms",
            _flat(floor), floor=floor,
            note=f"floor: the same with 1 network; median of {runs}; target 1.5x + 5 ms"))
    out.figures += [
        Figure("network_scale", f"start with {NETWORKS} networks, {CONTAINERS} containers",
               start, "s", Target("<=", 3.0), floor=empty_start,
               note="spawn to first /_ping; floor: an empty daemon's start; 45 s before"),
        Figure("network_scale", f"SIGTERM stop with {NETWORKS} networks, {CONTAINERS} "
               "containers", stop, "s", Target("<=", 5.0), note="106 s before"),
    ]
    return out


async def _fuzz(sock: Path, pid: int) -> tuple[int, int, int, list[tuple[int, str, str]]]:
    async with http_client(sock) as c:
        c.timeout = httpx.Timeout(60)
        ids = await fuzz.setup_objects(c)
        routes = await fuzz.routes(c)
    await trio.sleep(2.5)
    before = fuzz.rss(pid)
    bad = await fuzz.fuzz_requests(sock, ids, routes)
    await trio.sleep(4.5)
    after = fuzz.rss(pid)
    async with http_client(sock) as c:
        c.timeout = httpx.Timeout(60)
        for item in (await c.get("/containers/json", params={"all": "1"})).json():
            await c.delete(f"/containers/{item['Id']}", params={"force": "1", "v": "1"})
        for net in (await c.get("/networks")).json():
            if net["Name"] not in ("bridge", "host", "none"):
                await c.delete(f"/networks/{net['Id']}")
    return before, after, proc_status_kib(pid)["VmHWM"] * 1024, bad


def fuzz_rss(ctx: Context) -> Outcome:
    """svcd VmRSS after the fuzz test's 4,000 requests (target: growth <= 64 MiB)."""
    d = Daemon()
    try:
        d.start(timeout=60)
        assert d.proc is not None
        t0 = time.perf_counter()
        before, after, hwm, bad = trio.run(_fuzz, d.sock, d.proc.pid)
        seconds = time.perf_counter() - t0
    finally:
        d.cleanup()
    mib = 1 << 20
    out = Outcome(details={"before_MiB": before / mib, "after_MiB": after / mib,
                           "hwm_MiB": hwm / mib, "failures": bad[:20],
                           "seconds": round(seconds, 1)})
    if bad:
        out.warnings.append(f"{len(bad)} fuzz requests failed (5xx or no answer): {bad[:5]}")
    out.figures += [
        Figure("fuzz_rss", f"VmRSS growth over {fuzz.REQUESTS} fuzz requests",
               (after - before) / mib, "MiB", Target("<=", 64.0),
               note=f"{before / mib:.0f} -> {after / mib:.0f} MiB; 74 -> 176 MiB before"),
        Figure("fuzz_rss", "VmHWM (peak RSS) of the fuzzed daemon", hwm / mib, "MiB"),
    ]
    return out
