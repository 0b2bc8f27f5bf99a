"""Event-stream subscribers for the events benchmarks, run as a process of their own:

    python -m bench.subscribers --socket PATH --subs N --expect E [--timeout S]

1. Opens N unix-socket connections; each sends ``GET /v1.23/events`` and reads the response head.
   svcd registers the subscriber before the head goes out, so from then on nothing is missed.
2. Prints ``{"ready": N}`` on stdout, then reads all N streams in one epoll loop until each has
   E events, its stream ended (e.g. a cut-off), or the timeout passed.
3. Prints one JSON line: per subscriber, the events counted, when the first and last of them
   arrived (CLOCK_MONOTONIC ns, comparable across processes), and whether the stream ended with
   svcd's ``{"error": ...}`` line (the subscriber fell more than 4096 events behind and was
   dropped).

Reading is cheap by design. Every event is one JSON line ending in ``}\\n`` and JSON escapes
newlines inside strings, while the chunked framing only adds ``<hex>\\r\\n`` and ``\\r\\n``, so
counting ``b"}\\n"`` in the raw bytes counts events exactly; nothing is parsed.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import read_head

EVENT_END = b"}\n"
ERROR_MARK = b'{"error"'
LAST_CHUNK = b"\r\n0\r\n\r\n"
TAIL = 16
# The final error object is short; it is looked for in the last bytes of each read.
ERROR_WINDOW = 1024
READ_SIZE = 256 * 1024
EVENTS_REQUEST = b"GET /v1.23/events HTTP/1.1\r\nHost: docker\r\nUser-Agent: svc-bench\r\n\r\n"


@dataclass
class Counter:
    """One subscriber's stream: counts ``}\\n`` across reads without keeping the bytes."""

    sock: socket.socket
    lines: int = 0
    reads: int = 0
    first_ns: int = 0
    lines_at_first: int = 0
    last_ns: int = 0
    tail: bytes = b""
    error: bool = False
    ended: bool = False

    def feed(self, data: bytes, now: int) -> None:
        """One pass over ``data`` and no copies of it: only the edges are joined with the tail."""
        self.reads += 1
        new = data.count(EVENT_END)
        if self.tail.endswith(EVENT_END[:1]) and data.startswith(EVENT_END[1:]):
            new += 1  # a "}\n" split across two reads
        if new:
            if not self.first_ns:
                self.first_ns = now
                self.lines_at_first = new
            self.lines += new
            self.last_ns = now
        # The error object and the last chunk come at the very end of a stream.
        end = self.tail + data[-ERROR_WINDOW:]
        if ERROR_MARK in end:
            self.error = True
        if LAST_CHUNK in end:
            self.ended = True
        self.tail = end[-TAIL:]

    @property
    def events(self) -> int:
        return self.lines - 1 if self.error else self.lines

    def report(self) -> dict[str, Any]:
        return {"events": self.events, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "events_at_first": self.lines_at_first, "reads": self.reads,
                "cut_off": self.error,
                "ended": self.ended}


def subscribe(path: Path, timeout: float) -> Counter:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(path))
    sock.sendall(EVENTS_REQUEST)
    head, rest = read_head(sock)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET /events answered {head.splitlines()[0]!r}")
    counter = Counter(sock)
    if rest:
        counter.feed(rest, time.monotonic_ns())
    sock.setblocking(False)
    return counter


def done(c: Counter, expect: int) -> bool:
    return c.ended or c.events >= expect


def read_all(counters: list[Counter], expect: int, timeout: float) -> bool:
    """Read every stream until each is done; False if the timeout cut the run short."""
    sel = selectors.DefaultSelector()
    try:
        for c in counters:
            if not done(c, expect):
                sel.register(c.sock, selectors.EVENT_READ, c)
        deadline = time.monotonic() + timeout
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in sel.select(timeout=left):
                c = key.data
                data = c.sock.recv(READ_SIZE)
                if data:
                    c.feed(data, time.monotonic_ns())
                else:
                    c.ended = True
                if done(c, expect):
                    sel.unregister(c.sock)
        return True
    finally:
        sel.close()


def main() -> int:
    p = argparse.ArgumentParser(description="event-stream subscribers for bench/")
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--subs", type=int, required=True)
    p.add_argument("--expect", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args()
    counters = [subscribe(args.socket, 30.0) for _ in range(args.subs)]
    print(json.dumps({"ready": len(counters)}), flush=True)
    cpu0 = time.process_time()
    finished = read_all(counters, args.expect, args.timeout)
    cpu = time.process_time() - cpu0
    for c in counters:
        c.sock.close()
    print(json.dumps({"finished": finished, "cpu_s": cpu, "pid": os.getpid(),
                      "subs": [c.report() for c in counters]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
