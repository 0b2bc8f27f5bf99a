"""Reading json-file logs back for ``docker logs``: tail, since, follow and stdcopy framing.

Files are read oldest first (``path.N`` ... ``path.1``, then ``path``; ``path.N.gz`` when
compressed, the plain name winning if a crash left both), in 256 KiB blocks of whole lines. A torn
last line (a crash mid-write) is not a line yet and is left alone.

Each block is parsed and framed by ``logparse`` (fast paths for the writer's exact record
shape).

As in dockerd, ``tail`` counts lines of both streams before ``stdout``/``stderr`` filter them,
and ``since`` is applied per record after ``tail`` (whole files older than it are skipped, a
gzipped one by its ``lastTime`` header). The files are opened as one consistent set before
reading, so a rotation meanwhile neither skips a file nor reads one twice.

:func:`read_logs` and :func:`read_framed` block (call them from a worker thread); :func:`follow`
and :func:`follow_framed` are async and do their reads in worker threads.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import re
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import NamedTuple

from svc.storage.jsonlog.writer import LogFileRef
from svc.wire.jsonlog_parse import LogRecord, parse_line, to_frames, to_records
from svc.wire.stdcopy import STDERR, STDOUT
from svc.wire.timefmt import parse_timestamp_ns

log = logging.getLogger("svc.logreader")

BLOCK = 1 << 18  # measured: 256 KiB blocks stay in cache; 1 MiB ones run slower
POLL_INTERVAL = 0.05
_File = gzip.GzipFile | io.FileIO | io.RawIOBase


# -- files -------------------------------------------------------------------------------------


class _LogFile(NamedTuple):
    raw: io.FileIO  # open, so that rotation cannot swap it for another file
    gz: bool
    path: Path  # its name when opened
    end: int | None = None  # read a plain file only up to here (a writer's position)
    start: int = 0  # and from here

    def reader(self) -> _File:
        """A reader from the start of the (decompressed) contents."""
        self.raw.seek(0)
        if self.gz:
            return gzip.GzipFile(fileobj=self.raw, mode="rb")
        return self.raw if self.end is None else _Bounded(self.raw, self.end)


class _Bounded(io.RawIOBase):
    """A plain file read only up to ``end``."""

    def __init__(self, raw: io.FileIO, end: int) -> None:
        super().__init__()
        self.raw, self.end = raw, end

    def readable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        return self.raw.seek(pos, whence)

    def read(self, size: int = -1) -> bytes:
        left = self.end - self.raw.tell()
        return self.raw.read(left if size < 0 else min(size, left)) if left > 0 else b""


LogFiles = list[_LogFile]  # an opened set of a log's files, oldest first


def _listing(path: Path) -> list[tuple[Path, bool, int]]:
    """``(file, gzipped, inode)`` of the log's files, oldest first, the live one last."""
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)(\.gz)?")
    rotated: dict[int, tuple[Path, bool, int]] = {}
    live: list[tuple[Path, bool, int]] = []
    try:
        entries = list(os.scandir(path.parent))
    except FileNotFoundError:
        return []
    for e in entries:
        if e.name == path.name:
            live = [(path, False, e.inode())]
        elif (m := pattern.fullmatch(e.name)) and (int(m[1]) not in rotated or not m[2]):
            rotated[int(m[1])] = (Path(e.path), bool(m[2]), e.inode())  # plain beats .gz
    return [rotated[i] for i in sorted(rotated, reverse=True)] + live


def log_files(path: Path) -> list[tuple[Path, bool]]:
    """The log's files, oldest first, as ``(path, gzipped)``; the live file last if present."""
    return [(p, gz) for p, gz, _ in _listing(path)]


def _open_all(path: Path) -> list[_LogFile]:
    """Open the log's files as one consistent set, oldest first.

    Listing then opening races with rotation, so the directory is listed again once all are
    open: if a name now holds another inode, everything is closed and tried again.
    """
    for _ in range(100):
        listed, raws = _listing(path), list[io.FileIO]()
        try:
            for p, _, _ in listed:
                raws.append(open(p, "rb", buffering=0))  # noqa: SIM115
            if _listing(path) == listed and all(
                os.fstat(r.fileno()).st_ino == i for r, (_, _, i) in zip(raws, listed, strict=True)
            ):
                return [_LogFile(r, gz, p) for r, (p, gz, _) in zip(raws, listed, strict=True)]
        except FileNotFoundError:
            pass
        for r in raws:
            r.close()
    raise OSError(f"{path}: the log files kept rotating while being opened")


def _blocks(f: _File, skip_lines: int = 0) -> Iterator[bytes]:
    """Whole lines from ``f``'s position in blocks of about ``BLOCK`` bytes."""
    carry = b""
    while chunk := f.read(BLOCK):
        chunk = carry + chunk if carry else chunk
        cut = chunk.rfind(b"\n") + 1
        block, carry = (chunk, b"") if cut == len(chunk) else (chunk[:cut], chunk[cut:])
        if skip_lines and block:
            n = block.count(b"\n")
            block = b"" if n <= skip_lines else block.split(b"\n", skip_lines)[-1]
            skip_lines = max(0, skip_lines - n)
        if block:
            yield block


def _read_plan(plan: list[tuple[_LogFile, int, int]]) -> Generator[bytes, None, None]:
    for lf, offset, skip in plan:
        try:
            f = lf.reader()
            f.seek(offset)
            yield from _blocks(f, skip)
        except (OSError, EOFError, zlib.error) as exc:
            log.warning("log file %s is damaged: %s", lf.path, exc)


