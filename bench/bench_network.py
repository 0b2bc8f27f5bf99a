"""Networks: a container's life on the default bridge, the network's own cost, and TCP through
a published port beside the same bytes read straight over the veth.

* **bridge cycle**: create+start+wait+remove of a ``true`` container on the default bridge,
  median of 50 (target <= 180 ms; reference engine 376 ms). Floor: the same cycle with
  NetworkMode none.
* **network setup+teardown**: the median bridge cycle minus the median ``none`` cycle.
* **published port**: a container writes 200 MB into ``nc -l`` on port 80, published on
  127.0.0.1; the host reads it through the userland proxy. Floor: the same read from the
  container's address over the veth, no proxy (target >= 50 % of it).
"""

from __future__ import annotations

import json
import socket
import statistics
import time
from typing import Any

from bench.bench_containers import IMAGE, Client, _check, _cycle, _import_busybox
from bench.context import Context
from bench.harness import Figure, Outcome, Target

CYCLES = 50
NBYTES = 200_000_000
MB = 1e6


def _serve_once(c: Client, publish: bool) -> tuple[str, dict[str, Any]]:
    """A container that writes NBYTES to the first client of its port 80."""
    hc: dict[str, Any] = {}
    if publish:
        hc["PortBindings"] = {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}
    body = {"Image": IMAGE, "Cmd": ["sh", "-c", f"head -c {NBYTES} /dev/zero | nc -l -p 80"],
            "ExposedPorts": {"80/tcp": {}}, "HostConfig": hc}
    status, raw = c.call("POST", "/v1.23/containers/create", body)
    _check(status, raw, 201, "create the server")
    cid = json.loads(raw)["Id"]
    status, raw = c.call("POST", f"/v1.23/containers/{cid}/start")
    _check(status, raw, 204, "start the server")
    status, raw = c.call("GET", f"/v1.23/containers/{cid}/json")
    return cid, json.loads(raw)["NetworkSettings"]


def _read_all(addr: tuple[str, int]) -> float:
    """MB/s of reading ``addr`` to its EOF (retrying while nc is not listening yet)."""
    deadline = time.monotonic() + 20
    while True:
        s = socket.create_connection(addr, timeout=60)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        buf = bytearray(1 << 20)
        t0 = time.perf_counter()
        total = 0
        with s:
            while n := s.recv_into(buf):
                total += n
        if total or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    if total < NBYTES:
        raise RuntimeError(f"read {total} of {NBYTES} bytes from {addr}")
    return total / MB / seconds


def _throughput(c: Client, publish: bool) -> float:
    cid, ns = _serve_once(c, publish)
    try:
        if publish:
            port = int(ns["Ports"]["80/tcp"][0]["HostPort"])
            return _read_all(("127.0.0.1", port))
        return _read_all((ns["IPAddress"], 80))
    finally:
        c.call("DELETE", f"/v1.23/containers/{cid}?force=1")


def network(ctx: Context) -> Outcome:
    """Bridge container cycle beside NetworkMode none, and TCP through the port proxy beside
    the veth."""
    c = Client(ctx.daemon.socket)
    try:
        _import_busybox(c)
        for mode in ("bridge", "none"):  # warm-up
            _cycle(c, mode)
        runs = ctx.scaled(CYCLES, 5)
        bridge = [_cycle(c, "bridge") for _ in range(runs)]
        none = [_cycle(c, "none") for _ in range(runs)]
        direct = max(_throughput(c, publish=False) for _ in range(2))
        proxied = max(_throughput(c, publish=True) for _ in range(2))
    finally:
        c.close()
    ms = 1000.0
    b, n = statistics.median(bridge) * ms, statistics.median(none) * ms
    out = Outcome(details={"bridge_cycle_ms": [round(x * ms, 1) for x in bridge],
                           "none_cycle_ms": [round(x * ms, 1) for x in none],
                           "direct_MB_s": round(direct, 1), "proxied_MB_s": round(proxied, 1)})
    out.figures += [
        Figure("network", "create+start+wait+remove on the bridge (median)", b, "ms",
               Target("<=", 180.0), floor=n,
               note=f"median of {runs}; floor: NetworkMode none; reference engine 376 ms"),
        Figure("network", "network setup+teardown per container (median)", b - n, "ms",
               note="bridge cycle minus none cycle"),
        Figure("network", "TCP through a published port (userland proxy)", proxied, "MB/s",
               Target(">=", direct * 0.5), floor=direct,
               note=f"floor: the same 200 MB read over the veth; target 50 % of it; "
                    f"{proxied / direct * 100:.0f} %"),
    ]
    return out
