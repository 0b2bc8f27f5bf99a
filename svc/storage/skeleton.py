"""The layer skeleton: what ``apply_layer`` keeps so a layer's exact tar can be rebuilt.

``SkeletonWriter`` records it while a layer is applied; ``write_layer_from_skeleton`` rebuilds
the archive byte for byte (and so its diff id) from it and the diff dir, as docker's tar-split
does.

Skeleton format (version 1). A gzip stream whose content is ``b"svc-tar-skeleton 1\\n"`` then
records, each a one-byte tag and big-endian fields:

- ``R`` u32 length, bytes: archive bytes that are not regular-file payload (headers, PAX and GNU
  long-name blocks with their data, padding, payload of entries not stored as files, the
  end-of-archive blocks and any trailing bytes), verbatim.
- ``F`` u32 path length, u64 size, path: ``size`` payload bytes, to be read from the file at
  ``path`` (relative to the diff dir, as stored by ``apply_layer``).
- ``P`` u32 path length, u32 count, path, count times (u64 offset, u64 length): a GNU sparse
  file's payload, its data segments read from those ranges of the file at ``path``. Counts as
  an ``F`` for ``S`` records.
- ``S`` u32 n, u32 path length, path: a later entry of the same archive removed or replaced the
  file the latest ``F`` naming ``path`` refers to; that payload was moved to ``<stale>/<n>``
  (``apply_layer``'s ``stale_dir``), where the rebuild reads it.
- ``X`` u32 path length, path: as ``S`` with the payload lost (skeletons of earlier versions):
  the archive cannot be rebuilt.
- ``E`` u64 total: end of skeleton; ``total`` is the length of the archive.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from svc.errors import InvalidParameter, SystemError_
from svc.storage.compression import open_decompressed
from svc.storage.layerworker import Worker
from svc.storage.tarformat import CHUNK, show, write_all, write_out

SKELETON_MAGIC = b"svc-tar-skeleton 1\n"
_U32, _U64, _F_HEAD = struct.Struct(">I"), struct.Struct(">Q"), struct.Struct(">IQ")
_F_RECORD = struct.Struct(">cIQ")  # tag and _F_HEAD
_RANGE = struct.Struct(">QQ")
_BATCH = CHUNK // 4  # records handed to the worker to compress at a time


class SkeletonWriter:
    """Accumulates skeleton records; ``worker`` compresses them and writes them to ``out``.

    Archive bytes go straight into an open ``R`` record whose length is filled in when the next
    other record starts (or a batch is handed over); nothing is copied twice.
    """

    def __init__(self, out: BinaryIO, worker: Worker) -> None:
        self._out = out
        self._worker = worker
        self._z = zlib.compressobj(1, zlib.DEFLATED, 31)  # used by the worker's thread only
        self._records = bytearray(SKELETON_MAGIC)
        self._raw_at = -1  # where the open R record's bytes start in _records; -1: none open

    def raw(self, data: bytes | memoryview) -> None:
        records = self._records
        if self._raw_at < 0:
            records += b"R\0\0\0\0"
            self._raw_at = len(records)
        records += data
        if len(records) >= _BATCH:
            self._hand_over()

    def file(self, path: bytes, size: int) -> None:
        records = self._records
        if (at := self._raw_at) >= 0:  # end the open R record (as _end_raw)
            _U32.pack_into(records, at - 4, len(records) - at)
            self._raw_at = -1
        records += _F_RECORD.pack(b"F", len(path), size)
        records += path
        if len(records) >= _BATCH:
            self._hand_over()

    def sparse_file(self, path: bytes, segments: list[tuple[int, int]]) -> None:
        if self._raw_at >= 0:
            self._end_raw()
        records = self._records
        records += b"P" + _U32.pack(len(path)) + _U32.pack(len(segments)) + path
        for offset, length in segments:
            records += _RANGE.pack(offset, length)
        if len(records) >= _BATCH:
            self._hand_over()

    def stale(self, path: bytes, n: int) -> None:
        if self._raw_at >= 0:
            self._end_raw()
        self._records += b"S" + _U32.pack(n) + _U32.pack(len(path)) + path

    def close(self, total: int) -> None:
        """End the skeleton; it is all written once the worker is closed."""
        if self._raw_at >= 0:
            self._end_raw()
        self._records += b"E" + _U64.pack(total)
        self._worker.submit(self._finish, self._records)
        self._records = bytearray()

    def _end_raw(self) -> None:
        at = self._raw_at
        _U32.pack_into(self._records, at - 4, len(self._records) - at)
        self._raw_at = -1

    def _hand_over(self) -> None:
        if self._raw_at >= 0:
            self._end_raw()
        self._worker.submit(self._compress, self._records)
        self._records = bytearray()

    def _compress(self, records: bytearray) -> None:
        write_out(self._out, self._z.compress(records))

    def _finish(self, records: bytearray) -> None:
        write_out(self._out, self._z.compress(records) + self._z.flush())


_SMALL_FILE = 64 << 10  # payloads up to this size are copied through the write buffer


class _Sink:
    """Buffered output to ``out``; whole files go out with sendfile(2) when ``out`` has a fd."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._buf = bytearray()
        self.total = 0
        try:
            self._fd: int | None = out.fileno()
        except (OSError, ValueError, AttributeError):
            self._fd = None
        if self._fd is not None:
            out.flush()  # from here on we write the fd directly

    def write(self, data: bytes | memoryview) -> None:
        self._buf += data
        self.total += len(data)
        if len(self._buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        if self._fd is None:
            data, self._buf = self._buf, bytearray()  # handed over, not copied
            write_out(self._out, data)
        else:
            write_all(self._fd, self._buf)
            self._buf.clear()

    def close(self) -> None:
        self.flush()
        if self._fd is not None and self._out.seekable():
            self._out.seek(os.lseek(self._fd, 0, os.SEEK_CUR))  # resync the file object

    def copy_file(self, fd: int, size: int) -> int:
        """Send ``size`` bytes of ``fd``; returns how many it could (fewer if the file shrank)."""
        if size <= _SMALL_FILE:
            done = 0
            while done < size and (data := os.read(fd, min(size - done, CHUNK))):
                self.write(data)
                done += len(data)
            return done
        self.flush()
        if self._fd is None:  # large payloads go to ``out`` as read, not through the buffer
            done = 0
            while done < size and (data := os.read(fd, min(size - done, CHUNK))):
                write_out(self._out, data)
                done += len(data)
            self.total += done
            return done
        done = 0
        while done < size and (n := os.sendfile(self._fd, fd, done, min(size - done, 1 << 30))):
            done += n
        self.total += done
        return done


def _open_payload(where: Path, rel: bytes) -> int:
    try:
        return os.open(os.path.join(os.fsencode(where), rel),
                       os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SystemError_(f'layer {where}: file "{show(rel)}" cannot be read: '
                           f"{exc.strerror}") from exc


def _emit_file(sink: _Sink, diff_dir: Path, rel: bytes, size: int) -> None:
    fd = _open_payload(diff_dir, rel)
    try:
        found = os.fstat(fd).st_size
        if found != size or sink.copy_file(fd, size) != size:
            raise SystemError_(f'layer {diff_dir}: file "{show(rel)}" has changed '
                               f"(size {found}, the layer archive holds {size} bytes)")
    finally:
        os.close(fd)


def write_layer_from_skeleton(skeleton: BinaryIO, diff_dir: Path, out: BinaryIO,
                              stale_dir: Path | None = None) -> None:
    """Write the exact layer tar that ``apply_layer`` read, from its skeleton and ``diff_dir``.

    Args:
      skeleton: the skeleton ``apply_layer`` wrote, read sequentially (and, when the layer
        has stale payloads, once more from the start: it must then be seekable).
      diff_dir: the directory the layer was applied to.
      out: receives the tar; if it has a file descriptor that is written directly (blocking).
      stale_dir: ``apply_layer``'s ``stale_dir``.

    Raises:
      SystemError_: the skeleton is damaged, or a payload file is missing or changed.

    Cancellation: blocking, not a checkpoint; on an error ``out`` holds a truncated tar.
    """
    moved: dict[tuple[bytes, int], Path] = {}
    if stale_dir is not None and stale_dir.is_dir():
        moved = _stale_payloads(skeleton, diff_dir, stale_dir)
        skeleton.seek(0)
    seen: dict[bytes, int] = {}

    def source(rel: bytes) -> tuple[Path, bytes]:
        """Where the payload of this ``F``/``P`` record is: its file, or a stale copy."""
        if moved:
            seen[rel] = seen.get(rel, 0) + 1
            kept = moved.get((rel, seen[rel]))
            if kept is not None:
                return kept.parent, os.fsencode(kept.name)
        return diff_dir, rel

    sink = _Sink(out)
    for record in _records(skeleton, diff_dir):
        tag = record[0]
        if tag == b"R":
            sink.write(record[1])
        elif tag == b"F":
            _emit_file(sink, *source(record[1]), record[2])
        elif tag == b"P":
            _emit_ranges(sink, *source(record[1]), record[2])
        elif tag == b"S":
            if not moved:  # the first pass found it, unless the stale dir is gone
                raise SystemError_(f'layer {diff_dir} cannot be exported: the earlier copy '
                                   f'of "{show(record[2])}" is missing')
        elif tag == b"X":
            raise SystemError_(f'layer {diff_dir} cannot be exported: its archive replaced '
                               f'the file "{show(record[1])}" after writing it')
        else:  # E
            sink.close()
            if sink.total != record[1]:
                raise SystemError_(f"layer {diff_dir}: rebuilt {sink.total} bytes, expected "
                                   f"{record[1]}")


def _stale_payloads(skeleton: BinaryIO, diff_dir: Path, stale_dir: Path
                    ) -> dict[tuple[bytes, int], Path]:
    """A first pass over the skeleton: which ``F``/``P`` records (path, occurrence from 1)
    read their payload from ``stale_dir`` (an ``S`` names the latest of its path)."""
    seen: dict[bytes, int] = {}
    moved: dict[tuple[bytes, int], Path] = {}
    for record in _records(skeleton, diff_dir):
        if record[0] in (b"F", b"P"):
            seen[record[1]] = seen.get(record[1], 0) + 1
        elif record[0] == b"S" and record[2] in seen:
            moved[(record[2], seen[record[2]])] = stale_dir / str(record[1])
    return moved


def _records(skeleton: BinaryIO, diff_dir: Path) -> Iterator[tuple[Any, ...]]:
    """The skeleton's records, decoded: (R, bytes), (F, path, size), (P, path, ranges),
    (S, n, path), (X, path), then (E, total) last."""
    read = _reader(skeleton, diff_dir)
    if read(len(SKELETON_MAGIC)) != SKELETON_MAGIC:
        raise SystemError_(f"layer {diff_dir}: the skeleton is damaged (unknown format)")
    while (tag := read(1)) != b"E":
        if tag == b"R":
            yield tag, read(_U32.unpack(read(4))[0])
        elif tag == b"F":
            length, size = _F_HEAD.unpack(read(_F_HEAD.size))
            yield tag, read(length), size
        elif tag == b"P":
            length, count = _U32.unpack(read(4))[0], _U32.unpack(read(4))[0]
            rel = read(length)
            data = read(count * _RANGE.size)
            yield tag, rel, [_RANGE.unpack_from(data, i * _RANGE.size) for i in range(count)]
        elif tag == b"S":
            n, length = _U32.unpack(read(4))[0], _U32.unpack(read(4))[0]
            yield tag, n, read(length)
        elif tag == b"X":
            yield tag, read(_U32.unpack(read(4))[0])
        else:
            raise SystemError_(f"layer {diff_dir}: the skeleton is damaged (record {tag!r})")
    yield tag, _U64.unpack(read(8))[0]


def _emit_ranges(sink: _Sink, where: Path, rel: bytes, ranges: list[tuple[int, int]]) -> None:
    """A sparse file's data segments, read from their places in the file."""
    fd = _open_payload(where, rel)
    try:
        for offset, length in ranges:
            done = 0
            while done < length:
                data = os.pread(fd, min(length - done, CHUNK), offset + done)
                if not data:
                    raise SystemError_(f'layer {where}: file "{show(rel)}" has changed '
                                       "(shorter than its sparse map)")
                sink.write(data)
                done += len(data)
    finally:
        os.close(fd)


def _reader(skeleton: BinaryIO, diff_dir: Path) -> Callable[[int], bytes]:
    src = open_decompressed(skeleton)

    def read(n: int) -> bytes:
        try:
            data = src.read(n)
        except InvalidParameter as exc:
            why = exc.message.removeprefix("invalid layer archive: ")
            raise SystemError_(f"layer {diff_dir}: the skeleton is damaged ({why})") from exc
        if len(data) != n:
            raise SystemError_(f"layer {diff_dir}: the skeleton is damaged (truncated)")
        return data

    return read
