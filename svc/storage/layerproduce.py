"""Producing a layer tar from an overlay upper dir: ``produce_layer``."""

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

    def write(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        chunk = bytes(self._buf)
        self._hasher.update(chunk)
        write_out(self._out, chunk)
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
        _produce_payload(out, path, rel, st.st_size)
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
    except BaseException:
        worker.close(check=False)
        raise
    worker.close()
    return f"sha256:{hasher.hexdigest()}"
