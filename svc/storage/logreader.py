"""Reading json-file logs back for ``docker logs``: tail, since, follow and stdcopy framing.

Files are read oldest first (``path.N`` ... ``path.1``, then ``path``; ``path.N.gz`` when
compressed, the plain name winning if a crash left both), in 256 KiB blocks of whole lines. A torn
last line (a crash mid-write) is not a line yet and is left alone; lines that do not parse are
skipped.

The speed comes from the writer's fixed record shape: when every line of a block has it (no
escapes but the final ``\\n``, nine-digit timestamps), the fields are sliced at fixed offsets by C
code, and :func:`read_framed` turns a block into one bytes object of stdcopy frames without a
Python-level step per record. When no times are needed and the block holds one stream, one
regex split cuts the texts out directly (:func:`_plain`), at about twice that speed. Other
blocks (escaped text, dockerd's own files, damage) go line by line through a regex and
``json.loads``.

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
import struct
import zlib
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from itertools import compress, repeat
from operator import add, and_, eq, ge, itemgetter, methodcaller
from pathlib import Path
from typing import NamedTuple, TypeVar

from svc.storage.jsonlog import MAX_LINE, LogFileRef, format_time
from svc.wire.stdcopy import STDERR, STDOUT
from svc.wire.timefmt import parse_timestamp_ns

log = logging.getLogger("svc.logreader")

BLOCK = 1 << 18  # measured: 256 KiB blocks stay in cache; 1 MiB ones run slower
POLL_INTERVAL = 0.05
_HDR = struct.Struct(">BxxxL")
_NAMES = ("", "stdout", "stderr")
T = TypeVar("T")
_File = gzip.GzipFile | io.FileIO | io.RawIOBase


class LogRecord(NamedTuple):
    stream: str  # "stdout" or "stderr"
    data: bytes  # the text as the container wrote it, with its "\n" unless partial
    time_ns: int


# The writer's exact line is {"log":"<X>\n","stream":"stdxxx","time":"<30 chars>"}: split at
# its newlines, a block's lines have their fields at fixed offsets from either end.
_STARTS = methodcaller("startswith", b'{"log":"')
_TEXT = itemgetter(slice(8, -62))
_MID = itemgetter(slice(-62, -32))  # \n","stream":"stdxxx","time":"
_MID_CODES = {b'\\n","stream":"stdout","time":"': STDOUT,
              b'\\n","stream":"stderr","time":"': STDERR}
_END = itemgetter(slice(-2, None))
_STAMP = itemgetter(slice(-32, -2))
_SECOND = itemgetter(slice(-32, -13))
_NANOS = itemgetter(slice(-12, -3))
_LINE_RE = re.compile(
    rb'\{"log":"([^"\\]*(?:\\.[^"\\]*)*)","stream":"(stdout|stderr)","time":"([^"]*)"\}'
)
_SECOND_RE = re.compile(rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")


class _Seconds(dict[bytes, int]):
    """``YYYY-MM-DDTHH:MM:SS`` -> Unix ns, computed once per distinct second."""

    def __missing__(self, key: bytes) -> int:
        m = _SECOND_RE.fullmatch(key)
        if not m:
            raise ValueError(f"bad time {key!r}")
        if len(self) > 100_000:
            self.clear()
        y, mo, d, h, mi, sec = map(int, m.groups())
        value = int(datetime(y, mo, d, h, mi, sec, tzinfo=UTC).timestamp()) * 1_000_000_000
        self[key] = value
        return value


class _Heads(dict[int, bytes]):
    """Frame headers by payload size, each after ``lead``; sizes are bounded by 16 KiB lines."""

    def __init__(self, code: int, lead: bytes, extra: int) -> None:
        super().__init__()
        self.code, self.lead, self.extra = code, lead, extra

    def __missing__(self, size: int) -> bytes:
        head = self.lead + _HDR.pack(self.code, size + self.extra)
        if size <= 4 * MAX_LINE:  # larger ones come only from other writers' files
            self[size] = head
        return head


_SECONDS = _Seconds()
_HEADS = {(c, nl, ts): _Heads(c, nl, len(nl) + ts)
          for c in (STDOUT, STDERR) for nl in (b"", b"\n") for ts in (0, 31)}


def _time_ns(t: bytes) -> int:
    if len(t) == 30 and t[19] == 0x2E and t[29] == 0x5A:
        return _SECONDS[t[:19]] + int(t[20:29])
    return parse_timestamp_ns(t.decode())


class _Block(NamedTuple):
    """A block's records as columns; a payload is ``data`` plus a newline if ``newline``."""

    codes: list[int]  # STDOUT / STDERR
    datas: list[bytes]
    newline: bool  # the fast path slices the text off before its escaped \n
    times: list[int] | None
    stamps: list[bytes] | None  # nine-digit RFC 3339, for timestamps=True


