"""Reading and writing paths of a container's filesystem from inside a chroot.

The daemon runs this module as a child process (``python -m svc.storage.chroot_archive``) that
``chroot``s into the container's root before it touches anything: every symlink, ``..`` and
absolute path then resolves inside the container, whatever the container does meanwhile (the
race that resolving on the host and then opening leaves open, moby's CVE-2018-15664, cannot
happen). Before it acts, ``svc.storage.confine`` seals it in: no network, no imports after the
chroot, only the capabilities the operation needs. Names are never looked up (glibc would load
the container's NSS modules, CVE-2019-14271): members carry numeric ids only, as moby's
``FileInfoHeaderNoLookups`` writes them, and extraction uses the numeric ids.

Operations (argv: ``<op> <root> <mounts> <path> [options]``; ``mounts`` is a JSON list of
``[source, destination, readonly]``, bound onto the root first, see ``confine``):

``stat``  one JSON line: the path status (``name``, ``size``, ``mode`` as Go's ``FileMode``,
          ``mtime``, ``linkTarget``).
``get``   the JSON line, then a tar of the path (a directory as ``<base>/...``; a path ending
          in ``/.`` as its contents only).
``put``   extract the tar read from stdin into the directory ``path``
          (``--no-overwrite-dir-non-dir``).
``export`` a tar of the whole root.

Errors: exit code 2 and one JSON line on stderr, ``{"kind": "not_found" | "invalid" |
"forbidden" | "system", "message": ...}``; the engine maps the kind to 404 / 400 / 403 / 500.
"""

from __future__ import annotations

import bz2  # noqa: F401 - tarfile's "r|*" imports these lazily; after the chroot it cannot
import json
import lzma  # noqa: F401
import os
import posixpath
import stat
import sys
import tarfile
import zlib  # noqa: F401
from datetime import UTC, datetime

from svc.storage.confine import READ_CAPS, WRITE_CAPS, BindMount, ConfineError, confine

# tarfile looks names up with pwd/grp when they are importable: never inside a container.
tarfile.pwd = None  # type: ignore[attr-defined]
tarfile.grp = None  # type: ignore[attr-defined]

GO_DIR = 1 << 31
GO_SYMLINK = 1 << 27
GO_DEVICE = 1 << 26
GO_PIPE = 1 << 25
GO_SOCKET = 1 << 24
GO_SETUID = 1 << 23
GO_SETGID = 1 << 22
GO_CHARDEV = 1 << 21
GO_STICKY = 1 << 20
BUF = 1 << 20


class Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def go_mode(st_mode: int) -> int:
    """A stat mode as Go's ``os.FileMode`` bits (what clients decode from the header)."""
    mode = stat.S_IMODE(st_mode) & 0o777
    if stat.S_ISDIR(st_mode):
        mode |= GO_DIR
    elif stat.S_ISLNK(st_mode):
        mode |= GO_SYMLINK
    elif stat.S_ISBLK(st_mode):
        mode |= GO_DEVICE
    elif stat.S_ISCHR(st_mode):
        mode |= GO_DEVICE | GO_CHARDEV
    elif stat.S_ISFIFO(st_mode):
        mode |= GO_PIPE
    elif stat.S_ISSOCK(st_mode):
        mode |= GO_SOCKET
    if st_mode & stat.S_ISUID:
        mode |= GO_SETUID
    if st_mode & stat.S_ISGID:
        mode |= GO_SETGID
    if st_mode & stat.S_ISVTX:
        mode |= GO_STICKY
    return mode


def _mtime(st: os.stat_result) -> str:
    secs, nanos = divmod(st.st_mtime_ns, 1_000_000_000)
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def resolve(path: str) -> tuple[str, bool]:
    """(the absolute path to act on, whether a directory was asserted). The last component
    is not followed unless the path ends with ``/`` or ``/.`` (moby's rules)."""
    if not path:
        raise Failure("invalid", "Path cannot be empty")
    absolute = path if path.startswith("/") else "/" + path
    asserts_dir = absolute.endswith("/") or absolute.endswith("/.")
    clean = posixpath.normpath(absolute)
    if clean.startswith("//"):
        clean = clean[1:]
    if absolute.endswith("/."):
        clean = clean.rstrip("/") + "/."
    return clean, asserts_dir


def path_stat(path: str) -> dict[str, object]:
    target, asserts_dir = resolve(path)
    try:
        st = os.stat(target) if asserts_dir else os.lstat(target)
    except FileNotFoundError:
        raise Failure("not_found", f"Could not find the file {path} in container") from None
    except NotADirectoryError:
        raise Failure("not_found", f"Could not find the file {path} in container") from None
    if asserts_dir and not stat.S_ISDIR(st.st_mode):
        raise Failure("invalid", f"{path} is not a directory")
    link = os.readlink(target) if stat.S_ISLNK(st.st_mode) else ""
    name = posixpath.basename(target.rstrip("/.")) or "/"
    return {"name": name, "size": st.st_size, "mode": go_mode(st.st_mode),
            "mtime": _mtime(st), "linkTarget": link}


def _tar_out() -> tarfile.TarFile:
    return tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT,
                        bufsize=BUF)


SYSTEM_DIRS = ("/proc", "/sys", "/dev")


