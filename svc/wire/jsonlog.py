"""The json-file log record: dockerd's on-disk line format, byte for byte what moby's
``jsonfilelog`` writes (one record per line)::

    {"log":"hello\\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}

``log`` is escaped as moby's ``ffjsonWriteJSONBytesAsString`` does: ``\\"`` ``\\\\``
``\\n`` ``\\r``, every other control byte and ``<`` ``>`` ``&`` as ``\\u00XX``,
U+2028/U+2029 escaped, other UTF-8 kept raw, and each byte that is not valid UTF-8 (Go's
``DecodeRune`` view: one byte at a time) as ``\\ufffd``. One deviation: ``time`` always has
nine fraction digits, where Go's RFC3339Nano drops trailing zeros; every reader (Go's and ours)
accepts both, and the fixed width lets the reader slice records without scanning them.

Output is split as dockerd's copier splits it: at newlines, and a line of 16 KiB or more in
16 KiB pieces written without the trailing newline (partial records). Pure bytes in and out:
the writer and its files are ``svc.storage.jsonlog``, the decoder ``svc.wire.jsonlog_parse``.
"""

from __future__ import annotations

import codecs
import time
from typing import NamedTuple

MAX_LINE = 16 * 1024  # dockerd's copier buffer: longer lines become partial records
STREAMS = ("stdout", "stderr")
START = b'{"log":"'

# Bytes written verbatim; ``translate(None, _PLAIN)`` leaves only those needing attention.
_PLAIN = bytes(sorted(set(range(0x20, 0x80)) - set(b'"\\<>&') | {0x0A}))
# Newlines are left out: they are record boundaries here, and callers turn them into ``\n``.
# The same but for newlines, which it leaves: counted where nothing else needs escaping.
_PLAIN_BUT_NL = bytes(sorted(set(_PLAIN) - {0x0A}))
_ESCAPES = {b: b"\\u%04x" % b for b in [*range(0x20), *b"<>&"] if b != 0x0A}
_ESCAPES.update({0x0D: b"\\r", 0x22: b'\\"', 0x5C: b"\\\\"})
_GO_REPLACE = "svc.jsonlog.go-replace"


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    """Replace one invalid byte with the text ``\\ufffd`` and resume after it, as Go does."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\\ufffd", exc.start + 1


codecs.register_error(_GO_REPLACE, _go_replace)


def escape(data: bytes) -> bytes:
    """JSON-escape ``data`` as moby does, leaving raw ``\\n`` bytes where they are."""
    odd = data.translate(None, _PLAIN)
    if not odd:
        return data
    present = set(odd)
    if 0x5C in present:  # backslashes first, so later escapes are not doubled
        data = data.replace(b"\\", b"\\\\")
    for b in present & _ESCAPES.keys() - {0x5C}:
        data = data.replace(bytes((b,)), _ESCAPES[b])
    if max(present) >= 0x80:
        data = data.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            data = data.decode("utf-8", _GO_REPLACE).encode("utf-8")
    return data


_last_second: tuple[int, str] = (-1, "")


def format_time(ts_ns: int) -> str:
    """Unix nanoseconds as RFC 3339 UTC with nine fraction digits (``...05.000000000Z``)."""
    global _last_second
    secs, nanos = divmod(ts_ns, 1_000_000_000)
    cached = _last_second  # one tuple, so a racing thread never sees a torn pair
    if cached[0] != secs:
        cached = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
        _last_second = cached
    return f"{cached[1]}.{nanos:09d}Z"


def record_end(stream: str, stamp: str) -> bytes:
    return b'","stream":"%s","time":"%s"}\n' % (stream.encode(), stamp.encode())


def encode_record(stream: str, data: bytes, ts_ns: int) -> bytes:
    """One record line for ``data`` as is (a ``\\n`` anywhere in it is escaped)."""
    return START + escape(data).replace(b"\n", b"\\n") + record_end(stream, format_time(ts_ns))


def has_long_line(buf: bytes) -> bool:
    """Whether ``buf`` (ending with ``\\n``) has a line of ``MAX_LINE`` bytes or more.

    Jumps up to ``MAX_LINE`` bytes per step with ``rfind``, so short lines cost nothing each.
    """
    start, end = 0, len(buf)
    while end - start > MAX_LINE:
        nl = buf.rfind(b"\n", start, start + MAX_LINE)
        if nl < 0:
            return True
        start = nl + 1
    return False


def split_long(buf: bytes, end: bytes) -> list[bytes]:
    """Records for whole lines when some are too long: dockerd's 16 KiB pieces."""
    out: list[bytes] = []
    lines = buf.split(b"\n")
    lines.pop()
    for line in lines:
        cut = len(line) - len(line) % MAX_LINE if len(line) >= MAX_LINE else 0
        for i in range(0, cut, MAX_LINE):
            out.append(START + escape(line[i : i + MAX_LINE]) + end)
        out.append(START + escape(line[cut:]) + b"\\n" + end)
    return out


class Lines(NamedTuple):
    """Whole lines, each a record of its own: ``data`` ends with a newline, and none of its
    lines has ``MAX_LINE`` bytes or more. ``width`` is the length of every line (its newline
    included) when all are alike, else 0: such a block is framed with one ``replace``, no
    step per line."""

    data: bytes
    width: int


def lines_of(whole: bytes, count: int) -> Lines:
    """``whole`` (``count`` whole lines) as :class:`Lines`, its ``width`` found at C speed:
    with exactly ``count`` newlines, a stride of the first line's length that meets only
    newlines means every line has that length."""
    w = whole.find(b"\n") + 1
    alike = w * count == len(whole) and whole[w - 1 :: w] == b"\n" * count
    return Lines(whole, w if alike else 0)


def plain_lines(whole: bytes) -> Lines | None:
    """``whole`` (whole lines, none too long) as :class:`Lines` if no byte of it needs
    escaping, else None; the one pass over the bytes that :func:`escape` makes also counts
    the newlines."""
    odd = whole.translate(None, _PLAIN_BUT_NL)
    if odd.count(b"\n") != len(odd):
        return None
    return lines_of(whole, len(odd))


# A write's records: blocks of whole lines, and lists of exact payloads (16 KiB pieces of long
# lines, whose final record keeps its newline; a flushed partial line).
Records = tuple[list[Lines | list[bytes]], bytes]


def records_of(data: bytes) -> Records:
    """The records that :meth:`JsonLogWriter.write` makes of ``data`` (its stream's unfinished
    line already prepended), and the unfinished rest it keeps."""
    cut = data.rfind(b"\n") + 1
    groups: list[Lines | list[bytes]] = []
    if cut:
        whole = data if cut == len(data) else data[:cut]
        if len(whole) > MAX_LINE and has_long_line(whole):
            lines = whole.split(b"\n")
            lines.pop()
            exact: list[bytes] = []
            for line in lines:
                end = len(line) - len(line) % MAX_LINE if len(line) >= MAX_LINE else 0
                exact += [line[i : i + MAX_LINE] for i in range(0, end, MAX_LINE)]
                exact.append(line[end:] + b"\n")
            groups.append(exact)
        else:
            groups.append(lines_of(whole, whole.count(b"\n")))
    rest = data[cut:]
    if len(rest) >= MAX_LINE:
        end = len(rest) - len(rest) % MAX_LINE
        groups.append([rest[i : i + MAX_LINE] for i in range(0, end, MAX_LINE)])
        rest = rest[end:]
    return groups, rest
