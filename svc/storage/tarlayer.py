"""Layer tars both ways: apply an archive to a directory, re-emit it byte for byte, produce one.

``apply_layer`` unpacks an uncompressed layer tar into a directory the way an overlay lower dir
needs it (aufs ``.wh.`` whiteouts become 0:0 character devices, ``.wh..wh..opq`` becomes the
``trusted.overlay.opaque`` xattr), refuses anything that would write outside that directory, and
records a *skeleton* so ``write_layer_from_skeleton`` can later rebuild the exact bytes, and so
the diff id, as docker's tar-split does. ``produce_layer`` goes the other way for an overlay upper
dir. All of it blocks: the engine calls it from worker threads.

Archive rules (what moby's ``UnpackLayer`` and Go's ``archive/tar`` do, unless noted):

- Names: a leading ``/`` and ``./`` are dropped, ``.`` and empty components ignored, ``..``
  resolved lexically; one that climbs above the root is refused (also after a leading ``/``,
  where moby would clamp it). No parent component may be a symlink (each is lstat-ed once,
  then cached); missing parents are created 0755 root:root. Whatever is in an entry's way
  is removed first, and files are never opened over an existing path (it may be a hard link).
- Hard link targets are names in the same root, with the same rules; the link takes the
  target inode's metadata as it is (GNU tar does the same).
- ustar, GNU (long names, base-256 numbers) and PAX (path, linkpath, size, uid, gid, mtime,
  ``SCHILY.xattr.*``) headers are read; PAX global headers are ignored; sparse files, volume
  labels and other types are refused. The first zero block ends the archive (everything after
  it is kept for the diff id); EOF right after an entry is accepted, anywhere else it is not.
- xattrs the filesystem refuses (ENOTSUP, EPERM) are logged and skipped; ``trusted.overlay.*``
  (and ``user.overlay.*``, ``security.selinux``) are never taken from nor written to a tar.

Skeleton format (version 1). A gzip stream whose content is ``b"svc-tar-skeleton 1\\n"`` then
records, each a one-byte tag and big-endian fields:

- ``R`` u32 length, bytes: archive bytes that are not regular-file payload (headers, PAX and GNU
  long-name blocks with their data, padding, payload of entries not stored as files, the
  end-of-archive blocks and any trailing bytes), verbatim.
- ``F`` u32 path length, u64 size, path: ``size`` payload bytes, to be read from the file at
  ``path`` (relative to the diff dir, as stored by ``apply_layer``).
- ``X`` u32 path length, path: a later entry of the same archive removed or replaced the file an
  earlier ``F`` names, so the archive can no longer be rebuilt (docker fails such a save too).
- ``E`` u64 total: end of skeleton; ``total`` is the length of the archive.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import queue
import shutil
import stat
import struct
import tarfile
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from svc.errors import InvalidParameter, SystemError_
from svc.storage.compression import open_decompressed

log = logging.getLogger("svc.storage.tarlayer")

BLOCK = 512
CHUNK = 1 << 20
MAX_META = 1 << 20  # largest PAX header / GNU long name buffered (Go's archive/tar uses 1 MiB)
SKELETON_MAGIC = b"svc-tar-skeleton 1\n"
WHITEOUT = b".wh."
WHITEOUT_META = b".wh..wh."
WHITEOUT_OPAQUE = b".wh..wh..opq"
OPAQUE_XATTR = b"trusted.overlay.opaque"
# Overlay's own bookkeeping is never taken from, nor written to, an archive: a layer must not be
# able to plant redirects or metacopy origins. SELinux labels are host policy, not image content.
_PRIVATE_XATTRS = (b"trusted.overlay.", b"user.overlay.", b"security.selinux")
_ZERO_BLOCK = bytes(BLOCK)
_REGULAR, _HARDLINK, _SYMLINK, _CHAR, _BLOCKDEV, _DIR, _FIFO = (
    b"0", b"1", b"2", b"3", b"4", b"5", b"6")
_ID_LIMIT = 2**32 - 1  # uid_t: (uid_t)-1 means "unchanged" to chown(2)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_U32, _U64, _F_HEAD = struct.Struct(">I"), struct.Struct(">Q"), struct.Struct(">IQ")


@dataclass(frozen=True)
class ApplyResult:
    """What ``apply_layer`` found."""

    diff_id: str  # "sha256:<hex>" of every byte of the archive
    size: int  # sum of the regular files' sizes
    tar_size: int  # length of the archive


def _show(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")


def _bad(message: str) -> InvalidParameter:
    return InvalidParameter(f"invalid layer archive: {message}")


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])


def _write_out(out: BinaryIO, data: bytes) -> None:
    """``out.write`` until all of ``data`` is taken (a raw stream may take less)."""
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            n = out.write(view[done:])
            if n is None:  # a non-blocking raw stream that is full
                raise SystemError_("layer output would block")
            done += n


def _pad(size: int) -> int:
    return -size % BLOCK


# ---------------------------------------------------------------- skeleton writing


class _SkeletonWriter:
    """Accumulates skeleton records and writes them gzip-compressed to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._z = zlib.compressobj(1, zlib.DEFLATED, 31)
        self._raw = bytearray()  # archive bytes for the next R record
        self._records = bytearray(SKELETON_MAGIC)

    def raw(self, data: bytes | memoryview) -> None:
        self._raw += data
        if len(self._raw) >= CHUNK:
            self._flush_raw()

    def file(self, path: bytes, size: int) -> None:
        self._flush_raw()
        self._records += b"F" + _F_HEAD.pack(len(path), size) + path
        self._compress()

    def stale(self, path: bytes) -> None:
        self._flush_raw()
        self._records += b"X" + _U32.pack(len(path)) + path

    def close(self, total: int) -> None:
        self._flush_raw()
        self._records += b"E" + _U64.pack(total)
        self._compress(force=True)
        _write_out(self._out, self._z.flush())

    def _flush_raw(self) -> None:
        if self._raw:
            self._records += b"R" + _U32.pack(len(self._raw)) + self._raw
            self._raw.clear()

    def _compress(self, force: bool = False) -> None:
        if force or len(self._records) >= CHUNK // 4:
            _write_out(self._out, self._z.compress(self._records))
            self._records.clear()