def _tail_start(lf: _LogFile, need: int) -> tuple[int, int, int]:
    """Where the last ``need`` lines of a file begin: ``(offset, skip_lines, lines_found)``.

    A plain file is read backwards from its last newline; ``need`` 0 gives the end of its
    whole lines. A gzipped one is counted through (it cannot be read backwards).
    """
    if lf.gz:
        total = sum(block.count(b"\n") for block in _blocks(lf.reader()))
        return 0, max(0, total - need), min(total, need)
    f = lf.raw
    pos, seen = f.seek(0, os.SEEK_END) if lf.end is None else lf.end, 0
    while pos > 0:
        start = max(0, pos - BLOCK)
        f.seek(start)
        buf = f.read(pos - start)
        if seen + buf.count(b"\n") > need:  # the (need+1)-th newline from the end is here
            i = len(buf)
            while seen <= need:
                i = buf.rfind(b"\n", 0, i)
                seen += 1
            return start + i + 1, 0, need
        seen += buf.count(b"\n")
        pos = start
    return 0, 0, seen


def _last_time_ns(lf: _LogFile) -> int | None:
    """The time of a file's last record (gzip: moby's ``lastTime`` header), if readable."""
    fd = lf.raw.fileno()
    if lf.gz:
        head = os.pread(fd, 12, 0)
        if len(head) < 12 or head[:3] != b"\x1f\x8b\x08" or not head[3] & 4:
            return None
        meta = json.loads(os.pread(fd, int.from_bytes(head[10:12], "little"), 12))
        return parse_timestamp_ns(meta["lastTime"])
    size = os.fstat(fd).st_size if lf.end is None else lf.end
    lines = os.pread(fd, min(size, 65536), max(0, size - 65536)).split(b"\n")[:-1]
    rec = parse_line(lines[-1]) if lines else None
    return None if rec is None else rec[2]


def _plan(
    files: list[_LogFile], tail: int | None, since_ns: int
) -> list[tuple[_LogFile, int, int]]:
    """``(file, offset, skip_lines)`` to read, oldest first."""
    plan = [(lf, lf.start, 0) for lf in files]
    if tail is not None and tail >= 0:
        plan, need = [], tail
        for lf in reversed(files):
            if need <= 0:
                break
            try:
                offset, skip, found = _tail_start(lf, need)
            except (OSError, EOFError, zlib.error):
                continue
            plan.insert(0, (lf, offset, skip))
            need -= found
    if since_ns > 0:
        kept = []
        for entry in plan:
            try:
                last = _last_time_ns(entry[0])
            except (OSError, ValueError, KeyError, TypeError):
                last = None
            if last is None or last >= since_ns:
                kept.append(entry)
        plan = kept
    return plan


def snapshot(path: Path, live: LogFileRef, end: int) -> LogFiles:
    """The log's files as a writer's position leaves them: the rotated ones, then the live
    file (``live``) up to ``end``, for a reader that takes over from there by other means.

    Blocking, but only a listing and a few opens; the caller must keep the writer from
    writing meanwhile (it holds the event loop the writer runs in), or the set may not match
    the position. Pass the result to :func:`read_logs` or :func:`read_framed`, which close it.
    """
    older: list[_LogFile] = []
    for lf in _open_all(path):
        if os.fstat(lf.raw.fileno()).st_ino == live.inode or len(older) > 1000:
            lf.raw.close()
            continue
        older.append(lf)
    return [*older, _LogFile(live.open(), False, path, end)]


def span(path: Path, live: LogFileRef, start: int, end: int) -> LogFiles:
    """The part of one writer's file between two of its positions, for :func:`read_framed`
    or :func:`read_logs` (without ``tail``)."""
    return [_LogFile(live.open(), False, path, end, start)]


def _read(source: Path | LogFiles, tail: int | None,
          since_ns: int) -> Generator[bytes, None, None]:
    files = _open_all(source) if isinstance(source, Path) else source
    try:
        yield from _read_plan(_plan(files, tail, since_ns))
    finally:
        for lf in files:
            lf.raw.close()


def _want(stdout: bool, stderr: bool) -> int:
    return (STDOUT if stdout else 0) | (STDERR if stderr else 0)


def read_logs(
    path: Path | LogFiles, *, stdout: bool, stderr: bool, since_ns: int = 0,
    tail: int | None = None,
) -> Iterator[LogRecord]:
    """The log's records, oldest first.

    Args:
        path: the live log file (rotated siblings are found next to it), or the files of a
            :func:`snapshot`.
        stdout, stderr: which streams to return.
        since_ns: skip records stamped before this Unix time in ns (0: no limit).
        tail: only the last ``tail`` lines, counted over both streams as dockerd does
            (``None`` or negative: all).

    The files stay open until the iterator is exhausted or closed. About 0.5-1 M records/s;
    use :func:`read_framed` to stream them to a client.
    """
    want = _want(stdout, stderr)
    if want and tail != 0:
        for block in _read(path, tail, since_ns):
            yield from to_records(want, since_ns, block)


def read_framed(
    path: Path | LogFiles, *, stdout: bool, stderr: bool, since_ns: int = 0,
    tail: int | None = None, timestamps: bool = False,
) -> Iterator[bytes]:
    """Like :func:`read_logs`, as ready-made stdcopy frames, about 150 KiB per chunk.

    One frame per record, as dockerd sends them; with ``timestamps`` each payload starts with
    the record's nine-digit RFC 3339 time and a space (``docker logs -t``).
    """
    want = _want(stdout, stderr)
    if want and tail != 0:
        for block in _read(path, tail, since_ns):
            if chunk := to_frames(want, since_ns, timestamps, block):
                yield chunk
