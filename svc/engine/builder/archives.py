"""ADD of a local archive: its members written again as the plain tar the step container
extracts, owned by ``--chown``'s owner when one is given (else as in the archive), and held
to the context's absolute limits (``context.check_room``: ``MAX_BYTES``, the free disk)
before each file is written, so that a small archive expanding past them is refused instead
of filling the disk. Sparse members come out as plain files (what they extract to).

Blocking: run from a worker thread. Cancellation: the caller stops reading ``out``; nothing
is left behind here.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import BinaryIO

from svc.engine.builder.context import ContextError, check_room
from svc.errors import InvalidParameter
from svc.storage.compression import open_decompressed

# pax records the writer derives from the member's own fields (an archive's copy would win
# over the new owner), and sparse maps that no longer apply once the holes are written out
_DERIVED = frozenset({"path", "linkpath", "uid", "gid", "uname", "gname", "size", "mtime",
                      "atime", "ctime"})


def archive_tar(path: Path, out: BinaryIO, *, owner: tuple[int, int] | None,
                disk: Path) -> None:
    """Write the members of the archive at ``path`` (a tar, possibly compressed) to ``out``
    as a tar; a ContextError naming the member that passes the limits (checked against the
    disk holding ``disk``), or the archive that cannot be read."""
    what = f"ADD of {path.name}"
    done = 0
    try:
        with open(path, "rb") as f, \
                tarfile.open(fileobj=open_decompressed(f), mode="r|") as src, \
                tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as dst:
            for m in src:
                info = _member(m, owner)
                if not m.isreg():
                    dst.addfile(info)
                    continue
                check_room(done, m.size, m.name, disk, what)
                dst.addfile(info, src.extractfile(m))
                done += m.size
    except ContextError:
        raise
    except (tarfile.TarError, InvalidParameter, EOFError) as exc:
        raise ContextError(f"{what} failed: the archive cannot be read: "
                           f"{str(exc).removeprefix('invalid layer archive: ')}") from None


def _member(m: tarfile.TarInfo, owner: tuple[int, int] | None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(m.name)
    info.type = tarfile.REGTYPE if m.isreg() else m.type
    info.mode, info.mtime, info.linkname = m.mode, m.mtime, m.linkname
    info.size = m.size if m.isreg() else 0
    info.devmajor, info.devminor = m.devmajor, m.devminor
    if owner is None:
        info.uid, info.gid, info.uname, info.gname = m.uid, m.gid, m.uname, m.gname
    else:
        (info.uid, info.gid), info.uname, info.gname = owner, "", ""
    info.pax_headers = {k: v for k, v in m.pax_headers.items()
                        if k not in _DERIVED and not k.startswith("GNU.sparse.")}
    return info
