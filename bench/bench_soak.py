"""A connection soak: 100,000 requests from 50 clients that open and drop connections the ways
real clients do, with svcd's descriptors and RSS before and after (both should stay flat).

How it is measured: 50 client threads loop until the request budget is spent. Each turn opens
a unix-socket connection and does one of: 1-5 keep-alive requests (``GET /_ping`` or
``GET /v1.23/version``) then a plain close (what the docker CLI and http.client do); the same
with ``Connection: close`` on the last request; a request then a reset (``SO_LINGER`` 0)
before reading the answer; half a request head then a close; a close without a request. The
descriptor count (``/proc/PID/fd``) and ``VmRSS`` are read after a warm-up round and again
once the soak is over and the last closes have settled (up to 5 s).

Targets: descriptors after <= before + 2; RSS growth <= 16 MiB. Before issue 24, every
plain close of an idle keep-alive connection left its descriptor open for ever.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

from bench.context import Context
from bench.harness import Figure, Outcome, Target, exchange, proc_status_kib, request_bytes

REQUESTS = 100_000
CLIENTS = 50
FD_SLACK = 2
RSS_GROWTH_MIB = 16.0
PATHS = ("/_ping", "/v1.23/version")
CLOSE = request_bytes("GET", "/_ping").replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class _Budget:
    def __init__(self, total: int) -> None:
        self.left = total
        self.lock = threading.Lock()
        self.done = self.errors = self.connections = 0

    def take(self, n: int) -> int:
        with self.lock:
            n = min(n, self.left)
            self.left -= n
            return n


def _turn(path: str, rng: random.Random, budget: _Budget) -> None:
    kind = rng.random()
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(path)
        with budget.lock:
            budget.connections += 1
        if kind < 0.05:
            return  # a connection that never asks anything
        if kind < 0.10:
            s.sendall(b"GET /_pi")  # half a head, then gone
            return
        n = budget.take(rng.randint(1, 5))
        for i in range(n):
            last = i == n - 1
            if last and kind < 0.20:  # a request, then a reset before the answer is read
                s.sendall(request_bytes("GET", rng.choice(PATHS)))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                break
            raw = CLOSE if last and kind < 0.40 else request_bytes("GET", rng.choice(PATHS))
            status, head, _ = exchange(s, raw)
            if status != 200:
                raise ConnectionError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        with budget.lock:
            budget.done += n


def _client(path: str, seed: int, budget: _Budget) -> None:
    rng = random.Random(seed)
    while budget.left > 0:
        try:
            _turn(path, rng, budget)
        except (OSError, ValueError):
            with budget.lock:
                budget.errors += 1


def soak(ctx: Context) -> Outcome:
    """100,000 requests from 50 clients opening and dropping connections: svcd's descriptors
    and RSS before and after (targets: flat)."""
    pid, path = ctx.daemon.pid, str(ctx.daemon.socket)
    warm = _Budget(500)
    _client(path, 0, warm)
    time.sleep(0.5)
    fds0, rss0 = _fds(pid), proc_status_kib(pid)["VmRSS"] / 1024
    budget = _Budget(ctx.scaled(REQUESTS, 1000))
    start = time.monotonic()
    threads = [threading.Thread(target=_client, args=(path, i + 1, budget))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    deadline = time.monotonic() + 5
    while _fds(pid) > fds0 and time.monotonic() < deadline:
        time.sleep(0.1)
    fds1, rss1 = _fds(pid), proc_status_kib(pid)["VmRSS"] / 1024
    out = Outcome(details={"requests": budget.done, "connections": budget.connections,
                           "client_errors": budget.errors, "seconds": elapsed,
                           "fds_before": fds0, "fds_after": fds1,
                           "rss_before_mib": rss0, "rss_after_mib": rss1})
    out.figures += [
        Figure("soak", "requests/s (50 clients, connections dropped)", budget.done / elapsed,
               "req/s", note=f"{budget.connections} connections"),
        Figure("soak", "descriptors after, minus before", fds1 - fds0, "fds",
               Target("<=", FD_SLACK), note=f"{fds0} -> {fds1}"),
        Figure("soak", "VmRSS growth", rss1 - rss0, "MiB", Target("<=", RSS_GROWTH_MIB),
               note=f"{rss0:.0f} -> {rss1:.0f} MiB"),
    ]
    if budget.errors:
        out.warnings.append(f"soak: {budget.errors} client turns failed (answers other than "
                            "200, or closed early)")
    return out
