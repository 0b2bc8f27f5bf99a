"""A closed-loop HTTP/1.1 load client over unix sockets: C keep-alive connections, each with
one request in flight, re-sending as soon as the previous response is complete.

It parses only what it must (the head's status and Content-Length), so the same client costs the
same against svcd and against the floor server. Latency is from just before the request is
written to the moment its last body byte has been read. Runs are bounded by a request count and
a time limit, whichever comes first.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import connect, exchange, parse_head, percentile

RESPONSE_TIMEOUT = 30.0


@dataclass
class LoadResult:
    latencies_ms: list[float]
    elapsed: float
    errors: int

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def rps(self) -> float:
        return self.requests / self.elapsed if self.elapsed > 0 else 0.0

    def pct(self, p: float) -> float:
        return percentile(self.latencies_ms, p)


@dataclass
class _Conn:
    sock: socket.socket
    buf: bytearray = field(default_factory=bytearray)
    sent_at: int = 0
    size: int | None = None  # full response size, once the head is in
    status: int = 0


def _complete(c: _Conn) -> bool:
    """Parse the head when it is in; True once the whole response has been read."""
    if c.size is None:
        end = c.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        c.status, length = parse_head(bytes(c.buf[:end]))
        c.size = end + 4 + (length or 0)
    return len(c.buf) >= c.size


def _send(c: _Conn, raw: bytes) -> None:
    c.sent_at = time.perf_counter_ns()
    if c.sock.send(raw) != len(raw):
        raise RuntimeError("short write of a request")


def _warm_up(socks: list[socket.socket], raw: bytes, warmup: int) -> None:
    for i in range(warmup):
        status, _, _ = exchange(socks[i % len(socks)], raw)
        if status != 200:
            raise RuntimeError(f"warm-up request answered {status}")


def run_load(path: Path, raw: bytes, *, conns: int, max_requests: int, max_seconds: float,
             warmup: int = 200, on_start: Callable[[], None] | None = None) -> LoadResult:
    """Warm up, call ``on_start`` (e.g. to read the server's CPU time), then measure."""
    socks = [connect(path) for _ in range(conns)]
    sel = selectors.DefaultSelector()
    try:
        _warm_up(socks, raw, warmup)
        if on_start is not None:
            on_start()
        return _measure(sel, [_Conn(s) for s in socks], raw, max_requests, max_seconds)
    finally:
        sel.close()
        for s in socks:
            s.close()


def _measure(sel: selectors.BaseSelector, conns: list[_Conn], raw: bytes, max_requests: int,
             max_seconds: float) -> LoadResult:
    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    issued = 0
    for c in conns:
        c.sock.setblocking(False)
        sel.register(c.sock, selectors.EVENT_READ, c)
        _send(c, raw)
        issued += 1
    in_flight = len(conns)
    while in_flight:
        events = sel.select(timeout=RESPONSE_TIMEOUT)
        if not events:
            raise TimeoutError(f"no response within {RESPONSE_TIMEOUT:.0f} s")
        for key, _ in events:
            c = key.data
            data = c.sock.recv(262144)
            if not data:
                raise ConnectionError("the server closed a keep-alive connection")
            c.buf += data
            if not _complete(c):
                continue
            latencies.append((time.perf_counter_ns() - c.sent_at) / 1e6)
            errors += c.status != 200
            del c.buf[: c.size]
            c.size = None
            if issued < max_requests and time.perf_counter() < deadline:
                _send(c, raw)
                issued += 1
            else:
                in_flight -= 1
    elapsed = time.perf_counter() - start
    latencies.sort()
    return LoadResult(latencies, elapsed, errors)