# ---------------------------------------------------------------- reading the archive


class _Hasher:
    """sha256 in a helper thread, so hashing overlaps the extraction's system calls."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)  # 8 MiB at most
        self._thread = threading.Thread(target=self._run, name="layer-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def close(self) -> str:
        """Stop the thread (idempotent); returns the hex digest of what was fed."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        return self._hash.hexdigest()


class _Input:
    """The archive stream: hashes every byte read; metadata bytes go to the skeleton."""

    def __init__(self, stream: BinaryIO, skeleton: _SkeletonWriter, hasher: _Hasher) -> None:
        self._stream = stream
        self._skel = skeleton
        self._hasher = hasher
        self._buf = b""
        self._view = memoryview(self._buf)
        self._pos = self._end = 0
        self.offset = 0  # absolute offset of the next unconsumed byte

    def _fill(self) -> bool:
        data = self._stream.read(CHUNK)
        if not data:
            return False
        if type(data) is not bytes:  # the hasher thread needs an immutable copy
            data = bytes(data)
        self._hasher.update(data)
        self._buf, self._view = data, memoryview(data)
        self._pos, self._end = 0, len(data)
        return True

    def meta(self, n: int) -> bytes:
        """Consume up to ``n`` (small) metadata bytes, recorded verbatim; short only at EOF."""
        pos = self._pos
        if self._end - pos >= n:
            data = self._buf[pos : pos + n]
            self._pos = pos + n
        else:
            parts = bytearray()
            while len(parts) < n and (self._pos < self._end or self._fill()):
                take = min(n - len(parts), self._end - self._pos)
                parts += self._view[self._pos : self._pos + take]
                self._pos += take
            data = bytes(parts)
        self._skel.raw(data)
        self.offset += len(data)
        return data

    def _chunk(self, n: int) -> memoryview:
        """The next at most ``n`` buffered bytes (consumed); raises at EOF."""
        if self._pos == self._end and not self._fill():
            raise _bad("unexpected end of data")
        take = min(n, self._end - self._pos)
        view = self._view[self._pos : self._pos + take]
        self._pos += take
        self.offset += take
        return view

    def skip(self, n: int) -> None:
        """Consume ``n`` bytes recorded verbatim (discarded payload, trailing data)."""
        while n:
            view = self._chunk(n)
            self._skel.raw(view)
            n -= len(view)

    def copy(self, fd: int, n: int) -> None:
        """Write ``n`` payload bytes to ``fd`` (not recorded: the skeleton refers to the file)."""
        while n:
            if self._pos == self._end and not self._fill():
                raise _bad("unexpected end of data")
            pos = self._pos
            written = os.write(fd, self._view[pos : min(pos + n, self._end)])
            self._pos = pos + written
            self.offset += written
            n -= written

    def drain(self) -> None:
        """Record everything up to EOF: the end-of-archive blocks and whatever trails them."""
        while self._pos < self._end or self._fill():
            self.skip(self._end - self._pos)


