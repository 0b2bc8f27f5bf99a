"""Event subscribers that note when each event reaches each of them, run as a process of their
own (the daemon's fan-out is measured, not the benchmark's reading):

    python -m bench.fanout --socket PATH --subs N --events K --action tag [--timeout S]

1. Opens N streams (``GET /v1.23/events``), each up to its response head, one after another.
2. Prints ``{"ready": N}``, then reads all streams in one epoll loop, de-chunks them, and for
   every event line whose ``Action`` is the one asked for notes ``time.time_ns()`` when the
   line's last byte was read, until every subscriber has K such events or the timeout passed.
3. Prints one JSON line: per event (keyed by the daemon's ``timeNano``, the producer's clock,
   the same CLOCK_REALTIME on one host), how many subscribers got it and the first and last
   arrival.

Works against any engine speaking the Docker API: only the Action, timeNano and the chunked
framing are relied on.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import read_head

REQUEST = b"GET /v1.23/events HTTP/1.1\r\nHost: docker\r\nUser-Agent: svc-bench\r\n\r\n"


@dataclass
class Stream:
    """One subscriber: raw bytes in, de-chunked lines out."""

    sock: socket.socket
    raw: bytearray = field(default_factory=bytearray)
    body: bytearray = field(default_factory=bytearray)
    chunk_left: int = 0  # body bytes still to come in the current chunk (+2 for its CRLF)
    seen: dict[int, int] = field(default_factory=dict)  # timeNano -> arrival ns
    ended: bool = False

    def feed(self, data: bytes, now: int, action: str) -> None:
        self.raw += data
        while self.raw:
            if self.chunk_left:
                take = min(self.chunk_left, len(self.raw))
                self.body += self.raw[:take]
                del self.raw[:take]
                self.chunk_left -= take
                continue
            end = self.raw.find(b"\r\n")
            if end < 0:
                break
            line = bytes(self.raw[:end]).strip()
            del self.raw[: end + 2]
            if not line:  # the CRLF closing a chunk
                continue
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.ended = True
                break
            self.chunk_left = size
        self._lines(now, action)

    def _lines(self, now: int, action: str) -> None:
        while (end := self.body.find(b"\n")) >= 0:
            line = bytes(self.body[:end])
            del self.body[: end + 1]
            if not line.strip():
                continue
            ev = json.loads(line)
            if ev.get("Action", ev.get("status")) == action:
                self.seen[int(ev["timeNano"])] = now


def subscribe(path: Path) -> Stream:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30.0)
    sock.connect(str(path))
    sock.sendall(REQUEST)
    head, rest = read_head(sock)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET /events answered {head.splitlines()[0]!r}")
    if b"chunked" not in head.lower():
        raise RuntimeError("the events stream is not chunked")
    stream = Stream(sock)
    stream.feed(rest, time.time_ns(), "")
    sock.setblocking(False)
    return stream


def read_all(streams: list[Stream], events: int, action: str, timeout: float) -> bool:
    sel = selectors.DefaultSelector()
    for s in streams:
        sel.register(s.sock, selectors.EVENT_READ, s)
    deadline = time.monotonic() + timeout
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # every ready socket read (and its arrival noted) before any is parsed: the
            # parsing of one subscriber's bytes never delays the arrival time of the next
            got = []
            for key, _ in sel.select(timeout=left):
                data = key.data.sock.recv(65536)
                got.append((key.data, data, time.time_ns()))
            for s, data, now in got:
                if data:
                    s.feed(data, now, action)
                else:
                    s.ended = True
                if s.ended or len(s.seen) >= events:
                    sel.unregister(s.sock)
        return True
    finally:
        sel.close()


def summary(streams: list[Stream]) -> list[dict[str, Any]]:
    by_event: dict[int, list[int]] = {}
    for s in streams:
        for t, arrival in s.seen.items():
            by_event.setdefault(t, []).append(arrival)
    return [{"time_nano": t, "subs": len(a), "first_ns": min(a), "last_ns": max(a)}
            for t, a in sorted(by_event.items())]


def main() -> int:
    p = argparse.ArgumentParser(description="event fan-out subscribers for bench/")
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--subs", type=int, required=True)
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--action", default="tag")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    streams = [subscribe(args.socket) for _ in range(args.subs)]
    print(json.dumps({"ready": len(streams)}), flush=True)
    finished = read_all(streams, args.events, args.action, args.timeout)
    for s in streams:
        s.sock.close()
    print(json.dumps({"finished": finished, "events": summary(streams)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
