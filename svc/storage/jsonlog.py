"""The json-file log driver's writer: dockerd's on-disk format, rotation and compression.

One record per line, byte for byte what moby's ``jsonfilelog`` writes::

    {"log":"hello\\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}

``log`` is escaped as moby's ``ffjsonWriteJSONBytesAsString`` does: ``\\"`` ``\\\\`` ``\\n``
``\\r``, every other control byte and ``<`` ``>`` ``&`` as ``\\u00XX``, U+2028/U+2029 escaped, other
UTF-8 kept raw, and each byte that is not valid UTF-8 (Go's ``DecodeRune`` view: one byte at a
time) as ``\\ufffd``. One deviation: ``time`` always has nine fraction digits, where Go's
RFC3339Nano drops trailing zeros; every reader (Go's and ours) accepts both, and the fixed width
lets ``logreader`` slice records without scanning them.

Output is split as dockerd's copier splits it: at newlines, and a line of 16 KiB or more in
16 KiB pieces written without the trailing ``\\n`` (partial records). Rotation follows moby's
``loggerutils.LogFile``: before a record is written, a file that has reached ``max-size`` is
rotated (``path`` -> ``path.1`` -> ... keeping ``max-file`` files in all, each rotated one
optionally gzipped to ``path.N.gz``), or truncated in place when ``max-file`` is 1.

Everything blocks; the engine calls it from a worker thread. A writer has one owner and is not
thread-safe.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import time
import weakref
import zlib
from pathlib import Path
from types import TracebackType

MAX_LINE = 16 * 1024  # dockerd's copier buffer: longer lines become partial records
STREAMS = ("stdout", "stderr")
FILE_MODE = 0o640  # moby creates log files 0640
_START = b'{"log":"'

# Bytes written verbatim; ``translate(None, _PLAIN)`` leaves only those needing attention.
_PLAIN = bytes(sorted(set(range(0x20, 0x80)) - set(b'"\\<>&') | {0x0A}))
# Newlines are left out: they are record boundaries here, and callers turn them into ``\n``.
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


def _record_end(stream: str, stamp: str) -> bytes:
    return b'","stream":"%s","time":"%s"}\n' % (stream.encode(), stamp.encode())


def encode_record(stream: str, data: bytes, ts_ns: int) -> bytes:
    """One record line for ``data`` as is (a ``\\n`` anywhere in it is escaped)."""
    return _START + escape(data).replace(b"\n", b"\\n") + _record_end(stream, format_time(ts_ns))


def _has_long_line(buf: bytes) -> bool:
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


def _split_long(buf: bytes, end: bytes) -> list[bytes]:
    """Records for whole lines when some are too long: dockerd's 16 KiB pieces."""
    out: list[bytes] = []
    lines = buf.split(b"\n")
    lines.pop()
    for line in lines:
        cut = len(line) - len(line) % MAX_LINE if len(line) >= MAX_LINE else 0
        for i in range(0, cut, MAX_LINE):
            out.append(_START + escape(line[i : i + MAX_LINE]) + end)
        out.append(_START + escape(line[cut:]) + b"\\n" + end)
    return out


Records = tuple[list[tuple[list[bytes], bool]], bytes]


def records_of(data: bytes) -> Records:
    """The records that :meth:`JsonLogWriter.write` makes of ``data`` (its stream's unfinished
    line already prepended), as payloads, and the unfinished rest it keeps.

    Payloads come in groups ``(payloads, stripped)``: with ``stripped`` each payload is a
    whole line without its newline (the common case, split in one pass); otherwise each is
    exact (16 KiB pieces of long lines, whose final record keeps its newline).
    """
    cut = data.rfind(b"\n") + 1
    groups: list[tuple[list[bytes], bool]] = []
    if cut:
        whole = data if cut == len(data) else data[:cut]
        lines = whole.split(b"\n")
        lines.pop()
        if len(whole) > MAX_LINE and _has_long_line(whole):
            exact: list[bytes] = []
            for line in lines:
                end = len(line) - len(line) % MAX_LINE if len(line) >= MAX_LINE else 0
                exact += [line[i : i + MAX_LINE] for i in range(0, end, MAX_LINE)]
                exact.append(line[end:] + b"\n")
            groups.append((exact, False))
        else:
            groups.append((lines, True))
    rest = data[cut:]
    if len(rest) >= MAX_LINE:
        end = len(rest) - len(rest) % MAX_LINE
        groups.append(([rest[i : i + MAX_LINE] for i in range(0, end, MAX_LINE)], False))
        rest = rest[end:]
    return groups, rest


def rotated_name(path: Path, index: int, compressed: bool) -> Path:
    """``path.N`` or ``path.N.gz``."""
    return path.with_name(f"{path.name}.{index}{'.gz' if compressed else ''}")