def _exact(block: bytes) -> tuple[list[bytes], list[bytes], list[int]] | None:
    """``(lines, texts, stream codes)`` of ``block`` if every line has the writer's exact
    shape, else None.

    Each line must start with ``{"log":"``, hold a stream's constant middle 62 bytes before
    its end (a time of another length, such as dockerd's trimmed ones, fails here) and end
    with ``"}``; and no text may hold a quote or a backslash (searched in all texts at once,
    at memory speed), so none needed unescaping. The block is split at its newlines: a
    one-byte split runs at memory speed, where splitting at the multi-byte record separator
    crawls over long runs of one character.
    """
    lines = block.split(b"\n")
    lines.pop()  # after the last newline
    if not lines or not all(map(_STARTS, lines)):
        return None
    mids = set(map(_MID, lines))
    if not mids <= _MID_CODES.keys() or set(map(_END, lines)) != {b'"}'}:
        return None
    texts = list(map(_TEXT, lines))
    joined = b"".join(texts)
    if b'"' in joined or b"\\" in joined:
        return None
    if len(mids) == 1:
        codes = [_MID_CODES[mids.pop()]] * len(lines)
    else:
        codes = list(map(_MID_CODES.__getitem__, map(_MID, lines)))
    return lines, texts, codes


# A block of one stream's exact records, cut at what lies between two texts (escaped newline,
# stream, 30-character time, the next record's start): the texts come out of one C-level split.
_STREAM_NAMES = {b"stdout": STDOUT, b"stderr": STDERR}
_BETWEEN = {code: re.compile(rb'\\n","stream":"' + name + rb'","time":".{30}"\}\n\{"log":"', re.S)
            for name, code in _STREAM_NAMES.items()}
_TAIL = {code: re.compile(rb'\\n","stream":"' + name + rb'","time":".{30}"\}\n\Z', re.S)
         for name, code in _STREAM_NAMES.items()}


def _plain(block: bytes) -> tuple[int, list[bytes]] | None:
    """``(stream code, texts)`` if every record of ``block`` has the writer's exact shape,
    all of one stream, and no text needed escaping; else None. Cheaper than :func:`_exact`
    (no times are read): about half the cost per record.

    The stream is the first record's; the split accepts only separators of that stream with
    a 30-character time. A record it did not cut off (another stream, another time length,
    damage) leaves a raw newline in a text, and an escape leaves a backslash or a quote;
    the joined texts are searched for all three at memory speed.
    """
    at = block.find(b'","stream":"', 8)
    code = _STREAM_NAMES.get(block[at + 12 : at + 18]) if at > 0 else None
    if code is None or not block.startswith(b'{"log":"'):
        return None
    texts = _BETWEEN[code].split(block)
    tail = _TAIL[code].search(texts[-1])
    if tail is None:
        return None
    texts[-1] = texts[-1][: tail.start()]
    texts[0] = texts[0][8:]
    joined = b"".join(texts)
    if b"\n" in joined or b'"' in joined or b"\\" in joined:
        return None
    return code, texts


def _parse(block: bytes, *, times: bool, stamps: bool) -> _Block:
    if not times and not stamps and (plain := _plain(block)) is not None:
        code, texts = plain
        return _Block([code] * len(texts), texts, True, None, None)
    try:
        exact = _exact(block)
        if exact is not None:
            lines, texts, codes = exact
            t = None
            if times:  # a time of another shape fails in _SECONDS or int()
                t = list(map(add, map(_SECONDS.__getitem__, map(_SECOND, lines)),
                             map(int, map(_NANOS, lines))))
            st = list(map(_STAMP, lines)) if stamps else None
            return _Block(codes, texts, True, t, st)
    except (ValueError, IndexError):
        pass  # a bad time: the slow path drops just that line
    return _parse_slow(block, stamps)


def _parse_slow(block: bytes, stamps: bool) -> _Block:
    codes: list[int] = []
    datas: list[bytes] = []
    times: list[int] = []
    for line in block.split(b"\n")[:-1]:
        rec = _parse_line(line)
        if rec is None:
            log.debug("skipped a damaged log line: %.100r", line)
        else:
            codes.append(rec[0])
            datas.append(rec[1])
            times.append(rec[2])
    st = [format_time(t).encode() for t in times] if stamps else None
    return _Block(codes, datas, False, times, st)