@dataclass(slots=True)
class _Entry:
    name: bytes
    kind: bytes
    mode: int
    uid: int
    gid: int
    size: int  # payload bytes that follow the header
    mtime_ns: int
    linkname: bytes
    devmajor: int
    devminor: int
    xattrs: dict[bytes, bytes]


def _num(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 when the high bit is set."""
    try:
        return int(field.rstrip(b"\0 "), 8)  # fast path: "0000644\0", "  644 \0", "015341\0 "
    except ValueError:
        pass
    if field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0xFF else value
    text = field.partition(b"\0")[0]
    return int(text, 8) if text.strip() else 0


def _checksum_ok(block: bytes) -> bool:
    """Unsigned header sum (checksum field as spaces); signed too, as some old tars wrote it."""
    view = memoryview(block)
    # Each half sums to at most 65280 < 65521, so Adler-32's low half is its exact byte sum + 1.
    total = (zlib.adler32(view[:256]) & 0xFFFF) + (zlib.adler32(view[256:]) & 0xFFFF) - 2
    try:
        stored = _num(block[148:156])
    except ValueError:
        return False
    if stored == total - sum(block[148:156]) + 256:
        return True
    signed: tuple[int, ...] = struct.unpack_from("148b", block)
    signed += struct.unpack_from("356b", block, 156)
    return stored == 256 + sum(signed)


def _pax_records(data: bytes) -> dict[bytes, bytes]:
    """Parse PAX ``"<len> key=value\\n"`` records (values kept as raw bytes)."""
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos]:
        space = data.find(b" ", pos)
        length = int(data[pos:space]) if space > pos else 0
        record = data[pos : pos + length]
        key, eq, value = record[space - pos + 1 : -1].partition(b"=")
        if length <= 0 or len(record) != length or not record.endswith(b"\n") or not eq:
            raise ValueError("malformed PAX record")
        records[key] = value
        pos += length
    return records


def _pax_time_ns(text: bytes) -> int:
    negative = text.startswith(b"-")
    whole, _, frac = text.lstrip(b"-").partition(b".")
    ns = int(whole or b"0") * 1_000_000_000 + int((frac + b"000000000")[:9])
    return -ns if negative else ns


class _TarReader:
    """Yields the entries of a tar stream; every byte flows through ``_Input``."""

    def __init__(self, inp: _Input) -> None:
        self._in = inp
        self._left = 0  # unread payload of the current entry
        self._pad = 0

    def next(self) -> _Entry | None:
        """The next entry, with GNU long names and PAX records applied; None at the end."""
        if self._left:
            self._in.skip(self._left)
        pad, self._left, self._pad = self._pad, 0, 0
        longname = longlink = None
        pax: dict[bytes, bytes] = {}
        while True:
            at = self._in.offset + pad
            data = self._in.meta(pad + BLOCK)  # the last entry's padding, then a header
            block = data[pad:] if pad else data
            extended = bool(pax) or longname is not None or longlink is not None
            if len(block) < BLOCK:
                if not block and len(data) == pad and not extended:
                    return None  # EOF right after an entry: accepted, as Go's archive/tar does
                raise _bad("unexpected end of data")
            pad = 0
            if block == _ZERO_BLOCK:
                if extended:
                    raise _bad(f"extended header without an entry at offset {at}")
                self._in.drain()
                return None
            if not _checksum_ok(block):
                raise _bad(f"bad header checksum at offset {at} (not a tar archive?)")
            try:
                kind, size = block[156:157], _num(block[124:136])
                if kind not in (b"x", b"g", b"L", b"K"):
                    return self._entry(block, kind, size, longname, longlink, pax)
            except ValueError as exc:
                raise _bad(f"malformed header at offset {at}: {exc}") from exc
            if not 0 <= size <= MAX_META:
                raise _bad(f"extended header at offset {at} is too large ({size} bytes)")
            data = self._in.meta(size + _pad(size))[:size]
            if len(data) < size:
                raise _bad("unexpected end of data")
            if kind == b"x":
                try:
                    pax.update(_pax_records(data))
                except ValueError as exc:
                    raise _bad(f"malformed PAX header at offset {at}") from exc
            elif kind == b"L":
                longname = data.partition(b"\0")[0]
            elif kind == b"K":
                longlink = data.partition(b"\0")[0]
            # "g" (PAX global header): recorded, otherwise ignored, as moby does.

    def copy_payload(self, fd: int) -> None:
        """Write the current entry's payload to ``fd``."""
        left, self._left = self._left, 0
        self._in.copy(fd, left)

    def _entry(self, block: bytes, kind: bytes, size: int, longname: bytes | None,
               longlink: bytes | None, pax: dict[bytes, bytes]) -> _Entry:
        if longname is None:
            longname = block[0:100].partition(b"\0")[0]
            if block[257:263] == b"ustar\0" and block[345]:  # POSIX prefix (not GNU headers)
                longname = block[345:500].partition(b"\0")[0] + b"/" + longname
        if longlink is None:
            longlink = block[157:257].partition(b"\0")[0] if block[157] else b""
        device = kind in (_CHAR, _BLOCKDEV)
        e = _Entry(longname, kind, _num(block[100:108]) & 0o7777, _num(block[108:116]),
                   _num(block[116:124]), size, _num(block[136:148]) * 1_000_000_000, longlink,
                   _num(block[329:337]) if device else 0, _num(block[337:345]) if device else 0,
                   {})
        if pax:
            for key, value in pax.items():
                self._pax_override(e, key, value)
        if e.kind == b"\0":
            e.kind = _DIR if e.name.endswith(b"/") else _REGULAR
        elif e.kind == b"7":  # contiguous file
            e.kind = _REGULAR
        if e.kind != _REGULAR:  # header-only types carry no payload (as Go's archive/tar)
            e.size = 0
        if e.size < 0 or not 0 <= e.uid < _ID_LIMIT or not 0 <= e.gid < _ID_LIMIT \
                or not 0 <= e.devmajor < _ID_LIMIT or not 0 <= e.devminor < _ID_LIMIT \
                or not -(2**63) <= e.mtime_ns // 1_000_000_000 < 2**63:  # time_t
            raise ValueError(f'entry "{_show(e.name)}": size, owner, device or time out of range')
        self._left, self._pad = e.size, _pad(e.size)
        return e

    @staticmethod
    def _pax_override(e: _Entry, key: bytes, value: bytes) -> None:
        if key == b"path":
            e.name = value
        elif key == b"linkpath":
            e.linkname = value
        elif key in (b"size", b"uid", b"gid"):
            setattr(e, key.decode(), int(value))
        elif key == b"mtime":
            e.mtime_ns = _pax_time_ns(value)
        elif key.startswith(b"SCHILY.xattr."):
            e.xattrs[key[len(b"SCHILY.xattr.") :]] = value
        elif key.startswith(b"GNU.sparse."):
            raise _bad(f'entry "{_show(e.name)}" is a sparse file, which is not supported')


# ---------------------------------------------------------------- applying


def _clean(raw: bytes) -> bytes:
    """The entry name relative to the layer root; a leading ``/`` is dropped (as moby does)."""
    if b"\0" in raw:
        raise _bad(f'entry "{_show(raw)}" has a NUL byte in its name')
    name = raw
    while name.startswith(b"./"):
        name = name[2:]
    if not name.startswith((b"/", b"../")) and b"/./" not in name and b"/../" not in name \
            and b"//" not in name and not name.endswith((b"/.", b"/..")) \
            and name not in (b".", b".."):
        return name.rstrip(b"/")  # the common case: nothing to clean
    parts: list[bytes] = []
    for part in name.split(b"/"):
        if part == b"..":
            if not parts:
                raise _bad(f'entry "{_show(raw)}" escapes the layer root')
            parts.pop()
        elif part not in (b"", b"."):
            parts.append(part)
    return b"/".join(parts)


class _Applier:
    """Creates entries under ``dest`` without ever following a symlink found there."""

    def __init__(self, dest: Path, reader: _TarReader, skeleton: _SkeletonWriter) -> None:
        self._root = os.fsencode(dest)
        self._reader = reader
        self._skel = skeleton
        self._dirs: set[bytes] = {b""}  # paths known to be real directories (not symlinks)
        self._dir_times: dict[bytes, int] = {}  # set last: creating entries changes them
        self._files: set[bytes] = set()  # regular files the skeleton refers to
        self.size = 0

    def _abs(self, rel: bytes) -> bytes:
        return self._root + b"/" + rel if rel else self._root

    def apply(self, e: _Entry) -> None:
        rel = _clean(e.name)
        base = rel.rpartition(b"/")[2]
        if base.startswith(WHITEOUT):
            self._whiteout(e, rel, base)
        elif not rel and e.kind != _DIR:
            raise _bad(f'entry "{_show(e.name)}" would replace the layer root')
        elif e.kind == _REGULAR:
            self._regular(e, rel)
        elif e.kind == _DIR:
            self._directory(e, rel)
        elif e.kind == _SYMLINK:
            self._parents(rel, e.name)
            self._create(rel, lambda p: os.symlink(e.linkname, p))
            self._metadata(e, self._abs(rel), chmod=False)
        elif e.kind == _HARDLINK:
            self._hardlink(e, rel)
        elif e.kind in (_CHAR, _BLOCKDEV, _FIFO):
            fmt = {_CHAR: stat.S_IFCHR, _BLOCKDEV: stat.S_IFBLK, _FIFO: stat.S_IFIFO}[e.kind]
            dev = os.makedev(e.devmajor, e.devminor) if e.kind != _FIFO else 0
            self._parents(rel, e.name)
            self._create(rel, lambda p: os.mknod(p, fmt | 0o600, dev))
            self._metadata(e, self._abs(rel))
        else:
            raise _bad(f'entry "{_show(e.name)}" has unsupported type {e.kind!r}')

    def finish(self) -> None:
        """Set directory times last, once nothing is created in them any more."""
        for rel, ns in self._dir_times.items():
            os.utime(self._abs(rel), ns=(ns, ns), follow_symlinks=False)

    def _parents(self, rel: bytes, raw: bytes, *, create: bool = True) -> None:
        """Make sure every parent of ``rel`` is a real directory, creating missing ones (0755)."""
        parent = rel.rpartition(b"/")[0]
        if parent in self._dirs:
            return
        cur = b""
        for part in parent.split(b"/"):
            cur = cur + b"/" + part if cur else part
            if cur in self._dirs:
                continue
            path = self._abs(cur)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    raise _bad(f'hard link target "{_show(raw)}" does not exist') from None
                os.mkdir(path)
                os.chmod(path, 0o755)
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise _bad(f'entry "{_show(raw)}" would be written through the symbolic '
                               f'link "{_show(cur)}"')
                if not stat.S_ISDIR(st.st_mode):
                    raise _bad(f'entry "{_show(raw)}": "{_show(cur)}" is not a directory')
            self._dirs.add(cur)

    def _create(self, rel: bytes, make: Callable[[bytes], None]) -> None:
        """Run ``make(path)``; if something is in the way, remove it and retry once."""
        path = self._abs(rel)
        try:
            make(path)
        except FileExistsError:
            self._remove(rel)
            make(path)

    def _remove(self, rel: bytes) -> None:
        """Delete whatever is at ``rel`` (a tree, for a directory) and forget what it held."""
        path = self._abs(rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
            prefix = rel + b"/"
            self._dirs = {d for d in self._dirs if d != rel and not d.startswith(prefix)}
            for gone in [d for d in self._dir_times if d == rel or d.startswith(prefix)]:
                del self._dir_times[gone]
            stale = [f for f in self._files if f.startswith(prefix)]
        else:
            os.unlink(path)
            stale = [rel] if rel in self._files else []
        for name in stale:  # an earlier payload is gone: the skeleton cannot rebuild it
            self._files.discard(name)
            self._skel.stale(name)

    def _regular(self, e: _Entry, rel: bytes) -> None:
        if rel.rpartition(b"/")[0] not in self._dirs:
            self._parents(rel, e.name)
        path = self._root + b"/" + rel
        try:
            fd = os.open(path, _CREATE, 0o600)
        except FileExistsError:  # never truncate in place: it may be a hard link
            self._remove(rel)
            fd = os.open(path, _CREATE, 0o600)
        try:
            self._skel.file(rel, e.size)
            if e.size:
                self._reader.copy_payload(fd)
            # Owner, then mode (chown clears setuid), then xattrs (chown drops capabilities).
            os.fchown(fd, e.uid, e.gid)
            os.fchmod(fd, e.mode)
            if e.xattrs:
                _set_xattrs(e, fd)
            os.utime(fd, ns=(e.mtime_ns, e.mtime_ns))
        finally:
            os.close(fd)
        self._files.add(rel)
        self.size += e.size

    def _directory(self, e: _Entry, rel: bytes) -> None:
        self._parents(rel, e.name)
        path = self._abs(rel)
        if rel not in self._dirs:
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    self._remove(rel)
                    os.mkdir(path, 0o700)
            self._dirs.add(rel)
        self._metadata(e, path, times=False)
        self._dir_times[rel] = e.mtime_ns

    def _hardlink(self, e: _Entry, rel: bytes) -> None:
        """Link to an earlier entry; its inode keeps its own metadata (as GNU tar does)."""
        try:
            target = _clean(e.linkname)
        except InvalidParameter:
            raise _bad(f'hard link "{_show(e.name)}" points outside the layer root '
                       f'("{_show(e.linkname)}")') from None
        self._parents(target, e.linkname, create=False)
        self._parents(rel, e.name)
        try:
            self._create(rel, lambda p: os.link(self._abs(target), p, follow_symlinks=False))
        except (FileNotFoundError, PermissionError) as exc:
            what = "does not exist" if isinstance(exc, FileNotFoundError) else "is a directory"
            raise _bad(f'hard link target "{_show(e.linkname)}" of "{_show(e.name)}" '
                       f"{what}") from None

    def _whiteout(self, e: _Entry, rel: bytes, base: bytes) -> None:
        """``.wh.<name>``: a 0:0 char device at ``<name>``; ``.wh..wh..opq``: opaque parent."""
        self._parents(rel, e.name)
        parent = rel.rpartition(b"/")[0]
        if base == WHITEOUT_OPAQUE:
            os.setxattr(self._abs(parent), OPAQUE_XATTR, b"y", follow_symlinks=False)
        elif not base.startswith(WHITEOUT_META):  # other .wh..wh.* names are aufs metadata
            hidden = base[len(WHITEOUT) :]
            if hidden in (b"", b".", b".."):
                raise _bad(f'whiteout "{_show(e.name)}" names no file')
            target = parent + b"/" + hidden if parent else hidden
            self._remove(target)
            os.mknod(self._abs(target), stat.S_IFCHR, 0)
            os.chown(self._abs(target), e.uid, e.gid, follow_symlinks=False)

    def _metadata(self, e: _Entry, path: bytes, *, chmod: bool = True,
                  times: bool = True) -> None:
        """Owner, then mode (chown clears setuid), then xattrs (chown drops capabilities)."""
        os.chown(path, e.uid, e.gid, follow_symlinks=False)
        if chmod:  # never a symlink here: those are called with chmod=False
            os.chmod(path, e.mode)
        if e.xattrs:
            _set_xattrs(e, path)
        if times:
            os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)


def _set_xattrs(e: _Entry, target: int | bytes) -> None:
    for key, value in e.xattrs.items():
        if key.startswith(_PRIVATE_XATTRS):
            continue
        try:
            if isinstance(target, int):
                os.setxattr(target, key, value)
            else:
                os.setxattr(target, key, value, follow_symlinks=False)
        except OSError as exc:
            # moby ignores these too: not every filesystem takes every namespace.
            if exc.errno not in (errno.ENOTSUP, errno.EPERM):
                raise
            log.warning("xattr %s of %s not set: %s", _show(key), _show(e.name), exc)


def apply_layer(stream: BinaryIO, dest: Path, skeleton_out: BinaryIO) -> ApplyResult:
    """Unpack the uncompressed layer tar ``stream`` into the directory ``dest``.

    Names are taken relative to ``dest`` (a leading ``/`` is dropped, as moby does); an entry
    whose name or hard link target climbs above the root with ``..``, or whose parent path
    holds a symlink, is refused. Symlinks themselves may point anywhere: they are never followed.

    Args:
      stream: the tar, read to EOF; compose with ``open_decompressed`` for compressed blobs.
      dest: an existing directory, normally empty.
      skeleton_out: receives the skeleton (module docstring) for ``write_layer_from_skeleton``.

    Returns:
      The diff id (sha256 of every byte read, trailing bytes included) and the payload size.

    Raises:
      InvalidParameter: the archive is malformed, truncated or malicious.

    Cancellation: blocking, not a checkpoint. On any error or crash ``dest`` and the skeleton are
    left half-written and must be discarded; nothing outside ``dest`` was touched.
    """
    skeleton = _SkeletonWriter(skeleton_out)
    hasher = _Hasher()
    try:
        inp = _Input(stream, skeleton, hasher)
        reader = _TarReader(inp)
        applier = _Applier(dest, reader, skeleton)
        while (entry := reader.next()) is not None:
            applier.apply(entry)
        applier.finish()
        skeleton.close(inp.offset)
    finally:
        digest = hasher.close()
    return ApplyResult(f"sha256:{digest}", applier.size, inp.offset)


# ---------------------------------------------------------------- rebuilding from a skeleton

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
        if self._fd is None:
            _write_out(self._out, bytes(self._buf))
        else:
            _write_all(self._fd, self._buf)
        self._buf.clear()

    def close(self) -> None:
        self.flush()
        if self._fd is not None and self._out.seekable():
            self._out.seek(os.lseek(self._fd, 0, os.SEEK_CUR))  # resync the file object

    def copy_file(self, fd: int, size: int) -> int:
        """Send ``size`` bytes of ``fd``; returns how many it could (fewer if the file shrank)."""
        if size <= _SMALL_FILE or self._fd is None:
            done = 0
            while done < size and (data := os.read(fd, min(size - done, CHUNK))):
                self.write(data)
                done += len(data)
            return done
        self.flush()
        done = 0
        while done < size and (n := os.sendfile(self._fd, fd, done, min(size - done, 1 << 30))):
            done += n
        self.total += done
        return done


def _emit_file(sink: _Sink, diff_dir: Path, rel: bytes, size: int) -> None:
    path = os.path.join(os.fsencode(diff_dir), rel)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SystemError_(f'layer {diff_dir}: file "{_show(rel)}" cannot be read: '
                           f"{exc.strerror}") from exc
    try:
        found = os.fstat(fd).st_size
        if found != size or sink.copy_file(fd, size) != size:
            raise SystemError_(f'layer {diff_dir}: file "{_show(rel)}" has changed '
                               f"(size {found}, the layer archive holds {size} bytes)")
    finally:
        os.close(fd)


def write_layer_from_skeleton(skeleton: BinaryIO, diff_dir: Path, out: BinaryIO) -> None:
    """Write the exact layer tar that ``apply_layer`` read, from its skeleton and ``diff_dir``.

    Args:
      skeleton: the skeleton ``apply_layer`` wrote, read sequentially.
      diff_dir: the directory the layer was applied to.
      out: receives the tar; if it has a file descriptor that is written directly (blocking).

    Raises:
      SystemError_: the skeleton is damaged, or a payload file is missing or changed.

    Cancellation: blocking, not a checkpoint; on an error ``out`` holds a truncated tar.
    """
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

    if read(len(SKELETON_MAGIC)) != SKELETON_MAGIC:
        raise SystemError_(f"layer {diff_dir}: the skeleton is damaged (unknown format)")
    sink = _Sink(out)
    while (tag := read(1)) != b"E":
        if tag == b"R":
            sink.write(read(_U32.unpack(read(4))[0]))
        elif tag == b"F":
            length, size = _F_HEAD.unpack(read(_F_HEAD.size))
            _emit_file(sink, diff_dir, read(length), size)
        elif tag == b"X":
            name = _show(read(_U32.unpack(read(4))[0]))
            raise SystemError_(f'layer {diff_dir} cannot be exported: its archive replaced '
                               f'the file "{name}" after writing it')
        else:
            raise SystemError_(f"layer {diff_dir}: the skeleton is damaged (record {tag!r})")
    total = _U64.unpack(read(8))[0]
    sink.close()
    if sink.total != total:
        raise SystemError_(f"layer {diff_dir}: rebuilt {sink.total} bytes, expected {total}")


# ---------------------------------------------------------------- producing from a directory


class _HashingOut:
    """Writes to ``out`` through a buffer; a ``_Hasher`` thread hashes every byte."""

    def __init__(self, out: BinaryIO, hasher: _Hasher) -> None:
        self._out = out
        self._buf = bytearray()
        self._hasher = hasher

    def write(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        chunk = bytes(self._buf)
        self._hasher.update(chunk)
        _write_out(self._out, chunk)
        self._buf.clear()


def _xattrs(path: bytes) -> dict[str, str]:
    """The entry's xattrs as PAX records (values surrogate-escaped, so binary survives)."""
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EPERM):
            return {}
        raise
    records = {}
    for name in sorted(names):
        if not name.encode().startswith(_PRIVATE_XATTRS):
            value = os.getxattr(path, name, follow_symlinks=False)
            records[f"SCHILY.xattr.{name}"] = value.decode("utf-8", "surrogateescape")
    return records


def _info(rel: bytes, st: os.stat_result, kind: bytes, *, mode: int | None = None,
          size: int = 0, linkname: bytes = b"", pax: dict[str, str] | None = None
          ) -> tarfile.TarInfo:
    info = tarfile.TarInfo(os.fsdecode(rel))
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode) if mode is None else mode
    info.uid, info.gid, info.size = st.st_uid, st.st_gid, size
    info.mtime = int(st.st_mtime)  # whole seconds, as moby writes them
    info.uname = info.gname = ""
    info.linkname = os.fsdecode(linkname)
    info.pax_headers = pax or {}
    if kind in (_CHAR, _BLOCKDEV):
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return info


