"""Reading back a shim's spool: what the container wrote while no daemon was connected, as
records of a 24-byte head (u8 stream: 1 stdout, 2 stderr; 3 zero bytes; u32 length; u64
CLOCK_REALTIME ns; u64 the stream's offset of the first byte; little endian) and the
bytes. What the daemon has read and kept is punched out of the file
(``FALLOC_FL_PUNCH_HOLE``): the offsets stay, the disk space goes."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from svc.runtime.holes import punch_hole

HEAD = struct.Struct("<B3xIQQ")
STREAMS = {1: "stdout", 2: "stderr"}
READ_SIZE = 1 << 20


@dataclass(frozen=True)
class Record:
    stream: str
    data: bytes
    ts_ns: int
    end: int  # the spool's offset after this record
    at: int  # the stream's offset of the first byte (gaps: what the full spool dropped)


def records(path: Path, start: int, stop: int) -> Iterator[Record]:
    """The records between offsets ``start`` and ``stop`` (a size the shim reported: whole
    records). Blocking reads, a MiB at a time. A record cut short (the file was changed from
    outside) ends the reading."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        buf, i = b"", 0  # unread bytes are buf[i:]; they start at offset ``at``
        at = pos = start  # ``pos``: the next offset to read from the file
        while at < stop:
            have = len(buf) - i
            need = HEAD.size if have < HEAD.size else HEAD.size + HEAD.unpack_from(buf, i)[1]
            if have < need:
                if pos >= stop:
                    return
                chunk = os.pread(fd, max(READ_SIZE, need - have), pos)
                if not chunk:
                    return
                pos += len(chunk)
                buf, i = buf[i:] + chunk, 0
                continue
            kind, length, ts, first = HEAD.unpack_from(buf, i)
            data = buf[i + HEAD.size : i + HEAD.size + length]
            i += HEAD.size + length
            at += HEAD.size + length
            yield Record(STREAMS.get(kind, "stdout"), data, ts, at, first)
    finally:
        os.close(fd)


def punch(path: Path, upto: int) -> None:
    """Give back the disk space of the spool's first ``upto`` bytes. Blocking."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        punch_hole(fd, 0, upto)
    finally:
        os.close(fd)