def _system(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


def _add_tree(tar: tarfile.TarFile, path: str, arcname: str) -> None:
    """Add ``path`` and everything below it, depth first in name order, without recursion
    (a tree may be thousands of levels deep). /proc, /sys and /dev go in as empty directories:
    their contents belong to the kernel, not to the container's files. An entry that vanishes
    meanwhile (a running container) is left out."""
    stack = [(path, arcname)]
    while stack:
        p, a = stack.pop()
        try:
            info = tar.gettarinfo(p, a)
        except FileNotFoundError:
            continue
        if info is None:  # a socket: tar has no type for it
            continue
        if info.isreg():
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            with os.fdopen(fd, "rb") as f:
                tar.addfile(info, f)
            continue
        tar.addfile(info)
        if info.isdir() and not _system(p):
            try:
                names = sorted(os.listdir(p), reverse=True)
            except FileNotFoundError:
                continue
            stack += [(posixpath.join(p, n), posixpath.join(a, n)) for n in names]


def get(path: str) -> None:
    target, _ = resolve(path)
    if _system(os.path.realpath(target.removesuffix("/.") or "/")):
        raise Failure("invalid", f"cannot copy {path}: /proc, /sys and /dev hold the kernel's "
                                 "files, not the container's")
    info = path_stat(path)
    out = sys.stdout.buffer
    out.write(json.dumps(info).encode() + b"\n")
    with _tar_out() as tar:
        if target.endswith("/."):
            base = target[:-2] or "/"
            for name in sorted(os.listdir(base)):
                _add_tree(tar, posixpath.join(base, name), name)
        else:
            _add_tree(tar, target, str(info["name"]))
    out.flush()


def export() -> None:
    with _tar_out() as tar:
        for name in sorted(os.listdir("/")):
            _add_tree(tar, "/" + name, name)
    sys.stdout.buffer.flush()


def _inside(dest: str, name: str) -> str:
    full = posixpath.normpath(posixpath.join(dest, name.lstrip("/")))
    if full != dest and not full.startswith(dest.rstrip("/") + "/"):
        raise Failure("invalid", f"{name!r} is outside of {dest!r}")
    return full


def put(path: str, no_overwrite_dir_non_dir: bool) -> None:
    dest, _ = resolve(path)
    dest = dest.removesuffix("/.") or "/"
    try:
        st = os.stat(dest)
    except (FileNotFoundError, NotADirectoryError):
        raise Failure("not_found", f"Could not find the file {path} in container") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Failure("invalid", f"extraction point is not a directory: {path}")
    if not os.access(dest, os.W_OK) or _readonly(dest):
        raise Failure("forbidden", f"the path {path} is on a read-only file system")
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|*") as tar:
        for member in tar:
            full = _inside(dest, member.name)
            if member.islnk():
                _inside(dest, member.linkname)
            if no_overwrite_dir_non_dir:
                try:
                    existing = os.lstat(full)
                except FileNotFoundError:
                    existing = None
                if existing is not None:
                    if stat.S_ISDIR(existing.st_mode) and not member.isdir():
                        raise Failure("invalid", f"cannot overwrite directory {full!r} with "
                                                 f"non-directory {member.name!r}")
                    if not stat.S_ISDIR(existing.st_mode) and member.isdir():
                        raise Failure("invalid", f"cannot overwrite non-directory {full!r} "
                                                 f"with directory {member.name!r}")
            member.name = posixpath.relpath(full, dest) if full != dest else "."
            if member.islnk():
                member.linkname = posixpath.relpath(_inside(dest, member.linkname), dest)
            tar.extract(member, dest, set_attrs=True, numeric_owner=True,
                        filter="fully_trusted")


def _readonly(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    op, root = argv[0], argv[1]
    try:
        if op not in ("stat", "get", "put", "export"):
            raise Failure("invalid", f"unknown operation {op}")
        mounts = [BindMount(str(src), str(dst), bool(ro)) for src, dst, ro in
                  json.loads(argv[2])]
        try:
            confine(root, WRITE_CAPS if op == "put" else READ_CAPS, mounts)
        except (ConfineError, OSError) as exc:
            raise Failure("system", f"cannot enter the container's root: {exc}") from None
        if op == "stat":
            sys.stdout.write(json.dumps(path_stat(argv[3])) + "\n")
        elif op == "get":
            get(argv[3])
        elif op == "put":
            put(argv[3], "--no-overwrite-dir-non-dir" in argv[4:])
        else:
            export()
    except Failure as exc:
        sys.stderr.write(json.dumps({"kind": exc.kind, "message": str(exc)}) + "\n")
        return 2
    except (tarfile.TarError, EOFError) as exc:
        sys.stderr.write(json.dumps({"kind": "invalid",
                                     "message": f"invalid tar archive: {exc}"}) + "\n")
        return 2
    except PermissionError as exc:
        sys.stderr.write(json.dumps({"kind": "forbidden", "message": str(exc)}) + "\n")
        return 2
    except BrokenPipeError:
        return 3
    except OSError as exc:
        sys.stderr.write(json.dumps({"kind": "invalid", "message": str(exc)}) + "\n")
        return 2
    except Exception as exc:  # never a traceback to the client: one line naming the cause
        sys.stderr.write(json.dumps({"kind": "invalid", "message":
                                     f"{type(exc).__name__}: {exc}"}) + "\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
