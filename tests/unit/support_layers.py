"""Helpers for the layer tests: tar members built in memory, tree snapshots, crafted bytes."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
import tarfile
from pathlib import Path
from typing import Any

MTIME = 1_500_000_000
# A valid VFS_CAP_REVISION_2 security.capability: effective, permitted CAP_NET_BIND_SERVICE.
CAPABILITY = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", *, mode: int = 0o644,
           uid: int = 0, gid: int = 0, mtime: int = MTIME, linkname: str = "",
           dev: tuple[int, int] = (0, 0), xattrs: dict[str, bytes] | None = None
           ) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode, info.uid, info.gid, info.mtime = mode, uid, gid, mtime
    info.linkname = linkname
    info.devmajor, info.devminor = dev
    info.size = len(data)
    info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape")
                        for k, v in (xattrs or {}).items()}
    return info, data


def file(name: str, data: bytes = b"", **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, tarfile.REGTYPE, data, **kw)


def directory(name: str, **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    kw.setdefault("mode", 0o755)
    return member(name, tarfile.DIRTYPE, **kw)


def symlink(name: str, target: str, **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    kw.setdefault("mode", 0o777)
    return member(name, tarfile.SYMTYPE, linkname=target, **kw)


def hardlink(name: str, target: str, **kw: Any) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, tarfile.LNKTYPE, linkname=target, **kw)


def tar(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar of ``members`` in order (tarfile pads the archive to 10 KiB records)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def header(name: bytes, kind: bytes = b"0", size: int = 0, linkname: bytes = b"", *,
           fields: dict[int, bytes] | None = None, checksum: bytes = b"%06o\0 ",
           signed: bool = False) -> bytes:
    """One raw ustar header block, with any name (even one tarfile would refuse).

    ``fields`` overwrites bytes at the given offsets (before the checksum is computed);
    ``checksum`` formats the 8-byte checksum field; ``signed`` sums the bytes as signed chars,
    as some old tar writers did."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"%011o\0" % MTIME
    block[156:157] = kind
    block[157:157 + len(linkname)] = linkname
    block[257:265] = b"ustar\x0000"
    for offset, value in (fields or {}).items():
        block[offset:offset + len(value)] = value
    block[148:156] = b" " * 8
    total = sum(struct.unpack("512b", block)) if signed else sum(block)
    block[148:156] = checksum % total
    return bytes(block)


def raw_tar(*entries: tuple[bytes, bytes, bytes, bytes]) -> bytes:
    """(name, kind, data, linkname) entries as raw blocks, then the end-of-archive blocks."""
    out = b""
    for name, kind, data, linkname in entries:
        out += header(name, kind, len(data), linkname) + data + bytes(-len(data) % 512)
    return out + bytes(1024)


def xattrs_of(path: Path) -> dict[str, bytes]:
    return {n: os.getxattr(path, n, follow_symlinks=False)
            for n in sorted(os.listxattr(path, follow_symlinks=False))}


def snapshot(root: Path, *, times: bool = True) -> dict[str, tuple[Any, ...]]:
    """Every path under ``root`` with its type, mode, owner, times, content and xattrs;
    hard links show as the same inode group number."""
    inodes: dict[int, int] = {}
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                content: Any = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                content = (os.major(st.st_rdev), os.minor(st.st_rdev))
            else:
                content = None
            group = inodes.setdefault(st.st_ino, len(inodes)) if st.st_nlink > 1 \
                and not stat.S_ISDIR(st.st_mode) else None
            whiteout = stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
            mtime = st.st_mtime_ns if times and not whiteout else None
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode) if not whiteout
                        else None, st.st_uid, st.st_gid, mtime, content, group, xattrs_of(path))
    return out


class ShortReads(io.RawIOBase):
    """A stream that returns at most ``n`` bytes per read, to exercise buffer boundaries."""

    def __init__(self, data: bytes, n: int) -> None:
        self._data = memoryview(data)
        self._n = n

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        k = min(len(buffer), self._n, len(self._data))
        buffer[:k] = self._data[:k]
        self._data = self._data[k:]
        return k
