"""Applying a layer tar to a directory: ``apply_layer``.

The archive is unpacked the way an overlay lower dir needs it (aufs ``.wh.`` whiteouts become
0:0 character devices, ``.wh..wh..opq`` becomes the ``trusted.overlay.opaque`` xattr), anything
that would write outside the directory is refused, and a skeleton is recorded (see
``svc.storage.skeleton``).

Archive rules (what moby's ``UnpackLayer`` does, unless noted; header formats: see
``svc.storage.tarformat``):

- Names: a leading ``/`` and ``./`` are dropped, ``.`` and empty components ignored, ``..``
  resolved lexically; one that climbs above the root is refused (also after a leading ``/``,
  where moby would clamp it). No parent component may be a symlink (each is lstat-ed once,
  then cached); missing parents are created 0755 root:root. Whatever is in an entry's way
  is removed first, and files are never opened over an existing path (it may be a hard link).
- Hard link targets are names in the same root, with the same rules; the link takes the
  target inode's metadata as it is (GNU tar does the same).
- xattrs the filesystem refuses (ENOTSUP, EPERM) are logged and skipped; ``trusted.overlay.*``
  (and ``user.overlay.*``, ``security.selinux``) are never taken from nor written to a tar.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from svc.errors import InvalidParameter
from svc.storage.fsutil import remove_tree
from svc.storage.layerworker import Hasher, Worker
from svc.storage.skeleton import SkeletonWriter
from svc.storage.tarformat import (
    BLOCKDEV,
    CHAR,
    DIR,
    FIFO,
    HARDLINK,
    OPAQUE_XATTR,
    PRIVATE_XATTRS,
    REGULAR,
    SYMLINK,
    WHITEOUT,
    WHITEOUT_META,
    WHITEOUT_OPAQUE,
    Entry,
    TarReader,
    bad,
    show,
)

# The logger keeps the name of the module this was split from (docs/configuration.md).
log = logging.getLogger("svc.storage.tarlayer")

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ApplyResult:
    """What ``apply_layer`` found."""

    diff_id: str  # "sha256:<hex>" of every byte of the archive
    size: int  # sum of the regular files' sizes
    tar_size: int  # length of the archive


NAME_MAX = 255
PATH_MAX = 4096


def _clean(raw: bytes) -> bytes:
    """The entry name relative to the layer root; a leading ``/`` is dropped (as moby does)."""
    # (count, not "in": "x in bytes" first tries x as an int, and builds and drops a TypeError)
    if raw.count(b"\0"):
        raise bad(f'entry "{show(raw)}" has a NUL byte in its name')
    name = raw
    while name.startswith(b"./"):
        name = name[2:]
    if not name.startswith((b".", b"/")) and not name.count(b"/.") and not name.count(b"//"):
        return name.rstrip(b"/")  # the common case: no "", "." or ".." component but a last ""
    parts: list[bytes] = []
    for part in name.split(b"/"):
        if part == b"..":
            if not parts:
                raise bad(f'entry "{show(raw)}" escapes the layer root')
            parts.pop()
        elif part not in (b"", b"."):
            parts.append(part)
    return b"/".join(parts)


class _Applier:
    """Creates entries under ``dest`` without ever following a symlink found there."""

    def __init__(self, dest: Path, reader: TarReader, skeleton: SkeletonWriter,
                 stale_dir: Path | None) -> None:
        self._root = os.fsencode(dest)
        self._stale_dir = stale_dir
        self._stale_count = 0
        self._root_slash = self._root + b"/"
        self._reader = reader
        self._skel = skeleton
        self._dirs: set[bytes] = {b""}  # paths known to be real directories (not symlinks)
        self._dir_times: dict[bytes, int] = {}  # set last: creating entries changes them
        self._files: set[bytes] = set()  # regular files the skeleton refers to
        self.size = 0

    def _abs(self, rel: bytes) -> bytes:
        return self._root + b"/" + rel if rel else self._root

    def apply(self, e: Entry) -> None:
        rel = _clean(e.name)
        if len(rel) > NAME_MAX:
            self._check_length(rel, e.name)
        parent, _, base = rel.rpartition(b"/")
        if base.startswith(WHITEOUT):
            self._whiteout(e, rel, base)
        elif e.kind == REGULAR and rel:
            self._regular(e, rel, parent)
        elif not rel and e.kind != DIR:
            raise bad(f'entry "{show(e.name)}" would replace the layer root')
        elif e.kind == DIR:
            self._directory(e, rel)
        elif e.kind == SYMLINK:
            if len(e.linkname) >= PATH_MAX:
                raise bad(f'symbolic link "{show(e.name)}" has a target longer than '
                          f"{PATH_MAX - 1} bytes")
            self._parents(rel, e.name)
            self._create(rel, lambda p: os.symlink(e.linkname, p))
            self._metadata(e, self._abs(rel), chmod=False)
        elif e.kind == HARDLINK:
            self._hardlink(e, rel)
        elif e.kind in (CHAR, BLOCKDEV, FIFO):
            fmt = {CHAR: stat.S_IFCHR, BLOCKDEV: stat.S_IFBLK, FIFO: stat.S_IFIFO}[e.kind]
            dev = os.makedev(e.devmajor, e.devminor) if e.kind != FIFO else 0
            self._parents(rel, e.name)
            self._create(rel, lambda p: os.mknod(p, fmt | 0o600, dev))
            self._metadata(e, self._abs(rel))
        else:
            raise bad(f'entry "{show(e.name)}" has unsupported type {e.kind!r}')

    def _check_length(self, rel: bytes, raw: bytes) -> None:
        """The kernel's limits, named before a call fails with ENAMETOOLONG: 255 bytes a
        name, 4,096 a path (the layer's own place on disk included)."""
        if any(len(part) > NAME_MAX for part in rel.split(b"/")):
            raise bad(f'entry "{show(raw)}" has a name longer than {NAME_MAX} bytes')
        room = PATH_MAX - 1 - len(self._root_slash)
        if len(rel) > room:
            raise bad(f'entry "{show(raw)}" has a path longer than {room} bytes (the limit '
                      f"of {PATH_MAX} less the layer's place on disk)")

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
                    raise bad(f'hard link target "{show(raw)}" does not exist') from None
                os.mkdir(path)
                os.chmod(path, 0o755)
            else:
                if stat.S_ISLNK(st.st_mode):
                    raise bad(f'entry "{show(raw)}" would be written through the symbolic '
                               f'link "{show(cur)}"')
                if not stat.S_ISDIR(st.st_mode):
                    raise bad(f'entry "{show(raw)}": "{show(cur)}" is not a directory')
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
            prefix = rel + b"/"
            for name in sorted(f for f in self._files if f.startswith(prefix)):
                self._keep_stale(name)
            remove_tree(path)
            self._dirs = {d for d in self._dirs if d != rel and not d.startswith(prefix)}
            for gone in [d for d in self._dir_times if d == rel or d.startswith(prefix)]:
                del self._dir_times[gone]
        elif rel in self._files:
            self._keep_stale(rel)
        else:
            os.unlink(path)

    def _keep_stale(self, rel: bytes) -> None:
        """A later entry replaces or removes the file ``rel`` an earlier entry wrote (legal in
        tar: the last one wins). Its payload is part of the archive, so it is moved aside
        (``<stale_dir>/<n>``, outside the tree) for the rebuild; with nowhere to keep it
        the archive is refused, never found unexportable later."""
        if self._stale_dir is None:
            raise bad(f'entry "{show(rel)}" appears twice and the earlier copy cannot be kept')
        if self._stale_count == 0:
            os.mkdir(self._stale_dir, 0o700)
        n = self._stale_count
        self._stale_count += 1
        os.rename(self._abs(rel), os.path.join(os.fsencode(self._stale_dir), b"%d" % n))
        self._files.discard(rel)
        self._skel.stale(rel, n)

    def _regular(self, e: Entry, rel: bytes, parent: bytes) -> None:
        if parent not in self._dirs:
            self._parents(rel, e.name)
        path = self._root_slash + rel
        try:
            fd = os.open(path, _CREATE, 0o600)
        except FileExistsError:  # never truncate in place: it may be a hard link
            self._remove(rel)
            fd = os.open(path, _CREATE, 0o600)
        size = e.size
        try:
            if e.sparse is not None:
                self._skel.sparse_file(rel, e.sparse)
                self._reader.copy_sparse(fd, e.sparse, e.real_size)
            else:
                self._skel.file(rel, size)
                if size:
                    self._reader.copy_payload(fd)
            # Owner, then mode (chown clears setuid), then xattrs (chown drops capabilities).
            os.fchown(fd, e.uid, e.gid)
            os.fchmod(fd, e.mode)
            if e.xattrs:
                _set_xattrs(e, fd)
            mtime = e.mtime_ns
            os.utime(fd, ns=(mtime, mtime))
        finally:
            os.close(fd)
        self._files.add(rel)
        self.size += size

    def _directory(self, e: Entry, rel: bytes) -> None:
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

    def _hardlink(self, e: Entry, rel: bytes) -> None:
        """Link to an earlier entry; its inode keeps its own metadata (as GNU tar does)."""
        try:
            target = _clean(e.linkname)
        except InvalidParameter:
            raise bad(f'hard link "{show(e.name)}" points outside the layer root '
                       f'("{show(e.linkname)}")') from None
        if len(target) > NAME_MAX:
            self._check_length(target, e.linkname)
        self._parents(target, e.linkname, create=False)
        self._parents(rel, e.name)
        try:
            self._create(rel, lambda p: os.link(self._abs(target), p, follow_symlinks=False))
        except (FileNotFoundError, PermissionError) as exc:
            what = "does not exist" if isinstance(exc, FileNotFoundError) else "is a directory"
            raise bad(f'hard link target "{show(e.linkname)}" of "{show(e.name)}" '
                       f"{what}") from None

    def _whiteout(self, e: Entry, rel: bytes, base: bytes) -> None:
        """``.wh.<name>``: a 0:0 char device at ``<name>``; ``.wh..wh..opq``: opaque parent."""
        self._parents(rel, e.name)
        parent = rel.rpartition(b"/")[0]
        if base == WHITEOUT_OPAQUE:
            os.setxattr(self._abs(parent), OPAQUE_XATTR, b"y", follow_symlinks=False)
        elif not base.startswith(WHITEOUT_META):  # other .wh..wh.* names are aufs metadata
            hidden = base[len(WHITEOUT) :]
            if hidden in (b"", b".", b".."):
                raise bad(f'whiteout "{show(e.name)}" names no file')
            target = parent + b"/" + hidden if parent else hidden
            self._remove(target)
            os.mknod(self._abs(target), stat.S_IFCHR, 0)
            os.chown(self._abs(target), e.uid, e.gid, follow_symlinks=False)

    def _metadata(self, e: Entry, path: bytes, *, chmod: bool = True,
                  times: bool = True) -> None:
        """Owner, then mode (chown clears setuid), then xattrs (chown drops capabilities)."""
        os.chown(path, e.uid, e.gid, follow_symlinks=False)
        if chmod:  # never a symlink here: those are called with chmod=False
            os.chmod(path, e.mode)
        if e.xattrs:
            _set_xattrs(e, path)
        if times:
            os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)