def _produce_entry(out: _HashingOut, root: bytes, rel: bytes, st: os.stat_result,
                   seen: dict[tuple[int, int], bytes]) -> None:
    """Write the tar entry (or entries) for one path of the upper dir."""
    path = root + b"/" + rel
    mode = st.st_mode
    head, _, base = rel.rpartition(b"/")
    if stat.S_ISCHR(mode) and st.st_rdev == 0:  # overlay whiteout -> aufs .wh. file
        name = (head + b"/" if head else b"") + WHITEOUT + base
        out.write(_tobuf(_info(name, st, _REGULAR, mode=0o600)))
        return
    key = (st.st_dev, st.st_ino)
    if not stat.S_ISDIR(mode) and st.st_nlink > 1:
        if key in seen:
            out.write(_tobuf(_info(rel, st, _HARDLINK, linkname=seen[key])))
            return
        seen[key] = rel
    pax = _xattrs(path)
    if stat.S_ISREG(mode):
        out.write(_tobuf(_info(rel, st, _REGULAR, size=st.st_size, pax=pax)))
        _produce_payload(out, path, rel, st.st_size)
    elif stat.S_ISDIR(mode):
        out.write(_tobuf(_info(rel, st, _DIR, pax=pax)))
        if _is_opaque(path):
            opq = _info(rel + b"/" + WHITEOUT_OPAQUE, st, _REGULAR, mode=mode & 0o777)
            out.write(_tobuf(opq))
    elif stat.S_ISLNK(mode):
        out.write(_tobuf(_info(rel, st, _SYMLINK, linkname=os.readlink(path), pax=pax)))
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        kind = _CHAR if stat.S_ISCHR(mode) else _BLOCKDEV if stat.S_ISBLK(mode) else _FIFO
        out.write(_tobuf(_info(rel, st, kind, pax=pax)))
    else:  # sockets cannot be archived; moby skips them too
        log.info("not archiving socket %s", _show(path))


