"""The json-file log driver's writer: records (``svc.wire.jsonlog``) appended to the
container's log file, rotation and compression.

Rotation follows moby's ``loggerutils.LogFile``: before a record is written, a file that has
reached ``max-size`` is rotated (``path`` -> ``path.1`` -> ... keeping ``max-file`` files in all,
each rotated one optionally gzipped to ``path.N.gz``), or truncated in place when ``max-file``
is 1.

Everything blocks; the engine calls it from a worker thread. A writer has one owner and is not
thread-safe.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from svc.storage.writeback import start_writeback
from svc.wire.jsonlog import (
    MAX_LINE,
    START,
    STREAMS,
    Records,
    escape,
    format_time,
    has_long_line,
    plain_lines,
    record_end,
    records_of,
    split_long,
)

FILE_MODE = 0o640  # moby creates log files 0640
# A busy log's pages go to the disk every 8 MiB as they are written (svc.storage.writeback):
# the overlay unmount of the container's teardown syncs the whole file system, and a log of
# hundreds of MB left dirty made the exit (and the end of ``logs -f``) wait for all of it.
WRITEBACK_STEP = 8 << 20


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
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            os.fchmod(fout.fileno(), FILE_MODE)
            fout.write(head)
            while chunk := fin.read(1 << 20):
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
                fout.write(deflate.compress(chunk))
            fout.write(deflate.flush())
            fout.write(crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little"))
    except OSError:  # a full disk: ``src`` stays whole and uncompressed
        tmp.unlink(missing_ok=True)
        raise
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
        self._size = self._flushed = 0
        self._ino = 0
        self._ref: LogFileRef | None = None
        self._closed_ref: Callable[[], LogFileRef | None] = lambda: None
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
        """The live file and the end of its last whole record: where the next write goes.

        After :meth:`close` the writer no longer holds its file open (a removed container's
        log must leave the disk with its name, whoever still holds the writer): the file
        is the reference a reader still holds, else it is opened again."""
        ref = self._ref if self._ref is not None else self._closed_ref()
        if ref is None:
            ref = LogFileRef(self.path)
            self._closed_ref = weakref.ref(ref)
        return ref, self._size

    def pending(self) -> tuple[bytes, bytes]:
        """The unfinished last line of stdout and of stderr, not in the file yet."""
        return self._pending[0], self._pending[1]

    def end(self) -> tuple[int, int] | None:
        """The live file's inode and size (None once closed): what ``take_back`` takes."""
        return None if self._fd < 0 else (self._ino, self._size)

    def take_back(self, end: tuple[int, int] | None) -> int:
        """Cut the live file back to ``end`` (an ``end()`` of an earlier writer, recorded
        with what had been logged then): what was written after it is logged again from its
        source. Only the same file, and only what it holds past that size, is cut (a file
        rotated since holds what is recorded: it is left as it is). Returns the bytes cut."""
        if end is None or self._fd < 0 or end[0] != self._ino or self._size <= end[1]:
            return 0
        cut = self._size - end[1]
        os.ftruncate(self._fd, end[1])
        self._size = end[1]
        self._flushed = min(self._flushed, self._size)
        return cut

    def write(self, stream: str, data: bytes, ts_ns: int | None = None, *,
              records: bool = False) -> Records | None:
        """Log ``data`` from ``stream`` ("stdout" or "stderr"), stamped ``ts_ns`` (default now).

        Complete lines become records now; an unfinished last line waits in a per-stream
        buffer for its newline, for :meth:`flush`, or until it reaches 16 KiB.

        With ``records``, returns what :func:`records_of` would give for this write (the
        payloads of the records made, and the unfinished line kept), for ``logs -f``
        followers; in the common case (short lines, nothing to escape) the lines as they are,
        counted by the pass that checks them for escapes, so no follower cuts the chunk.

        Raises:
            ValueError: an unknown stream or a closed writer.
            OSError: the file could not be written or rotated (a full disk): nothing of this
                write is in the file or kept, so the same call may be made again.
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
        end = record_end(stream, stamp)
        cut = data.rfind(b"\n") + 1
        parts: list[bytes | memoryview] = []
        made: Records | None = None
        if cut:
            whole = data if cut == len(data) else data[:cut]
            if len(whole) > MAX_LINE and has_long_line(whole):
                parts.extend(split_long(whole, end))
            else:
                # Nothing to escape (the common case): the followers get the lines as they
                # are, counted by the same pass that checked them.
                plain = plain_lines(whole) if records else None
                if plain is not None:
                    made = ([plain], b"")
                # One pass for the whole batch: escape, then turn newlines into record breaks.
                body = (whole if plain is not None else escape(whole)).replace(
                    b"\n", b"\\n" + end + START)
                parts += [START, memoryview(body)[: -len(START)]]
        rest = data[cut:]
        while len(rest) >= MAX_LINE:
            parts.append(START + escape(rest[:MAX_LINE]) + end)
            rest = rest[MAX_LINE:]
        if parts:
            before = self._pending[idx]
            self._pending[idx] = rest
            try:
                self._emit(parts, stamp)
            except OSError:  # nothing of this write is kept: the same call may be retried
                self._pending[idx] = before
                raise
        else:
            self._pending[idx] = rest
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
                rec = START + escape(self._pending[idx]) + record_end(name, stamp)
                self._pending[idx] = b""
                self._emit([rec], stamp)

    def hold(self, pending: tuple[bytes, bytes]) -> None:
        """Take up the unfinished lines a live-restored container's last daemon kept (its
        shim's cursor holds them): what follows continues them."""
        self._pending = [pending[0], pending[1]]

    def drop_pending(self) -> None:
        """Forget the unfinished lines (they will be written again from their source: a
        live-restored container's log is read again from before them)."""
        self._pending = [b"", b""]

    def close(self) -> None:
        """Flush the unfinished lines and close the file; closing twice is a no-op."""
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            if self._flushed and self._size > self._flushed:  # a busy log's tail too
                start_writeback(self._fd, self._flushed, 0)
            os.close(self._fd)
            self._fd = -1
            if self._ref is not None:
                self._closed_ref = weakref.ref(self._ref)
                self._ref = None

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
        """Append ``parts`` whole, or not at all: a write the disk cut short is taken back
        (truncating needs no room), so no torn record is left for the next to run into."""
        try:
            done = os.writev(self._fd, parts)
            if done < total:  # a short write (disk full, signal): finish it or raise
                rest = memoryview(b"".join(parts))[done:]
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise
        self._size += total
        if self._size - self._flushed >= WRITEBACK_STEP:
            start_writeback(self._fd, self._flushed, self._size - self._flushed)
            self._flushed = self._size

    def _open(self, *, truncate: bool) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC  # read: the torn-tail check
        self._fd = os.open(self.path, flags | (os.O_TRUNC if truncate else 0), FILE_MODE)
        st = os.fstat(self._fd)
        self._size, self._ino = st.st_size, st.st_ino
        self._flushed = self._size  # written back from here on
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