def gzip_file(src: Path, dst: Path, last_time: str | None) -> None:
    """Gzip ``src`` into ``dst`` (via ``dst.tmp``), then remove ``src``.

    As moby does, the header's Extra field holds ``{"lastTime":"..."}``, the time of the last
    record, so a reader with ``since`` can skip the file without inflating it. A crash leaves
    ``src`` whole (and maybe a stray ``.tmp``); the writer finishes the job when reopened.
    """
    extra = b'{"lastTime":"%s"}' % last_time.encode() if last_time else b""
    flags = b"\x04" if extra else b"\x00"
    head = b"\x1f\x8b\x08" + flags + b"\x00\x00\x00\x00\x04\xff"  # XFL 4: fastest
    if extra:
        head += len(extra).to_bytes(2, "little") + extra
    tmp = dst.with_name(dst.name + ".tmp")
    # Level 1: rotation compresses inline, in the writer's thread; twice level 6's speed.
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    crc = size = 0
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        os.fchmod(fout.fileno(), FILE_MODE)
        fout.write(head)
        while chunk := fin.read(1 << 20):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            fout.write(deflate.compress(chunk))
        fout.write(deflate.flush())
        fout.write(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
    os.replace(tmp, dst)
    src.unlink()


class LogFileRef:
    """A read-only descriptor on one live file of a writer, opened when the writer opened it.

    A reader that must resume exactly where some write ended (``logs -f`` falling back from
    the live output to the file) reads through it: a rotation renames, compresses or deletes
    the name, never the open file. The descriptor closes when the last reference goes.
    """

    __slots__ = ("fd", "inode", "__weakref__")

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.inode = os.fstat(self.fd).st_ino
        weakref.finalize(self, os.close, self.fd)

    def open(self) -> io.FileIO:
        """The file again, with its own offset (a ``dup`` would share this one's with every
        other reader); works after the name is gone."""
        return io.FileIO(os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC), "rb")


