"""COPY and ADD sources: which context paths an argument names, their cache key, and the tar
that puts them at the destination.

A source is relative to the context root (a leading ``/`` too); wildcards follow Go's
``filepath.Match`` over whole context-relative paths. A source that leaves the context, by
``..`` or through a symlink whose target lies outside it, is refused by name. Symlinks
inside a copied directory are copied as symlinks, never followed.

The cache key is the content, never the mtime: ``file:<sha256>`` for one file (its name,
mode, size and content), ``dir:`` for one directory (every entry's path, type, mode, size,
link target and content), ``multi:`` for several. Contents were hashed while the context
was unpacked (``context``); the few independent sources a step names are keyed in parallel
worker threads by the caller.

Blocking: call these from worker threads.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from svc.engine.builder.context import Context, clean_name
from svc.errors import InvalidParameter, NotFound
from svc.svcfile.ignore import translate

_WILDCARD = re.compile(r"[*?\[]")
READ = 1 << 20


@dataclass(frozen=True)
class Source:
    """One source: its context-relative path ('' is the root), and whether a directory."""

    rel: str
    path: Path
    is_dir: bool


def _outside(what: str, cmd: str) -> InvalidParameter:
    return InvalidParameter(f"{cmd} failed: forbidden path outside the build context: {what}")


def _inside(ctx: Context, rel: str, original: str, cmd: str) -> Path:
    """The real path of ``rel``; symlinks may be followed only while they stay inside."""
    root = os.path.realpath(ctx.root)
    real = os.path.realpath(ctx.root / rel)
    if real != root and not real.startswith(root + "/"):
        raise _outside(f"{original} (a symlink leads out of the context)", cmd)
    return Path(real)


def resolve(ctx: Context, arg: str, cmd: str) -> list[Source]:
    """The sources one argument names (a wildcard may name several, or none: an error)."""
    try:
        rel = clean_name(arg.lstrip("/") or ".")
    except InvalidParameter:
        raise _outside(arg, cmd) from None
    if _WILDCARD.search(rel):
        regex = re.compile(translate(rel) + r"\Z", re.DOTALL)
        found = []
        for dirpath, dirnames, filenames in os.walk(ctx.root):
            base = os.path.relpath(dirpath, ctx.root)
            for name in sorted(dirnames + filenames):
                path_rel = name if base == "." else f"{base}/{name}"
                if regex.match(path_rel):
                    real = _inside(ctx, path_rel, arg, cmd)
                    found.append(Source(path_rel, real, real.is_dir()))
        if not found:
            raise NotFound(f"{cmd} failed: no source files were specified ({arg} matches "
                           "nothing in the build context)")
        return sorted(found, key=lambda s: s.rel)
    full = ctx.root / rel
    if not full.exists() and not full.is_symlink():
        raise NotFound(f"{cmd} failed: stat {arg}: no such file or directory in the build "
                       "context")
    real = _inside(ctx, rel, arg, cmd)
    if not real.exists():
        raise NotFound(f"{cmd} failed: stat {arg}: the symlink points to nothing")
    return [Source(rel, real, real.is_dir())]


def _content(ctx: Context, rel: str, path: Path) -> str:
    known = ctx.hashes.get(rel)
    if known:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(READ):
            digest.update(data)
    return digest.hexdigest()


def _entry_key(ctx: Context, rel: str, path: Path, name: str) -> str:
    st = os.lstat(path)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return f"{name}|l|{mode:o}|{os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"{name}|d|{mode:o}"
    return f"{name}|f|{mode:o}|{st.st_size}|{_content(ctx, rel, path)}"


def source_key(ctx: Context, src: Source) -> str:
    """``file:<hex>`` or ``dir:<hex>`` (content, modes and names; no mtimes)."""
    real_rel = os.path.relpath(src.path, os.path.realpath(ctx.root))
    real_rel = "" if real_rel == "." else real_rel
    if not src.is_dir:
        line = _entry_key(ctx, real_rel, src.path, _landing_name(src))
        return "file:" + hashlib.sha256(line.encode()).hexdigest()
    digest = hashlib.sha256()
    for rel, path in _walk(src.path):
        ctx_rel = f"{real_rel}/{rel}" if real_rel else rel
        digest.update(_entry_key(ctx, ctx_rel, path, rel).encode() + b"\n")
    return "dir:" + digest.hexdigest()


def _landing_name(src: Source) -> str:
    """The name a file keeps when it lands in a directory (the name part of its argument, or
    of its URL). It is in the key whatever the destination, as tarsum put it in 1.11's: a
    destination naming the file makes the name irrelevant, but whether the destination is
    an existing directory is only known in the image, after the cache was asked."""
    return os.path.basename(src.rel) or src.path.name


def combined_key(keys: list[str]) -> str:
    if len(keys) == 1:
        return keys[0]
    return "multi:" + hashlib.sha256(",".join(keys).encode()).hexdigest()


def _walk(top: Path) -> list[tuple[str, Path]]:
    """Every entry below ``top`` (not itself), sorted, symlinks not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        base = os.path.relpath(dirpath, top)
        for name in sorted(dirnames + filenames):
            rel = name if base == "." else f"{base}/{name}"
            out.append((rel, Path(dirpath) / name))
    return sorted(out)


# -- the tar put at the destination ---------------------------------------------------------

def destination(dest: str, workdir: str) -> str:
    """The absolute destination; a relative one is below the working directory. A trailing
    ``/`` (kept) says it is a directory."""
    trailing = dest.endswith("/") or dest in (".", "")
    path = dest if dest.startswith("/") else f"{workdir.rstrip('/') or ''}/{dest}"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    stack: list[str] = []
    for p in parts:
        if p == "..":
            if stack:
                stack.pop()
        else:
            stack.append(p)
    return "/" + "/".join(stack) + ("/" if trailing and stack else "")


def plan(sources: list[Source], dest: str, dest_is_dir: bool) -> list[tuple[Path, str]]:
    """(host path, member name below ``/``) pairs: a directory's contents go into ``dest``;
    a file goes to ``dest`` itself, or into it when ``dest`` is a directory."""
    base = dest.rstrip("/").lstrip("/")
    into_dir = dest_is_dir or dest.endswith("/") or len(sources) > 1
    out: list[tuple[Path, str]] = []
    for src in sources:
        if src.is_dir:
            out += [(p, f"{base}/{rel}" if base else rel) for rel, p in _walk(src.path)]
        else:
            name = _landing_name(src)
            if into_dir:
                out.append((src.path, f"{base}/{name}" if base else name))
            else:
                out.append((src.path, base))
    return out


def write_tar(members: list[tuple[Path, str]], out: BinaryIO, *,
              owner: tuple[int, int] | None = None) -> None:
    """A tar of ``members`` owned by root (as engines of this generation copy), or by
    ``owner`` (``--chown``)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, name in members:
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid, info.gid = owner or (0, 0)
            info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:  # directories, symlinks, hard links to an earlier member
                tar.addfile(info)


def is_archive(path: Path) -> bool:
    """Whether ADD should unpack this local file: a tar, possibly compressed."""
    from svc.storage.compression import open_decompressed

    try:
        with open(path, "rb") as f:
            head = open_decompressed(f).read(512)
    except (OSError, InvalidParameter, EOFError):
        return False
    if len(head) < 512:
        return False
    try:
        tarfile.TarInfo.frombuf(head, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True