def _is_opaque(path: bytes) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            return False
        raise


def _tobuf(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _produce_payload(out: _HashingOut, path: bytes, rel: bytes, size: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        left = size
        while left and (data := os.read(fd, min(left, CHUNK))):
            out.write(data)
            left -= len(data)
        if left or os.read(fd, 1):
            raise SystemError_(f'file "{_show(rel)}" changed size while it was archived')
    finally:
        os.close(fd)
    out.write(bytes(_pad(size)))


def produce_layer(src: Path, out: BinaryIO) -> str:
    """Write the layer tar of the overlay upper dir ``src`` to ``out``; returns its diff id.

    Entries come in sorted depth-first order without a ``./`` entry, as PAX tars with whole
    second mtimes (as moby writes them). Whiteout devices become ``.wh.<name>`` files, an opaque
    directory is followed by its ``.wh..wh..opq`` entry, overlay xattrs are left out, and files
    sharing an inode become hard links to the first one written.

    Raises:
      SystemError_: a file changed size while it was read.

    Cancellation: blocking, not a checkpoint; on an error ``out`` holds a truncated tar.
    """
    hasher = _Hasher()
    try:
        sink = _HashingOut(out, hasher)
        root = os.fsencode(src)
        seen: dict[tuple[int, int], bytes] = {}
        stack = sorted(os.listdir(root), reverse=True)
        while stack:
            rel = stack.pop()
            st = os.lstat(root + b"/" + rel)
            _produce_entry(sink, root, rel, st, seen)
            if stat.S_ISDIR(st.st_mode):
                children = sorted(os.listdir(root + b"/" + rel), reverse=True)
                stack.extend(rel + b"/" + name for name in children)
        sink.write(bytes(2 * BLOCK))
        sink.flush()
    finally:
        digest = hasher.close()
    return f"sha256:{digest}"