def _set_xattrs(e: Entry, target: int | bytes) -> None:
    for key, value in e.xattrs.items():
        if key.startswith(PRIVATE_XATTRS):
            continue
        try:
            if isinstance(target, int):
                os.setxattr(target, key, value)
            else:
                os.setxattr(target, key, value, follow_symlinks=False)
        except OSError as exc:
            # moby ignores these too: not every filesystem takes every namespace.
            if exc.errno in (errno.ENOTSUP, errno.EPERM):
                log.warning("xattr %s of %s not set: %s", show(key), show(e.name), exc)
                continue
            if exc.errno in (errno.EINVAL, errno.ERANGE, errno.E2BIG, errno.ENAMETOOLONG):
                raise bad(f'entry "{show(e.name)}" has an extended attribute '
                          f'"{show(key)}" the kernel refuses: {exc.strerror}') from None
            raise


def apply_layer(stream: BinaryIO, dest: Path, skeleton_out: BinaryIO,
                stale_dir: Path | None = None) -> ApplyResult:
    """Unpack the uncompressed layer tar ``stream`` into the directory ``dest``.

    Names are taken relative to ``dest`` (a leading ``/`` is dropped, as moby does); an entry
    whose name or hard link target climbs above the root with ``..``, or whose parent path
    holds a symlink, is refused. Symlinks themselves may point anywhere: they are never followed.

    Args:
      stream: the tar, read to EOF; compose with ``open_decompressed`` for compressed blobs.
      dest: an existing directory, normally empty.
      skeleton_out: receives the skeleton (module docstring) for ``write_layer_from_skeleton``.
      stale_dir: where the payloads of files a later entry replaced are kept (created when
        the first one is), outside ``dest``; None refuses such archives.

    Returns:
      The diff id (sha256 of every byte read, trailing bytes included) and the payload size.

    Raises:
      InvalidParameter: the archive is malformed, truncated or malicious.

    Cancellation: blocking, not a checkpoint. On any error or crash ``dest`` and the skeleton are
    left half-written and must be discarded; nothing outside ``dest`` was touched.
    """
    worker = Worker("layer-apply")  # hashes the input, compresses and writes the skeleton
    try:
        hasher = Hasher(worker)
        skeleton = SkeletonWriter(skeleton_out, worker)
        reader = TarReader(stream, skeleton, hasher)
        applier = _Applier(dest, reader, skeleton, stale_dir)
        while (entry := reader.next()) is not None:
            applier.apply(entry)
        applier.finish()
        skeleton.close(reader.offset)
    except BaseException:
        worker.close(check=False)
        raise
    worker.close()
    return ApplyResult(f"sha256:{hasher.hexdigest()}", applier.size, reader.offset)
