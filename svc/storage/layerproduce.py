"""Producing a layer tar from an overlay upper dir: ``produce_layer``; and describing a layer
dir already laid out in the store's format without writing its tar: ``describe_layer`` (its
diff id, skeleton and sizes, for a layer built in place)."""

from __future__ import annotations

import errno
import logging
import os
import stat
import tarfile
from pathlib import Path
from typing import BinaryIO

from svc.errors import SystemError_
from svc.storage.layerworker import Hasher, Worker
from svc.storage.skeleton import SkeletonWriter
from svc.storage.tarformat import (
    BLOCK,
    BLOCKDEV,
    CHAR,
    CHUNK,
    DIR,
    FIFO,
    HARDLINK,
    OPAQUE_XATTR,
    PRIVATE_XATTRS,
    REGULAR,
    SYMLINK,
    WHITEOUT,
    WHITEOUT_OPAQUE,
    padding,
    show,
    write_out,
)

# The logger keeps the name of the module this was split from (docs/configuration.md).
log = logging.getLogger("svc.storage.tarlayer")


class _HashingOut:
    """Writes to ``out`` through a buffer; a ``Hasher`` hashes every byte (in its thread)."""

    def __init__(self, out: BinaryIO, hasher: Hasher) -> None:
        self._out = out
        self._buf = bytearray()
        self._hasher = hasher
        self.total = 0

    def write(self, data: bytes) -> None:
        self._buf += data
        self.total += len(data)
        if len(self._buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        chunk = bytes(self._buf)
        self._hasher.update(chunk)
        write_out(self._out, chunk)
        self._buf.clear()

    def payload(self, path: bytes, rel: bytes, size: int) -> None:
        _produce_payload(self, path, rel, size)


class _DescribingOut(_HashingOut):
    """Hashes the tar without writing it: headers and padding go to the skeleton as raw
    records, file payloads as references to the file (``F``), read only for the hash."""

    def __init__(self, skeleton: SkeletonWriter, hasher: Hasher) -> None:
        super().__init__(_NOWHERE, hasher)
        self._skeleton = skeleton
        self.size = 0  # regular file payload bytes

    def flush(self) -> None:
        chunk = bytes(self._buf)
        self._hasher.update(chunk)
        self._skeleton.raw(chunk)
        self._buf.clear()

    def payload(self, path: bytes, rel: bytes, size: int) -> None:
        self.flush()
        self._skeleton.file(rel, size)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            left = size
            while left and (data := os.read(fd, min(left, CHUNK))):
                self._hasher.update(data)
                left -= len(data)
            if left or os.read(fd, 1):
                raise SystemError_(f'file "{show(rel)}" changed size while it was described')
        finally:
            os.close(fd)
        self.total += size
        self.size += size
        self.write(bytes(padding(size)))


class _Nowhere:
    def write(self, data: bytes) -> int:
        raise AssertionError("a described layer writes no tar")


_NOWHERE: BinaryIO = _Nowhere()  # type: ignore[assignment]


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
        if not name.encode().startswith(PRIVATE_XATTRS):
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
    if kind in (CHAR, BLOCKDEV):
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
        out.write(_tobuf(_info(name, st, REGULAR, mode=0o600)))
        return
    key = (st.st_dev, st.st_ino)
    if not stat.S_ISDIR(mode) and st.st_nlink > 1:
        if key in seen:
            out.write(_tobuf(_info(rel, st, HARDLINK, linkname=seen[key])))
            return
        seen[key] = rel
    pax = _xattrs(path)
    if stat.S_ISREG(mode):
        out.write(_tobuf(_info(rel, st, REGULAR, size=st.st_size, pax=pax)))
        out.payload(path, rel, st.st_size)
    elif stat.S_ISDIR(mode):
        out.write(_tobuf(_info(rel, st, DIR, pax=pax)))
        if _is_opaque(path):
            opq = _info(rel + b"/" + WHITEOUT_OPAQUE, st, REGULAR, mode=mode & 0o777)
            out.write(_tobuf(opq))
    elif stat.S_ISLNK(mode):
        out.write(_tobuf(_info(rel, st, SYMLINK, linkname=os.readlink(path), pax=pax)))
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
        kind = CHAR if stat.S_ISCHR(mode) else BLOCKDEV if stat.S_ISBLK(mode) else FIFO
        out.write(_tobuf(_info(rel, st, kind, pax=pax)))
    else:  # sockets cannot be archived; moby skips them too
        log.info("not archiving socket %s", show(path))


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
            raise SystemError_(f'file "{show(rel)}" changed size while it was archived')
    finally:
        os.close(fd)
    out.write(bytes(padding(size)))


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
    worker = Worker("layer-sha256")
    hasher = Hasher(worker)
    try:
        _walk(_HashingOut(out, hasher), src)
    except BaseException:
        worker.close(check=False)
        raise
    worker.close()
    return f"sha256:{hasher.hexdigest()}"


def _walk(sink: _HashingOut, src: Path) -> None:
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


def describe_layer(diff: Path, skeleton_out: BinaryIO) -> tuple[str, int, int]:
    """(diff id, payload size, tar size) of the layer tar ``produce_layer`` would write for
    ``diff`` (a layer dir in the store's format), whose skeleton goes to ``skeleton_out``:
    the tar itself is never written, each file is read once for the hash.

    Cancellation: blocking, not a checkpoint; on an error ``skeleton_out`` is incomplete.
    """
    worker = Worker("layer-describe")
    hasher = Hasher(worker)
    try:
        skeleton = SkeletonWriter(skeleton_out, worker)
        sink = _DescribingOut(skeleton, hasher)
        _walk(sink, diff)
        skeleton.close(sink.total)
    except BaseException:
        worker.close(check=False)
        raise
    worker.close()
    return f"sha256:{hasher.hexdigest()}", sink.size, sink.total
