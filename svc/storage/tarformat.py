"""Reading tar archives: header parsing, extended headers, and the byte stream under them.

What ``TarReader`` accepts (as Go's ``archive/tar`` does, unless noted):

- ustar, GNU (long names, base-256 numbers) and PAX (path, linkpath, size, uid, gid, mtime,
  ``SCHILY.xattr.*``) headers are read; PAX global headers are ignored; GNU sparse files in
  every format GNU tar writes (``tarsparse``) are unpacked with their holes; volume labels
  and other types are refused. The first zero block ends the archive (everything after
  it is kept for the diff id); EOF right after an entry is accepted, anywhere else it is not.

Every byte ``TarReader`` reads is hashed (``svc.storage.layerworker``), and whatever is not
regular-file payload is recorded in the skeleton (``svc.storage.skeleton``). Also here: the
constants and small helpers the apply, produce and rebuild modules share.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from svc.errors import SystemError_
from svc.storage import tarsparse
from svc.storage.compression import unchanging
from svc.storage.tarfields import BLOCK as BLOCK  # re-exported: the layer modules' too
from svc.storage.tarfields import bad as bad
from svc.storage.tarfields import checksum_ok, num, pax_records, pax_time_ns
from svc.storage.tarfields import show as show

if TYPE_CHECKING:
    from svc.storage.layerworker import Hasher
    from svc.storage.skeleton import SkeletonWriter

CHUNK = 1 << 20
MAX_META = 1 << 20  # largest PAX header / GNU long name buffered (Go's archive/tar uses 1 MiB)
WHITEOUT = b".wh."
WHITEOUT_META = b".wh..wh."
WHITEOUT_OPAQUE = b".wh..wh..opq"
OPAQUE_XATTR = b"trusted.overlay.opaque"
# Overlay's own bookkeeping is never taken from, nor written to, an archive: a layer must not be
# able to plant redirects or metacopy origins. SELinux labels are host policy, not image content.
PRIVATE_XATTRS = (b"trusted.overlay.", b"user.overlay.", b"security.selinux")
_ZERO_BLOCK = bytes(BLOCK)
GNU_SPARSE = b"S"
REGULAR, HARDLINK, SYMLINK, CHAR, BLOCKDEV, DIR, FIFO = (
    b"0", b"1", b"2", b"3", b"4", b"5", b"6")
_ID_LIMIT = 2**32 - 1  # uid_t: (uid_t)-1 means "unchanged" to chown(2)
_FAST_KINDS = (REGULAR, HARDLINK, SYMLINK, DIR)  # see TarReader.next


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            done += os.write(fd, view[done:])


def write_out(out: BinaryIO, data: bytes | bytearray) -> None:
    """``out.write`` until all of ``data`` is taken (a raw stream may take less).

    The object itself goes first: a writer that keeps it (the save stream) then copies nothing.
    """
    first = out.write(data)
    if first is None:
        raise SystemError_("layer output would block")
    if first >= len(data):
        return
    with memoryview(data) as view:
        done = first
        while done < len(view):
            n = out.write(view[done:])
            if n is None:  # a non-blocking raw stream that is full
                raise SystemError_("layer output would block")
            done += n


def padding(size: int) -> int:
    return -size % BLOCK


@dataclass(slots=True)
class Entry:
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
    # a GNU sparse file: its data segments (offset, length) in a file of ``real_size``
    sparse: list[tuple[int, int]] | None = None
    real_size: int = 0


class TarReader:
    """Yields the entries of a tar stream read in large chunks.

    Every byte read is handed to the ``Hasher``; every byte that is not regular-file payload
    (headers, extended headers, padding, skipped payload, the end of the archive and whatever
    trails it) is recorded in the skeleton, verbatim and in order.
    """

    def __init__(self, stream: BinaryIO, skeleton: SkeletonWriter, hasher: Hasher) -> None:
        self._stream = stream
        self._skel = skeleton
        self._hasher = hasher
        self._view = memoryview(b"")  # the chunk read last
        self._pos = self._end = 0
        self._base = 0  # archive offset of self._view[0]
        self._left = 0  # unread payload of the current entry
        self._pad = 0  # and the padding after it
        # (mode, uid, gid) by their header bytes: the entries of a layer share a few of them.
        self._ids: dict[bytes, tuple[int, int, int]] = {}

    @property
    def offset(self) -> int:
        """Absolute offset of the next unconsumed byte."""
        return self._base + self._pos

    def next(self) -> Entry | None:
        """The next entry, with GNU long names and PAX records applied; None at the end."""
        if self._left:
            self._skip(self._left)
            self._left = 0
        pad = self._pad
        # Fast path: a plain ustar/GNU header of a common type, wholly in the buffer, in ASCII,
        # with its checksum formatted as every tar writer does and plain octal numbers. Anything
        # else, or anything wrong, is left to the general path, which reads it from the same place.
        pos = self._pos
        end = pos + pad + BLOCK
        if end <= self._end:
            block = bytes(self._view[end - BLOCK : end])
            kind = block[156:157]
            if kind in _FAST_KINDS and block.isascii():
                field = block[148:156]
                # 512 bytes below 128 sum to at most 65024 < 65521: Adler-32's low half is the
                # byte sum + 1. The checksum counts its own field as 8 spaces (256).
                unsigned = (zlib.adler32(block) & 0xFFFF) + 255 - sum(field)
                if field == b"%06o\0 " % unsigned:
                    entry = self._fast_entry(block, kind)
                    if entry is not None:
                        self._skel.raw(self._view[pos:end])
                        self._pos = end
                        return entry
        self._pad = 0
        return self._next(pad)

    def _fast_entry(self, block: bytes, kind: bytes) -> Entry | None:
        """``block`` as an entry if every field is plain (the general path agrees), else None."""
        ids = self._ids.get(block[100:124])
        try:
            if ids is None:
                ids = (int(block[100:108].rstrip(b"\0 "), 8) & 0o7777,
                       int(block[108:116].rstrip(b"\0 "), 8),
                       int(block[116:124].rstrip(b"\0 "), 8))
                if not (0 <= ids[1] < _ID_LIMIT and 0 <= ids[2] < _ID_LIMIT):
                    return None
                if len(self._ids) < 1024:
                    self._ids[block[100:124]] = ids
            size = int(block[124:136].rstrip(b"\0 "), 8)
            mtime = int(block[136:148].rstrip(b"\0 "), 8)
        except ValueError:
            return None
        if kind != REGULAR:  # header-only types carry no payload (as Go's archive/tar)
            size = 0
        if size < 0 or not -(2**63) <= mtime < 2**63:
            return None
        name = block[0:100].partition(b"\0")[0]
        if block[257:263] == b"ustar\0" and block[345]:  # POSIX prefix (not GNU headers)
            name = block[345:500].partition(b"\0")[0] + b"/" + name
        linkname = block[157:257].partition(b"\0")[0] if block[157] else b""
        self._left, self._pad = size, -size % BLOCK
        return Entry(name, kind, ids[0], ids[1], ids[2], size, mtime * 1_000_000_000, linkname,
                     0, 0, {})

    def _next(self, pad: int) -> Entry | None:
        """The general path of ``next``, after ``pad`` bytes of padding."""
        longname = longlink = None
        pax: dict[bytes, bytes] = {}
        while True:
            at = self.offset + pad
            data = self._meta(pad + BLOCK)  # the last entry's padding, then a header
            block = data[pad:] if pad else data
            extended = bool(pax) or longname is not None or longlink is not None
            if len(block) < BLOCK:
                if not block and len(data) == pad and not extended:
                    return None  # EOF right after an entry: accepted, as Go's archive/tar does
                raise bad("unexpected end of data")
            pad = 0
            if block == _ZERO_BLOCK:
                if extended:
                    raise bad(f"extended header without an entry at offset {at}")
                self._drain()
                return None
            if not checksum_ok(block):
                raise bad(f"bad header checksum at offset {at} (not a tar archive?)")
            try:
                kind, size = block[156:157], num(block[124:136])
                if kind not in (b"x", b"g", b"L", b"K"):
                    return self._entry(block, kind, size, longname, longlink, pax)
            except ValueError as exc:
                raise bad(f"malformed header at offset {at}: {exc}") from exc
            if not 0 <= size <= MAX_META:
                raise bad(f"extended header at offset {at} is too large ({size} bytes)")
            data = self._meta(size + padding(size))[:size]
            if len(data) < size:
                raise bad("unexpected end of data")
            if kind == b"x":
                try:
                    pax.update(pax_records(data))
                except ValueError as exc:
                    raise bad(f"malformed PAX header at offset {at}") from exc
            elif kind == b"L":
                longname = data.partition(b"\0")[0]
            elif kind == b"K":
                longlink = data.partition(b"\0")[0]
            # "g" (PAX global header): recorded, otherwise ignored, as moby does.

    def copy_sparse(self, fd: int, segments: list[tuple[int, int]], real_size: int) -> None:
        """Write a sparse entry's data segments where its map puts them in ``fd`` (a new,
        empty file), leaving holes, then give the file its real size."""
        for offset, length in segments:
            os.lseek(fd, offset, os.SEEK_SET)
            self.copy_payload(fd, length)
        os.ftruncate(fd, real_size)

    def copy_payload(self, fd: int, n: int | None = None) -> None:
        """Write the current entry's payload (or its next ``n`` bytes) to ``fd`` (not
        recorded: the skeleton names it)."""
        if n is None:
            n = self._left
        self._left -= n
        pos = self._pos
        if n <= self._end - pos:  # the common case: all of it is buffered
            written = os.write(fd, self._view[pos : pos + n])
            self._pos = pos + written
            n -= written
        while n:
            pos = self._pos
            if pos == self._end:
                if not self._fill():
                    raise bad("unexpected end of data")
                pos = 0
            written = os.write(fd, self._view[pos : min(pos + n, self._end)])
            self._pos = pos + written
            n -= written

    def _fill(self) -> bool:
        data = self._stream.read(CHUNK)
        if not data:
            return False
        chunk = unchanging(data)  # (the hasher's thread reads it later)
        self._hasher.update(chunk)
        self._base += self._end
        self._view = memoryview(chunk)
        self._pos, self._end = 0, len(data)
        return True

    def _meta(self, n: int) -> bytes:
        """Consume up to ``n`` (small) metadata bytes, recorded verbatim; short only at EOF."""
        pos = self._pos
        if self._end - pos >= n:
            data = bytes(self._view[pos : pos + n])
            self._pos = pos + n
        else:
            parts = bytearray()
            while len(parts) < n and (self._pos < self._end or self._fill()):
                take = min(n - len(parts), self._end - self._pos)
                parts += self._view[self._pos : self._pos + take]
                self._pos += take
            data = bytes(parts)
        self._skel.raw(data)
        return data

    def _skip(self, n: int) -> None:
        """Consume ``n`` bytes recorded verbatim (discarded payload, trailing data)."""
        while n:
            if self._pos == self._end and not self._fill():
                raise bad("unexpected end of data")
            take = min(n, self._end - self._pos)
            self._skel.raw(self._view[self._pos : self._pos + take])
            self._pos += take
            n -= take

    def _drain(self) -> None:
        """Record everything up to EOF: the end-of-archive blocks and whatever trails them."""
        while self._pos < self._end or self._fill():
            self._skip(self._end - self._pos)

    def _entry(self, block: bytes, kind: bytes, size: int, longname: bytes | None,
               longlink: bytes | None, pax: dict[bytes, bytes]) -> Entry:
        if longname is None:
            longname = block[0:100].partition(b"\0")[0]
            if block[257:263] == b"ustar\0" and block[345]:  # POSIX prefix (not GNU headers)
                longname = block[345:500].partition(b"\0")[0] + b"/" + longname
        if longlink is None:
            longlink = block[157:257].partition(b"\0")[0] if block[157] else b""
        device = kind in (CHAR, BLOCKDEV)
        e = Entry(longname, kind, num(block[100:108]) & 0o7777, num(block[108:116]),
                   num(block[116:124]), size, num(block[136:148]) * 1_000_000_000, longlink,
                   num(block[329:337]) if device else 0, num(block[337:345]) if device else 0,
                   {})
        if pax:
            for key, value in pax.items():
                self._pax_override(e, key, value)
        if kind == GNU_SPARSE or (pax and any(k.startswith(b"GNU.sparse.") for k in pax)):
            self._sparse(e, block, pax)
        if e.kind == b"\0":
            e.kind = DIR if e.name.endswith(b"/") else REGULAR
        elif e.kind == b"7":  # contiguous file
            e.kind = REGULAR
        if e.kind != REGULAR:  # header-only types carry no payload (as Go's archive/tar)
            e.size = 0
        if e.size < 0 or not 0 <= e.uid < _ID_LIMIT or not 0 <= e.gid < _ID_LIMIT \
                or not 0 <= e.devmajor < _ID_LIMIT or not 0 <= e.devminor < _ID_LIMIT \
                or not -(2**63) <= e.mtime_ns // 1_000_000_000 < 2**63:  # time_t
            raise ValueError(f'entry "{show(e.name)}": size, owner, device or time out of range')
        self._left, self._pad = e.size, padding(e.size)
        return e

    def _sparse(self, e: Entry, block: bytes, pax: dict[bytes, bytes]) -> None:
        """Read ``e``'s sparse map (``tarsparse``): the header's and its extension blocks, or
        the PAX records', or (1.0) the payload's first blocks, all recorded verbatim."""
        if e.kind == GNU_SPARSE:
            segments, real = tarsparse.old_gnu(block, lambda: self._meta(BLOCK))
            e.kind = REGULAR
        else:
            found = tarsparse.pax(pax, lambda: self._meta(BLOCK), e.name)
            if found is None:
                return
            segments, real_size, name, used = found
            if name:
                e.name = name
            e.size -= used
            real = e.size if real_size is None else real_size
        tarsparse.check(segments, real, e.size, e.name)
        e.sparse, e.real_size = segments, real

    @staticmethod
    def _pax_override(e: Entry, key: bytes, value: bytes) -> None:
        if key == b"path":
            e.name = value
        elif key == b"linkpath":
            e.linkname = value
        elif key in (b"size", b"uid", b"gid"):
            setattr(e, key.decode(), int(value))
        elif key == b"mtime":
            e.mtime_ns = pax_time_ns(value)
        elif key.startswith(b"SCHILY.xattr."):
            e.xattrs[key[len(b"SCHILY.xattr.") :]] = value
        # GNU.sparse.*: read by ``_sparse`` once the entry is made
