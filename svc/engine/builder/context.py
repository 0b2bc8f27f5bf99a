"""The build context: the request body (a tar, identity, gzip, bzip2 or xz) unpacked into a
private directory as it arrives, checked entry by entry, every regular file hashed as it is
written (COPY and ADD cache keys then cost no second read). A build with ``nocache`` asks no
cache, so its COPY and ADD keys are computed later, with their images, while the next step
runs (``containers._OwedKey``): its files larger than an instructions file may be
(``MAX_SVCFILE``) are not hashed as they come, which leaves the machine's cores to the
upload (a 50 MB file: 30 ms of sha256 beside it).

Refused, with the entry named, before anything of it is used: names that leave the context
(absolute, ``..`` above the root), entries below a symlink of the archive (writing through
it could land anywhere), hard links to something that is not a file of the archive, more
than ``MAX_ENTRIES`` entries, and decompression bombs: a file is refused, before any of it is
written, when it would take the context past ``MAX_BYTES`` or leave less than ``RESERVE``
free on the daemon's disk (absolute limits, as a ratio to the bytes received refuses
ordinary contexts: zeros and sparse files compress a thousandfold). Devices, fifos and
sockets are skipped. Then the ignore file (``.svcignore``, else ``.dockerignore``)
removes what it names; the instructions file is read first, so naming it there only keeps it
out of COPY, as engines do.

Blocking: run ``unpack`` in a worker thread. Cancellation: the caller removes the directory.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from svc.errors import InvalidParameter
from svc.storage.compression import open_decompressed
from svc.storage.layerworker import Worker
from svc.storage.writeback import start_writeback
from svc.svcfile.ignore import IGNORE_FILES, PatternMatcher, read_patterns

MAX_ENTRIES = 1_000_000
MAX_BYTES = 16 << 30
RESERVE = 512 << 20  # free space left on the daemon's disk after a context file is written
MAX_SVCFILE = 4 << 20
READ = 1 << 20
WRITEBACK_STEP = 8 << 20  # a large file's pages go to the disk every 8 MiB as they come


class ContextError(InvalidParameter):
    """The context is refused; nothing of it is used."""


@dataclass
class Context:
    """An unpacked context: its directory and the sha256 of each regular file in it."""

    root: Path
    work: Path | None = None  # the build's own directory (downloads of ADD <url> go there)
    hashes: dict[str, str] = field(default_factory=dict)  # "a/b" -> hex digest
    # False: files over MAX_SVCFILE are not hashed as they come (nor put in ``hashes``)
    hash_large: bool = True
    received: int = 0  # bytes of the body read
    size: int = 0  # bytes written
    # context inodes hard-linked into a layer by a COPY (and how often): not linked again
    given: dict[tuple[int, int], int] = field(default_factory=dict)

    def ignore_matcher(self) -> PatternMatcher | None:
        for name in IGNORE_FILES:
            path = self.root / name
            if path.is_file() and not path.is_symlink():
                try:
                    return PatternMatcher(read_patterns(path.read_text(errors="replace")))
                except ValueError as exc:
                    raise ContextError(f"{name}: {exc}") from None
        return None


class _Counting:
    """Counts the bytes read."""

    def __init__(self, inner: IO[bytes] | Any) -> None:
        self.inner = inner
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.count += len(data)
        return data

    def readinto(self, b: bytearray | memoryview) -> int:
        n = self.inner.readinto(b)  # type: ignore[union-attr]
        self.count += n or 0
        return int(n or 0)

    def readable(self) -> bool:
        return True


def clean_name(name: str) -> str:
    """The context-relative path of an archive entry, or a ContextError if it leaves it."""
    if name.startswith("/"):
        raise ContextError(f"invalid build context: the entry {name!r} is an absolute path")
    cleaned = posixpath.normpath(name)
    if cleaned == ".":
        return ""
    if cleaned == ".." or cleaned.startswith("../"):
        raise ContextError(f"invalid build context: the entry {name!r} points outside the "
                           "context")
    return cleaned


def _payload(tar: tarfile.TarFile, m: tarfile.TarInfo, plain: IO[bytes]) -> Iterator[bytes]:
    """A member's data, read straight from ``plain`` in large pieces: tarfile's stream reads
    its source in 10 KiB blocks and joins them (most of the time a large file cost). What
    tarfile holds read ahead comes first, and its position is moved on as if it had read the
    data, so its next header is found where it expects. A sparse file, or any other stream:
    ``extractfile``."""
    stream: Any = tar.fileobj
    direct = (getattr(stream, "comptype", None) == "tar" and stream.fileobj is plain
              and isinstance(getattr(stream, "buf", None), bytes)
              and isinstance(getattr(stream, "pos", None), int))
    if m.issparse() or not direct:
        src = tar.extractfile(m)
        assert src is not None
        while data := src.read(READ):
            yield data
        return
    held = stream.buf
    take = held[:m.size]
    stream.buf = held[len(take):]
    stream.pos += len(take)
    if take:
        yield take
    left = m.size - len(take)
    while left:
        data = plain.read(min(left, READ))
        if not data:
            raise tarfile.ReadError("unexpected end of data")
        stream.pos += len(data)
        left -= len(data)
        yield data


class _Unpacker:
    def __init__(self, ctx: Context, counting: _Counting, plain: IO[bytes],
                 worker: Worker) -> None:
        self.ctx = ctx
        self.counting = counting
        self.plain = plain
        self.links: set[str] = set()  # symlinks of the archive
        self.entries = 0
        self.dir_modes: dict[Path, int] = {}  # applied at the end: writing needs u+rwx
        # files' sha256, computed in a helper thread beside the writes; final at the end
        self.worker = worker
        self.pending: dict[str, Any] = {}

    def add(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise ContextError(f"build context refused: more than {MAX_ENTRIES} entries")
        rel = clean_name(m.name)
        if not rel:
            return
        parts = rel.split("/")
        for k in range(1, len(parts)):
            if "/".join(parts[:k]) in self.links:
                raise ContextError(f"invalid build context: the entry {m.name!r} lies below "
                                   f"the symlink {'/'.join(parts[:k])!r}")
        target = self.ctx.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not m.isdir():
            self._clear(target)
        self.links.discard(rel)
        self.ctx.hashes.pop(rel, None)
        self.pending.pop(rel, None)
        if m.isdir():
            target.mkdir(exist_ok=True)
            os.chmod(target, (m.mode & 0o7777) | 0o700)
            self.dir_modes[target] = m.mode & 0o7777
        elif m.issym():
            os.symlink(m.linkname, target)
            self.links.add(rel)
        elif m.islnk():
            self._hardlink(m, rel, target)
        elif m.isreg():
            self._file(tar, m, rel, target)
        else:
            return  # devices, fifos: not build material
        os.utime(target, (m.mtime, m.mtime), follow_symlinks=False)

    def finish(self) -> None:
        """The files' digests; directories get their own modes back (deepest first), once
        nothing is written."""
        self.worker.close()
        for rel, digest in self.pending.items():
            self.ctx.hashes[rel] = digest.hexdigest()
        for path in sorted(self.dir_modes, key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                os.chmod(path, self.dir_modes[path])

    def _clear(self, target: Path) -> None:
        if target.is_symlink() or target.exists():
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()

    def _hardlink(self, m: tarfile.TarInfo, rel: str, target: Path) -> None:
        try:
            src = clean_name(m.linkname)
        except ContextError:
            src = ""
        source = self.ctx.root / src
        if not src or src in self.links or not source.is_file() or source.is_symlink():
            raise ContextError(f"invalid build context: the hard link {m.name!r} points to "
                               f"{m.linkname!r}, which is not a file of the context")
        os.link(source, target)
        if src in self.pending:
            self.pending[rel] = self.pending[src]

    def _file(self, tar: tarfile.TarFile, m: tarfile.TarInfo, rel: str, target: Path) -> None:
        check_room(self.ctx.size, m.size, m.name, self.ctx.root, "build context")
        digest = hashlib.sha256() if self.ctx.hash_large or m.size <= MAX_SVCFILE else None
        if digest is not None:
            self.pending[rel] = digest
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        flushed = written = 0
        with os.fdopen(fd, "wb") as out:
            for data in _payload(tar, m, self.plain):
                if digest is not None:
                    self.worker.submit(digest.update, data)
                out.write(data)
                self.ctx.size += len(data)
                written += len(data)
                if written - flushed >= WRITEBACK_STEP:  # see svc.storage.writeback
                    out.flush()
                    start_writeback(fd, flushed, written - flushed)
                    flushed = written
            if flushed and written > flushed:  # a large file's tail too
                out.flush()
                start_writeback(fd, flushed, 0)
        os.chmod(target, m.mode & 0o7777)


def check_room(done: int, size: int, name: str, disk: Path, what: str) -> None:
    """Refuse a file of ``size`` bytes (``done`` written before it) that would take ``what``
    past ``MAX_BYTES`` or leave less than ``RESERVE`` free on the disk holding ``disk``: the
    absolute limits that stop a decompression bomb before it is written."""
    if done + size > MAX_BYTES:
        raise ContextError(f"{what} refused: {name!r} takes it past {MAX_BYTES >> 30} GiB "
                           "(a decompression bomb?)")
    if size > shutil.disk_usage(disk).free - RESERVE:
        raise ContextError(f"{what} refused: {name!r} ({size} bytes) does not fit on the "
                           "daemon's disk")


def unpack(body: IO[bytes] | Any, root: Path, ctx: Context | None = None, *,
           hash_large: bool = True) -> Context:
    """Unpack the context read from ``body`` into ``root`` (made here, mode 0700), into
    ``ctx`` if given (a build already running on it: ``Builder.build``), else into a new
    one (``hash_large``: see ``Context``).

    An archive that stops after its last member's data, without that member's padding and
    the end-of-archive blocks, is taken as complete: the docker CLI 28 sends exactly that
    when ``-f`` names a file outside the context (its tar rewriter closes the pipe before
    the tar writer). Anything cut earlier is refused.
    """
    root.mkdir(mode=0o700)
    ctx = ctx or Context(root, work=root.parent, hash_large=hash_large)
    counting = _Counting(body)
    _unpack(ctx, counting)
    ctx.received = counting.count
    return ctx


def _unpack(ctx: Context, counting: _Counting) -> None:
    worker = Worker("context-sha256")
    try:
        unpacker = _unpack_into(ctx, counting, worker)
        if unpacker is not None:
            unpacker.finish()
    finally:
        worker.close(check=False)  # idempotent; the hashing thread stops


def _unpack_into(ctx: Context, counting: _Counting, worker: Worker) -> _Unpacker | None:
    plain: _Counting | None = None
    unpacker: _Unpacker | None = None
    data_end = 0  # where the last member's data ended in the uncompressed stream
    try:
        plain = _Counting(open_decompressed(counting))  # type: ignore[arg-type]
        unpacker = _Unpacker(ctx, counting, plain, worker)  # type: ignore[arg-type]
        with tarfile.open(fileobj=plain, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                unpacker.add(tar, member)
                data_end = member.offset_data + (member.size if member.isreg() else 0)
    except tarfile.ReadError as exc:
        if counting.count == 0:
            return None  # an empty body: an empty context (the instructions file is missing)
        if not (data_end and plain is not None and plain.count <= -(-data_end // 512) * 512):
            raise ContextError(f"the build context is not a valid tar archive: {exc}") \
                from None
    except ContextError:
        raise
    except InvalidParameter as exc:  # corrupt compressed data
        raise ContextError(f"the build context cannot be read: "
                           f"{str(exc).removeprefix('invalid layer archive: ')}") from None
    except (EOFError, OSError) as exc:
        raise ContextError(f"the build context cannot be read: {exc}") from None
    return unpacker


def read_svcfile(ctx: Context, name: str | None) -> tuple[str, str]:
    """(file name, text) of the instructions file: ``name`` if given, else ``Svcfile``, else
    ``Dockerfile``, else ``dockerfile`` (1.11's fallback). The name may not leave the context
    nor go through a symlink out of it."""
    candidates = [name] if name else ["Svcfile", "Dockerfile", "dockerfile"]
    for cand in candidates:
        rel = clean_name(cand)
        path = ctx.root / rel
        real = os.path.realpath(path)
        if not real.startswith(str(ctx.root.resolve()) + "/"):
            raise ContextError(f"The Dockerfile ({cand}) must be within the build context")
        if os.path.isfile(real):
            if os.path.getsize(real) > MAX_SVCFILE:
                raise ContextError(f"{cand} is larger than {MAX_SVCFILE >> 20} MiB")
            with open(real, "rb") as f:
                text = f.read().decode("utf-8", errors="replace")
            if not text.strip():
                raise ContextError(f"The Dockerfile ({cand}) cannot be empty")
            return rel, text
    raise ContextError(f"Cannot locate specified Dockerfile: {candidates[-1]}"
                       if name else "Cannot locate specified Dockerfile: Dockerfile "
                       "(nor Svcfile)")


def apply_ignore(ctx: Context) -> int:
    """Remove what the ignore file names (the ignore file itself when it names it); the
    number of paths removed."""
    matcher = ctx.ignore_matcher()
    if matcher is None:
        return 0
    removed = 0
    for dirpath, dirnames, filenames in os.walk(ctx.root):
        base = os.path.relpath(dirpath, ctx.root)
        base = "" if base == "." else base
        for name in list(dirnames) + filenames:
            rel = f"{base}/{name}" if base else name
            if not matcher.matches(rel):
                continue
            path = ctx.root / rel
            if name in dirnames and not path.is_symlink():
                if matcher.has_exceptions:
                    continue  # an exception may keep something below: decide per file
                shutil.rmtree(path)
                dirnames.remove(name)
            else:
                path.unlink()
            removed += 1
            for key in [k for k in ctx.hashes if k == rel or k.startswith(rel + "/")]:
                del ctx.hashes[key]
    return removed