def _parse_line(line: bytes) -> tuple[int, bytes, int] | None:
    """One line as (stream code, data, time), or None if it is not a log record."""
    try:
        m = _LINE_RE.fullmatch(line)
        if m:
            text, stream, when = m.groups()
            data = _unescape(text) if b"\\" in text else text
        else:  # another writer's layout (dockerd's "attrs", other key orders)
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("log"), str):
                return None
            stream, when = str(obj.get("stream")).encode(), str(obj.get("time")).encode()
            data = _encode(obj["log"])
        if stream not in (b"stdout", b"stderr"):
            return None
        return (STDOUT if stream == b"stdout" else STDERR), data, _time_ns(when)
    except (ValueError, UnicodeError):
        return None


def _unescape(text: bytes) -> bytes:
    return _encode(json.loads(b'"' + text + b'"'))


def _encode(s: str) -> bytes:
    try:
        return s.encode()
    except UnicodeEncodeError:  # a lone surrogate escape: Go decodes it as U+FFFD
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


def _select(b: _Block, want: int, since_ns: int) -> _Block:
    """Keep the records of the wanted streams (bit 1 stdout, bit 2 stderr) at or after since."""
    keep: list[bool] | None = None
    if want != STDOUT | STDERR and b.codes.count(want) != len(b.codes):
        keep = list(map(eq, b.codes, repeat(want)))
    if since_ns > 0 and b.times is not None and min(b.times, default=since_ns) < since_ns:
        late = list(map(ge, b.times, repeat(since_ns)))
        keep = late if keep is None else list(map(and_, keep, late))
    if keep is None:
        return b

    def pick(col: list[T] | None) -> list[T] | None:
        return None if col is None else list(compress(col, keep))

    return _Block(list(compress(b.codes, keep)), list(compress(b.datas, keep)), b.newline,
                  pick(b.times), pick(b.stamps))


def _records(b: _Block) -> list[LogRecord]:
    assert b.times is not None
    datas = map(add, b.datas, repeat(b"\n")) if b.newline else b.datas
    rows = zip(map(_NAMES.__getitem__, b.codes), datas, b.times, strict=False)
    return list(map(tuple.__new__, repeat(LogRecord), rows))


def _frames(b: _Block) -> bytes:
    """One stdcopy frame per record, concatenated: ``[type 0 0 0 len32] [stamp ' '] payload``."""
    return b"".join(_frame_parts(b))


def _frame_parts(b: _Block) -> list[bytes]:
    """The pieces of :func:`_frames`, unjoined.

    A fast-path payload's newline is carried by the next frame's cached header ("\\n" + header),
    so that joining takes two or four parts per record and no payload is copied twice.
    """
    n = len(b.datas)
    if not n:
        return []
    nl = b"\n" if b.newline else b""
    ts = 0 if b.stamps is None else 31
    if b.codes.count(b.codes[0]) == n:
        heads = list(map(_HEADS[b.codes[0], nl, ts].__getitem__, map(len, b.datas)))
    else:
        tables = [_HEADS[STDOUT, nl, ts], _HEADS[STDOUT, nl, ts], _HEADS[STDERR, nl, ts]]
        heads = list(map(_Heads.__getitem__, map(tables.__getitem__, b.codes), map(len, b.datas)))
    heads[0] = heads[0][len(nl) :]
    step = 2 if b.stamps is None else 4
    parts = [b" "] * (step * n + 1)
    parts[0:-1:step] = heads
    parts[step - 1 :: step] = b.datas
    if b.stamps is not None:
        parts[1::step] = b.stamps
    parts[-1] = nl
    return parts


def frame_parts(code: int, payloads: list[bytes], stripped: bool,
                stamp: bytes | None) -> list[bytes]:
    """One stdcopy frame per payload of stream ``code`` (each plus a newline if ``stripped``,
    each after ``stamp`` and a space when one is given), as :func:`read_framed` frames the
    same records read back; in pieces, for the caller to join once."""
    n = len(payloads)
    return _frame_parts(_Block([code] * n, payloads, stripped, None,
                          None if stamp is None else [stamp] * n))


def _to_records(want: int, since_ns: int, block: bytes) -> list[LogRecord]:
    return _records(_select(_parse(block, times=True, stamps=False), want, since_ns))


def _to_frames(want: int, since_ns: int, stamps: bool, block: bytes) -> bytes:
    return _frames(_select(_parse(block, times=since_ns > 0, stamps=stamps), want, since_ns))


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
    rec = _parse_line(lines[-1]) if lines else None
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
            yield from _to_records(want, since_ns, block)


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
            if chunk := _to_frames(want, since_ns, timestamps, block):
                yield chunk