class JsonLogWriter:
    """Appends a container's output to ``path`` in dockerd's json-file format.

    Args:
        path: the log file (``<container>-json.log``); its directory must exist.
        max_size: rotate once the file reaches this many bytes; ``None`` never rotates.
        max_file: files kept in all, the live one included; 1 truncates in place.
        compress: gzip rotated files (``path.1.gz`` ...).

    Each :meth:`write` hands its complete records to the kernel in one ``writev`` before it
    returns, so followers see them at once and a daemon crash loses only the buffered partial
    line of each stream. A crash mid-write can leave a torn last line: on reopening, the writer
    ends it with a newline so that it stays one damaged line (readers skip it) and finishes an
    interrupted compression.
    """

    def __init__(
        self, path: Path, *, max_size: int | None, max_file: int = 1, compress: bool = False
    ) -> None:
        if max_file < 1 or (max_size is not None and max_size <= 0):
            raise ValueError("max-size must be positive and max-file at least 1")
        self.path = path
        self.max_size = max_size
        self.max_file = max_file
        self.compress = compress and max_file > 1 and max_size is not None
        self._pending = [b"", b""]
        self._last_time: str | None = None
        self._fd = -1
        self._size = 0
        if self.compress:
            self._finish_compression()
        self._open(truncate=False)

    @property
    def size(self) -> int:
        """Bytes in the live file."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def position(self) -> tuple[LogFileRef, int]:
        """The live file and the end of its last whole record: where the next write goes."""
        return self._ref, self._size

    def pending(self) -> tuple[bytes, bytes]:
        """The unfinished last line of stdout and of stderr, not in the file yet."""
        return self._pending[0], self._pending[1]

    def write(self, stream: str, data: bytes, ts_ns: int | None = None, *,
              records: bool = False) -> Records | None:
        """Log ``data`` from ``stream`` ("stdout" or "stderr"), stamped ``ts_ns`` (default now).

        Complete lines become records now; an unfinished last line waits in a per-stream
        buffer for its newline, for :meth:`flush`, or until it reaches 16 KiB.

        With ``records``, returns what :func:`records_of` would give for this write (the
        payloads of the records made, and the unfinished line kept), for ``logs -f``
        followers; in the common case (short lines, nothing to escape) from the same split
        that builds the file's bytes, so no follower cuts the chunk again.

        Raises:
            ValueError: an unknown stream or a closed writer.
            OSError: the file could not be written or rotated.
        """
        if self._fd < 0:
            raise ValueError("write to a closed log")
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        if not data:
            return ([], b"") if records else None
        idx = STREAMS.index(stream)
        if self._pending[idx]:
            data = self._pending[idx] + data
        stamp = format_time(time.time_ns() if ts_ns is None else ts_ns)
        end = _record_end(stream, stamp)
        cut = data.rfind(b"\n") + 1
        parts: list[bytes | memoryview] = []
        made: Records | None = None
        if cut:
            whole = data if cut == len(data) else data[:cut]
            if len(whole) > MAX_LINE and _has_long_line(whole):
                parts.extend(_split_long(whole, end))
            elif records and (escaped := escape(whole)) is whole:
                # Nothing to escape: the lines cut here are the file's records and the
                # followers' payloads both.
                lines = whole.split(b"\n")
                lines.pop()
                parts += [_START, (b"\\n" + end + _START).join(lines), b"\\n" + end]
                made = ([(lines, True)], b"")
            else:
                # One pass for the whole batch: escape, then turn newlines into record breaks.
                body = (escaped if records else escape(whole)).replace(
                    b"\n", b"\\n" + end + _START)
                parts += [_START, memoryview(body)[: -len(_START)]]
        rest = data[cut:]
        while len(rest) >= MAX_LINE:
            parts.append(_START + escape(rest[:MAX_LINE]) + end)
            rest = rest[MAX_LINE:]
        self._pending[idx] = rest
        if parts:
            self._emit(parts, stamp)
        if not records:
            return None
        if made is None or len(data) - cut >= MAX_LINE:
            return records_of(data)
        return made[0], rest

    def flush(self, ts_ns: int | None = None, stream: str | None = None) -> None:
        """Write the unfinished line of ``stream`` (default: of each) as a partial record (no
        trailing ``\\n``). One stream's end must not cut the other's line in two."""
        stamp = format_time(time.time_ns() if ts_ns is None else ts_ns)
        for idx, name in enumerate(STREAMS):
            if stream not in (None, name):
                continue
            if self._pending[idx] and self._fd >= 0:
                rec = _START + escape(self._pending[idx]) + _record_end(name, stamp)
                self._pending[idx] = b""
                self._emit([rec], stamp)

    def close(self) -> None:
        """Flush the unfinished lines and close the file; closing twice is a no-op."""
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonLogWriter:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _emit(self, parts: list[bytes | memoryview], stamp: str) -> None:
        """Write records stamped ``stamp``, rotating between them as needed."""
        total = sum(map(len, parts))
        cap = self.max_size
        if cap is None or self._size + total <= cap:
            self._write_all(parts, total)
            self._last_time = stamp
            return
        # Rotate between records, before one that would start at or past max-size (moby).
        data = b"".join(parts)
        off = 0
        while off < len(data):
            if self._size >= cap:
                self._rotate()
            nl = data.find(b"\n", off + cap - self._size - 1)
            cut = len(data) if nl < 0 else nl + 1
            self._write_all([memoryview(data)[off:cut]], cut - off)
            self._last_time = stamp  # for the gzip header of the file this record ends
            off = cut

    def _write_all(self, parts: list[bytes | memoryview], total: int) -> None:
        done = os.writev(self._fd, parts)
        if done < total:  # a short write (disk full, signal): finish it or raise
            rest = memoryview(b"".join(parts))[done:]
            while rest:
                rest = rest[os.write(self._fd, rest) :]
        self._size += total

    def _open(self, *, truncate: bool) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC  # read: the torn-tail check
        self._fd = os.open(self.path, flags | (os.O_TRUNC if truncate else 0), FILE_MODE)
        self._size = os.fstat(self._fd).st_size
        self._ref = LogFileRef(self.path)
        if self._size and os.pread(self._fd, 1, self._size - 1) != b"\n":
            self._write_all([b"\n"], 1)  # keep a torn record on a line of its own

    def _rotate(self) -> None:
        """Shift the rotated files and start a new live file.

        Crash: each step is a rename, so every record stays in some file; at worst ``path.1``
        is still uncompressed, which the next writer compresses. Errors: the live file is
        reopened whatever happened, so a failed rotation does not stop the logging.
        """
        os.close(self._fd)
        self._fd = -1
        truncate = self.max_file < 2
        try:
            if not truncate:
                rotated_name(self.path, self.max_file - 1, self.compress).unlink(missing_ok=True)
                for i in range(self.max_file - 1, 1, -1):
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(rotated_name(self.path, i - 1, self.compress),
                                  rotated_name(self.path, i, self.compress))
                first = rotated_name(self.path, 1, False)
                os.rename(self.path, first)
                if self.compress:
                    gzip_file(first, rotated_name(self.path, 1, True), self._last_time)
        finally:
            self._open(truncate=truncate)

    def _finish_compression(self) -> None:
        first, gz = rotated_name(self.path, 1, False), rotated_name(self.path, 1, True)
        if first.exists():
            gzip_file(first, gz, None)
        gz.with_name(gz.name + ".tmp").unlink(missing_ok=True)
