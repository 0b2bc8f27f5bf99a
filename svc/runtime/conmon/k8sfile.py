"""conmon's ``k8s-file`` log lines: ``<RFC 3339 time, ns> <stdout|stderr> <F|P> <bytes>\\n``.

conmon writes what it reads from the container's pipes (or pty) as such lines: a full line
(``F``) had a newline, which the line's own newline stands for; a partial one (``P``) did not.
``parse`` turns one line back into what the container wrote: the stream, the bytes exactly, and
the time conmon read them (a record of the time, in ns since the epoch).
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass


class BadLine(ValueError):
    """A line that is not conmon's (a file that is not its log, or a torn write)."""


@dataclass(frozen=True, slots=True)
class Record:
    ts_ns: int
    stream: str  # "stdout" or "stderr"
    data: bytes  # as the container wrote it (a full line ends with b"\n")


def parse_time(text: bytes) -> int:
    """ns since the epoch of ``2026-11-28T09:37:30.428929233+00:00`` (or ``Z``; the fraction
    is optional and may have fewer digits).

    Raises:
        BadLine: not such a time.
    """
    try:
        base = calendar.timegm((int(text[0:4]), int(text[5:7]), int(text[8:10]),
                                int(text[11:13]), int(text[14:16]), int(text[17:19]), 0, 0, 0))
        rest = text[19:]
        frac = 0
        if rest[:1] == b".":
            digits = 1
            while digits < len(rest) and rest[digits:digits + 1].isdigit():
                digits += 1
            frac = int(rest[1:digits].ljust(9, b"0")[:9])
            rest = rest[digits:]
        offset = 0
        if rest in (b"Z", b"z"):
            pass
        elif len(rest) == 6 and rest[:1] in (b"+", b"-") and rest[3:4] == b":":
            offset = (int(rest[1:3]) * 60 + int(rest[4:6])) * 60
            offset = -offset if rest[:1] == b"-" else offset
        else:
            raise ValueError(rest)
    except (ValueError, IndexError) as exc:
        raise BadLine(f"not a time: {text[:40]!r}") from exc
    return (base - offset) * 1_000_000_000 + frac


def parse(line: bytes) -> Record:
    """One log line (with or without its newline) as a ``Record``.

    Raises:
        BadLine: the line is not conmon's.
    """
    if line.endswith(b"\n"):
        line = line[:-1]
    ts, sp1, rest = line.partition(b" ")
    stream, sp2, rest = rest.partition(b" ")
    tag, sp3, data = rest.partition(b" ")
    if not (sp1 and sp2) or stream not in (b"stdout", b"stderr") or tag not in (b"F", b"P"):
        raise BadLine(f"not a conmon log line: {line[:60]!r}")
    if not sp3 and data:  # (an empty partial or full line has nothing after its tag)
        raise BadLine(f"not a conmon log line: {line[:60]!r}")
    return Record(parse_time(ts), stream.decode(), data + b"\n" if tag == b"F" else data)


def format_line(rec: Record) -> bytes:
    """The line conmon would write for ``rec`` (one line of the container's output at most;
    for tests and for the migration of a record format)."""
    full = rec.data.endswith(b"\n")
    data = rec.data[:-1] if full else rec.data
    secs, ns = divmod(rec.ts_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)).encode()
    return b"%s.%09d+00:00 %s %s %s\n" % (stamp, ns, rec.stream.encode(),
                                         b"F" if full else b"P", data)
