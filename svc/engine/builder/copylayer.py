"""COPY and ADD of plain sources (files, directories, symlinks, downloads: no archive to
unpack) without extracting into a container: the step's layer is laid out in place in the
layer store (``LayerStore.stage_tree``), straight from the unpacked context. A context file
that no earlier step took is hard-linked into the layer (its content was written once, on
arrival, and hashed then); others are copied in the kernel. The layer's tar is never
written: its diff id and skeleton come from one read of the new files.

The rules are the container extraction's (dockerd 1.11): the destination resolves in the
image (its root mounted read-only for the look-ups: symlinks followed inside it, an absolute
target from its root, ``..`` stopping there); missing parents are made 0755, owned by root;
an existing parent directory is carried into the layer with its own mode, owner, xattrs and
times (an overlay copy-up); entries are owned by root, or by ``--chown``; modes, mtimes and
symlinks of the sources are kept; files sharing an inode among one COPY's sources stay hard
links; a file never replaces a directory nor a directory a file.

While the build runs, a hard-linked file's link count includes its context name (RUN steps
see 2); once the build ends the context goes and the layer's file is alone.

Blocking: ``Placement.place`` runs in the worker thread that fills the staged layer.
Cancellation: the caller's ``stage_tree`` removes the half-made layer.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from svc.engine.builder.output import StepFailed
from svc.storage.tarformat import PRIVATE_XATTRS

MAX_LINKS = 40  # symlinks followed in one path, as the kernel's ELOOP limit
DIR_MODE = 0o755


@dataclass(frozen=True)
class _Entry:
    st: os.stat_result
    path: str  # where it was found (this layer's dir or the image's root)


class Placement:
    """One COPY's members laid out in ``diff`` over the image whose root is ``rootfs``.

    ``given`` counts, per context inode, the hard links earlier steps of the build made of it
    into their layers (such a file is copied, not linked again: each layer owns its inode).
    """

    def __init__(self, diff: Path, rootfs: Path, owner: tuple[int, int],
                 given: dict[tuple[int, int], int], cmd: str) -> None:
        self.diff = os.fspath(diff)
        self.rootfs = os.fspath(rootfs)
        self.owner = owner
        self.given = given
        self.cmd = cmd
        self.placed: dict[tuple[int, int], str] = {}  # source inode -> its path in the layer

    def _fail(self, what: str) -> StepFailed:
        return StepFailed(f"{self.cmd} failed: {what}")

    # -- the merged view: this layer over the image -----------------------------------------

    def _entry(self, rel: str, image_dir: bool) -> _Entry | None:
        """The entry at ``rel``: this layer's, else the image's (looked at only when its
        parent is a real directory of the image: never through a symlink on the host)."""
        bases = (self.diff, self.rootfs) if image_dir else (self.diff,)
        for base in bases:
            path = os.path.join(base, rel)
            try:
                return _Entry(os.lstat(path), path)
            except (FileNotFoundError, NotADirectoryError):
                continue
        return None

    def _image_is_dir(self, rel: str, image_dir: bool) -> bool:
        if not image_dir:
            return False
        try:
            return stat.S_ISDIR(os.lstat(os.path.join(self.rootfs, rel)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def resolve(self, name: str, *, follow_last: bool) -> tuple[str, bool]:
        """(path below the root with every symlink resolved inside the image, whether the
        image has a directory there). Missing parents are allowed (they will be made)."""
        parts = [p for p in name.split("/") if p not in ("", ".")]
        done: list[tuple[str, bool]] = []  # resolved components; the image has a dir there
        links = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            rel = "/".join([d for d, _ in done] + [part])
            parent_dir = done[-1][1] if done else True
            entry = self._entry(rel, parent_dir)
            last = not parts
            if entry is not None and stat.S_ISLNK(entry.st.st_mode) and (follow_last or not last):
                links += 1
                if links > MAX_LINKS:
                    raise self._fail(f"{name}: too many levels of symbolic links")
                target = os.readlink(entry.path)
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                if target.startswith("/"):
                    done = []
                continue
            if not last and entry is not None and not stat.S_ISDIR(entry.st.st_mode):
                raise self._fail(f"{'/' + rel}: not a directory")
            done.append((part, self._image_is_dir(rel, parent_dir)))
        return "/".join(d for d, _ in done), (done[-1][1] if done else True)

    # -- laying out ---------------------------------------------------------------------------

    def _parents(self, rel: str) -> None:
        """Every directory above ``rel`` present in this layer: carried up from the image
        (its own metadata) or made (0755, root)."""
        parts = rel.split("/")[:-1]
        image_dir = True
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            image_dir = self._image_is_dir(sub, image_dir)
            target = os.path.join(self.diff, sub)
            if os.path.lexists(target):
                continue
            if image_dir:
                self._copy_up(sub, target)
            else:
                os.mkdir(target, DIR_MODE)
                os.chmod(target, DIR_MODE)

    def _copy_up(self, rel: str, target: str) -> None:
        """A directory of the image into this layer, as overlay copies one up; its parent
        in the layer keeps its times (overlay restores them after a copy-up)."""
        src = os.path.join(self.rootfs, rel)
        st = os.lstat(src)
        parent = os.path.dirname(target)
        pst = os.lstat(parent)
        os.mkdir(target, 0o700)
        os.chown(target, st.st_uid, st.st_gid)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        for key in os.listxattr(src, follow_symlinks=False):
            if not key.encode().startswith(PRIVATE_XATTRS):
                os.setxattr(target, key, os.getxattr(src, key, follow_symlinks=False),
                            follow_symlinks=False)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        if parent != self.diff:
            os.utime(parent, ns=(pst.st_atime_ns, pst.st_mtime_ns), follow_symlinks=False)

    def _clear(self, rel: str) -> None:
        """This layer's own earlier entry at ``rel`` (not a directory) goes."""
        target = os.path.join(self.diff, rel)
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)

    def place(self, host: Path, name: str) -> None:
        """One member: the source at ``host`` put at ``name`` (below the root)."""
        st = os.lstat(host)
        if stat.S_ISLNK(st.st_mode):
            rel, _ = self.resolve(name, follow_last=False)
            self._symlink(host, rel)
        elif stat.S_ISDIR(st.st_mode):
            rel, _ = self.resolve(name, follow_last=True)
            self._directory(st, rel)
        elif stat.S_ISREG(st.st_mode):
            rel, _ = self.resolve(name, follow_last=True)
            self._file(host, st, rel)

    def _check_not_dir(self, rel: str, image_dir: bool) -> None:
        entry = self._entry(rel, image_dir)
        if entry is not None and stat.S_ISDIR(entry.st.st_mode):
            raise self._fail(f"cannot overwrite the directory /{rel} with a non-directory")

    def _parent_image_dir(self, rel: str) -> bool:
        head = rel.rpartition("/")[0]
        return not head or self._image_is_dir_chain(head)

    def _image_is_dir_chain(self, rel: str) -> bool:
        image_dir = True
        parts = rel.split("/")
        for k in range(1, len(parts) + 1):
            image_dir = self._image_is_dir("/".join(parts[:k]), image_dir)
        return image_dir

    def _leaf(self, rel: str, at_root: str) -> str:
        """Room for a non-directory at ``rel``: never the root nor over a directory, its
        parents present, this layer's own earlier entry there gone; its path in the layer.
        ``at_root``: the error for the root itself."""
        if not rel:
            raise self._fail(at_root)
        self._check_not_dir(rel, self._parent_image_dir(rel))
        self._parents(rel)
        self._clear(rel)
        return os.path.join(self.diff, rel)

    def _symlink(self, host: Path, rel: str) -> None:
        target = self._leaf(rel, "cannot replace the root directory with a symlink")
        os.symlink(os.readlink(host), target)
        os.lchown(target, *self.owner)

    def _directory(self, st: os.stat_result, rel: str) -> None:
        target = os.path.join(self.diff, rel) if rel else self.diff
        if rel:
            entry = self._entry(rel, self._parent_image_dir(rel))
            if entry is not None and not stat.S_ISDIR(entry.st.st_mode):
                raise self._fail(f"cannot overwrite the non-directory /{rel} with a directory")
            self._parents(rel)
            if not os.path.lexists(target):
                if self._image_is_dir_chain(rel):
                    self._copy_up(rel, target)
                else:
                    os.mkdir(target, 0o700)
        os.chown(target, *self.owner)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))

    def _file(self, host: Path, st: os.stat_result, rel: str) -> None:
        target = self._leaf(rel, "cannot overwrite the root directory with a file")
        key = (st.st_dev, st.st_ino)
        first = self.placed.get(key)
        if first is not None and st.st_nlink - self.given.get(key, 0) > 1:
            os.link(os.path.join(self.diff, first), target)  # one inode among the sources
            return
        if key not in self.given and _link(host, target):
            self.given[key] = self.given.get(key, 0) + 1
        else:
            _copy(host, st, target)
        if (st.st_uid, st.st_gid) != self.owner:
            os.chown(target, *self.owner)
        self.placed.setdefault(key, rel)


def _link(host: Path, target: str) -> bool:
    """Hard-link ``host`` at ``target``; False where the file system will not."""
    try:
        os.link(host, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            return False
        raise
    return True


def _copy(host: Path, st: os.stat_result, target: str) -> None:
    """A copy of ``host`` (contents in the kernel), with its mode and mtime."""
    src = os.open(host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600)
        try:
            left = st.st_size
            while left > 0:
                n = os.copy_file_range(src, dst, min(left, 1 << 30))
                if n == 0:
                    break
                left -= n
            os.fchmod(dst, stat.S_IMODE(st.st_mode))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)
