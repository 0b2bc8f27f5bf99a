"""Resolving a path inside a container's root as the container would see it.

``secure_join(root, "/etc/../x/y")`` follows symlinks found under ``root`` with ``root`` standing
for ``/``: an absolute link restarts at ``root``, ``..`` never climbs above it. So a hostile image
(``/etc/passwd -> /proc/1/root/etc/shadow``, ``/x -> ../../..``) can never make the daemon read or
write a host path. The result may still name a symlink that a later step follows if it is
swapped in between (a race); callers that write open the final component with ``O_NOFOLLOW``
or go through ``open_in_root``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from svc.errors import InvalidParameter

MAX_LINKS = 255


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def secure_join(root: Path, unsafe: str) -> Path:
    """``root`` joined with ``unsafe``, every symlink along the way resolved inside ``root``.

    Components that do not exist are joined lexically (``..`` clamped at the root), so the
    result can be created. Raises ``InvalidParameter`` after ``MAX_LINKS`` symlinks (a loop).
    """
    pending = _parts(unsafe)
    pending.reverse()  # a stack: the next component is pending[-1]
    current: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part == "..":
            if current:
                current.pop()
            continue
        candidate = root.joinpath(*current, part)
        try:
            st = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            current.append(part)
            while pending:  # the rest cannot hold symlinks: it does not exist
                rest = pending.pop()
                if rest == "..":
                    if current:
                        current.pop()
                else:
                    current.append(rest)
            break
        if not stat.S_ISLNK(st.st_mode):
            current.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise InvalidParameter(f"too many levels of symbolic links in {unsafe!r}")
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = []
        pending.extend(reversed(_parts(target)))
    return root.joinpath(*current)


def mkdir_all(root: Path, unsafe: str, mode: int = 0o755) -> Path:
    """Create the directory ``unsafe`` inside ``root`` (and missing parents), root-owned.

    Raises ``InvalidParameter`` when a component exists and is not a directory.
    """
    path = secure_join(root, unsafe)
    rel = path.relative_to(root).parts
    cur = root
    for part in rel:
        cur = cur / part
        try:
            os.mkdir(cur, mode)
        except FileExistsError:
            st = os.lstat(cur)
            if stat.S_ISLNK(st.st_mode):  # swapped in after secure_join: refuse
                raise InvalidParameter(f"{unsafe!r}: a symbolic link appeared at "
                                       f"{'/' + str(cur.relative_to(root))}") from None
            if not stat.S_ISDIR(st.st_mode):
                raise InvalidParameter(f"cannot create directory {unsafe!r}: "
                                       f"{'/' + str(cur.relative_to(root))} is not a "
                                       "directory") from None
    return path


def read_in_root(root: Path, unsafe: str, limit: int = 16 << 20) -> bytes | None:
    """The content of the regular file ``unsafe`` inside ``root``; None if it does not exist.

    The final component is opened with ``O_NOFOLLOW``, so a symlink swapped in after the
    resolution is refused rather than followed out of the root.
    """
    path = secure_join(root, unsafe)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise InvalidParameter(f"{unsafe} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
