"""Overlay networks across two hosts (issue 26): cross-host throughput and latency between
containers beside the floor (the same transfer and ping between the two host namespaces over
a plain VXLAN pair made by hand, without svc), the time until a new endpoint is reachable and
resolvable from the other host (target: p99 under 1 s), and overlay network create and
container start beside a bridge network's.

The hosts are network namespaces on an underlay bridge with etcd (``tests/support/hosts``),
with their own daemons; the benchmark's shared svcd is not used.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time

from bench.context import Context
from bench.harness import Figure, Outcome, Target
from tests.conftest import docker_cli
from tests.support.hosts import Cluster, cluster, ip

TRANSFER_MB = 200
PINGS = 50
NEW_ENDPOINTS = 20
CREATES = 10
FLOOR_VNI = 4000
FLOOR_NET = "192.168.77"


def _cli(url: str, *args: str) -> str:
    out = docker_cli(url, *args, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {out.stderr}")
    return out.stdout + out.stderr


def _seconds(text: str) -> float:
    """busybox time's ``real XmY.ZZs``."""
    m = re.search(r"real\s+(\d+)m\s*([\d.]+)s", text)
    if not m:
        raise RuntimeError(f"no timing in {text!r}")
    return int(m.group(1)) * 60 + float(m.group(2))


def _rtt(text: str) -> float:
    m = re.search(r"min/avg/max = [\d.]+/([\d.]+)/", text)
    if not m:
        raise RuntimeError(f"no round trip in {text!r}")
    return float(m.group(1))


def _floor(c: Cluster, mb: int) -> tuple[float, float]:
    """MB/s and ping RTT (ms) between host namespaces 0 and 1 over a plain VXLAN pair."""
    h0, h1 = c.hosts[0], c.hosts[1]
    for h, peer, last in ((h0, h1, 1), (h1, h0, 2)):
        ns = ["-n", h.netns]
        ip(*ns, "link", "add", "vxf", "type", "vxlan", "id", str(FLOOR_VNI), "dstport", "4789",
           "remote", peer.address, "local", h.address)
        ip(*ns, "link", "set", "vxf", "mtu", "1450", "up")
        ip(*ns, "addr", "add", f"{FLOOR_NET}.{last}/24", "dev", "vxf")
    server = subprocess.Popen(["ip", "netns", "exec", h1.netns, "busybox", "sh", "-c",
                               "sleep 600 | busybox nc -l -p 6000 > /dev/null"])
    try:
        time.sleep(0.5)
        out = subprocess.run(["ip", "netns", "exec", h0.netns, "busybox", "sh", "-c",
                              f"time sh -c 'head -c {mb * 1000000} /dev/zero | "
                              f"busybox nc {FLOOR_NET}.2 6000'"],
                             capture_output=True, text=True, timeout=300)
        rate = mb / _seconds(out.stderr + out.stdout)
        ping = subprocess.run(["ip", "netns", "exec", h0.netns, "busybox", "ping", "-c",
                               str(PINGS), "-i", "0.05", f"{FLOOR_NET}.2"],
                              capture_output=True, text=True, timeout=120)
        return rate, _rtt(ping.stdout)
    finally:
        server.kill()
        for h in (h0, h1):
            ip("-n", h.netns, "link", "del", "vxf", check=False)


def _median_ms(fn: object, n: int) -> float:
    times = []
    for i in range(n):
        t = time.monotonic()
        fn(i)  # type: ignore[operator]
        times.append((time.monotonic() - t) * 1000)
    return statistics.median(times)


def overlay(ctx: Context) -> Outcome:
    """Two hosts over VXLAN: throughput, latency, new-endpoint convergence, create/start."""
    mb = ctx.scaled(TRANSFER_MB, 20)
    out = Outcome()
    with cluster(2) as c:
        for i in range(2):
            c.start(i)
            c.busybox(i)
        u0, u1 = c.hosts[0].d.url, c.hosts[1].d.url
        floor_rate, floor_rtt = _floor(c, mb)
        _cli(u0, "network", "create", "-d", "overlay", "bench")
        time.sleep(0.5)
        _cli(u0, "run", "-d", "--name", "a", "--net", "bench", "busybox", "sleep", "3600")
        _cli(u1, "run", "-d", "--name", "b", "--net", "bench", "busybox", "sleep", "3600")
        _cli(u1, "exec", "-d", "b", "sh", "-c", "sleep 3600 | nc -l -p 5000 > /dev/null")
        time.sleep(1)
        took = _seconds(_cli(u0, "exec", "a", "sh", "-c",
                             f"time sh -c 'head -c {mb * 1000000} /dev/zero | nc b 5000'"))
        rtt = _rtt(_cli(u0, "exec", "a", "ping", "-c", str(PINGS), "-i", "0.05", "b"))
        # a new endpoint on host 1, until a container on host 0 resolves and reaches it
        waits, whole = [], []
        for i in range(ctx.scaled(NEW_ENDPOINTS, 5)):
            name = f"new{i}"
            probe = subprocess.Popen(
                ["docker", "-H", u0, "exec", "a", "sh", "-c",
                 f"until ping -c 1 -W 1 {name} >/dev/null 2>&1; do :; done"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            asked = time.monotonic()
            _cli(u1, "run", "-d", "--name", name, "--net", "bench", "busybox", "sleep", "600")
            started = time.monotonic()
            probe.wait(30)
            done = time.monotonic()
            waits.append((done - started) * 1000)
            whole.append((done - asked) * 1000)
        waits.sort()
        p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
        ov_create = _median_ms(lambda i: _cli(u0, "network", "create", "-d", "overlay",
                                              f"oc{i}"), ctx.scaled(CREATES, 3))
        br_create = _median_ms(lambda i: _cli(u0, "network", "create", f"bc{i}"),
                               ctx.scaled(CREATES, 3))
        ov_start = _median_ms(lambda i: _cli(u0, "run", "-d", "--net", "bench", "busybox",
                                             "sleep", "600"), ctx.scaled(CREATES, 3))
        br_start = _median_ms(lambda i: _cli(u0, "run", "-d", "--net", "bc0", "busybox",
                                             "sleep", "600"), ctx.scaled(CREATES, 3))
        for u in (u0, u1):
            ids = _cli(u, "ps", "-aq").split()
            if ids:
                _cli(u, "rm", "-f", *ids)
    out.details.update(transfer_mb=mb, new_endpoint_ms=waits, run_to_reachable_ms=whole)
    out.figures += [
        Figure("overlay", "container to container across hosts", mb / took, "MB/s",
               floor=floor_rate, note="floor: a plain VXLAN pair between the hosts"),
        Figure("overlay", "ping RTT across hosts", rtt, "ms", floor=floor_rtt),
        Figure("overlay", "new endpoint reachable by name from the other host, p99", p99,
               "ms", Target("<=", 1000.0),
               note=f"after docker run returns; from its start: median "
                    f"{statistics.median(whole):.0f} ms, max {max(whole):.0f} ms"),
        Figure("overlay", "network create, overlay", ov_create, "ms",
               note=f"bridge: {br_create:.0f} ms"),
        Figure("overlay", "docker run -d on an overlay", ov_start, "ms",
               note=f"on a bridge network: {br_start:.0f} ms"),
    ]
    return out
