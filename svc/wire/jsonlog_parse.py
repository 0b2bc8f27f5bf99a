"""Parsing json-file log blocks into records and stdcopy frames, fast where the writer's
exact record shape allows.

The speed comes from the writer's fixed record shape: when every line of a block has it (no
escapes but the final ``\\n``, nine-digit timestamps), the fields are sliced at fixed offsets by C
code, and a block becomes one bytes object of stdcopy frames without a Python-level step per
record. When no times are needed and the block holds one stream, one regex split cuts the
texts out directly (:func:`_plain`), at about twice that speed. Other blocks (escaped text,
dockerd's own files, damage) go line by line through a regex and ``json.loads``; lines that do
not parse are skipped.

Everything here is pure computation on bytes (``logreader`` and ``logfollow`` read the files).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import compress, repeat
from operator import add, and_, eq, ge, itemgetter, methodcaller
from typing import NamedTuple, TypeVar

from svc.wire.jsonlog import MAX_LINE, Lines, format_time
from svc.wire.native import FRAMER, Framer
from svc.wire.stdcopy import HEADER as _HDR
from svc.wire.stdcopy import STDERR, STDOUT
from svc.wire.timefmt import parse_timestamp_ns

# The logger keeps the name of the module this was split from (docs/configuration.md).
log = logging.getLogger("svc.logreader")

_NAMES = ("", "stdout", "stderr")
T = TypeVar("T")


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
        rec = parse_line(line)
        if rec is None:
            log.debug("skipped a damaged log line: %.100r", line)
        else:
            codes.append(rec[0])
            datas.append(rec[1])
            times.append(rec[2])
    st = [format_time(t).encode() for t in times] if stamps else None
    return _Block(codes, datas, False, times, st)


def parse_line(line: bytes) -> tuple[int, bytes, int] | None:
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


def frame_lines(code: int, lines: Lines,
                stamp: bytes | None) -> Sequence[bytes | memoryview]:
    """One stdcopy frame per line of ``lines`` (each after ``stamp`` and a space when one is
    given), as :func:`read_framed` frames the same records read back; in pieces, for the
    caller to join once. Lines of one width share one head: one ``replace`` frames them all."""
    if not lines.width:
        texts = lines.data.split(b"\n")
        texts.pop()
        return frame_parts(code, texts, True, stamp)
    lead = b"" if stamp is None else stamp + b" "
    head = _HDR.pack(code, len(lead) + lines.width) + lead
    return [head, memoryview(lines.data.replace(b"\n", b"\n" + head))[: -len(head)]]


def to_records(want: int, since_ns: int, block: bytes) -> list[LogRecord]:
    return _records(_select(_parse(block, times=True, stamps=False), want, since_ns))


def to_frames(want: int, since_ns: int, stamps: bool, block: bytes,
              framer: Framer | None = FRAMER) -> bytes:
    """``block``'s records of the wanted streams at or after ``since_ns``, as stdcopy frames
    (with ``stamps``, each payload after its time). A block of the writer's exact shape and
    one stream, with no times asked for, is framed in C when the library is there
    (``svc.wire.native``)."""
    if framer is not None and since_ns <= 0 and not stamps:
        done = framer.frames(block)
        if done is not None:
            code, frames = done
            return frames if want & code else b""
    return _frames(_select(_parse(block, times=since_ns > 0, stamps=stamps), want, since_ns))
