"""A lean streaming reader for image archives (the outer tar of ``docker save``).

``tarfile``'s stream mode copies every byte several times; an image archive is mostly a few
large ``layer.tar`` members, so this reader hands a member's data out as the very chunks the
source returned whenever it can. It understands ustar, GNU long names and PAX headers, which is
what engines write; anything it cannot parse is a ``tarfile.ReadError``.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from typing import Any, BinaryIO

CHUNK = 1 << 20
BLOCK = 512


class OuterTar:
    def __init__(self, src: BinaryIO) -> None:
        self._src = src
        self._buf = b""
        self._view = memoryview(self._buf)
        self._pos = 0

    def _more(self) -> bool:
        data = self._src.read(CHUNK)
        if not data:
            return False
        if self._pos < len(self._buf):
            data = self._view[self._pos :].tobytes() + data
        elif type(data) is not bytes:
            data = bytes(data)
        self._buf, self._view, self._pos = data, memoryview(data), 0
        return True

    def exact(self, n: int) -> bytes:
        while len(self._buf) - self._pos < n:
            if not self._more():
                raise tarfile.ReadError("unexpected end of data")
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def chunk(self, n: int) -> bytes | memoryview:
        """Up to ``n`` bytes (at least one), never copied: the buffered chunk itself when it
        fits whole, else a view of it (bytes: they never change)."""
        if self._pos >= len(self._buf) and not self._more():
            raise tarfile.ReadError("unexpected end of data")
        out: bytes | memoryview
        if self._pos == 0 and len(self._buf) <= n:
            out = self._buf
        else:
            out = self._view[self._pos : self._pos + n]
        self._pos += len(out)
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            n -= len(self.chunk(n))

    def members(self) -> Iterator[tuple[tarfile.TarInfo, Member]]:
        """Each member with a reader for its data (valid until the next member)."""
        pax: dict[str, str] = {}
        longname = longlink = None
        while True:
            try:
                block = self.exact(BLOCK)
            except tarfile.ReadError:
                return  # a missing end-of-archive marker is tolerated, as GNU tar does
            if block == bytes(BLOCK):
                return
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            size = info.size
            if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE):
                data = self.exact(size)
                self.skip(-size % BLOCK)
                if info.type == tarfile.XHDTYPE:
                    pax = _pax_records(data)
                continue
            if info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
                text = self.exact(size).rstrip(b"\0").decode("utf-8", "surrogateescape")
                self.skip(-size % BLOCK)
                if info.type == tarfile.GNUTYPE_LONGNAME:
                    longname = text
                else:
                    longlink = text
                continue
            if "path" in pax:
                info.name = pax["path"]
            if "linkpath" in pax:
                info.linkname = pax["linkpath"]
            if "size" in pax:
                info.size = size = int(pax["size"])
            if longname is not None:
                info.name = longname
            if longlink is not None:
                info.linkname = longlink
            pax, longname, longlink = {}, None, None
            if not info.isreg():
                size = 0
            body = Member(self, size)
            yield info, body
            body.finish()
            self.skip(-size % BLOCK)


def _pax_records(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        length_text, sep, _ = data[pos : pos + 32].partition(b" ")
        if not sep or not length_text.isdigit() or int(length_text) <= 0:
            raise tarfile.ReadError("invalid pax header")
        length = int(length_text)
        record = data[pos + len(length_text) + 1 : pos + length - 1]
        key, eq, value = record.partition(b"=")
        if not eq:
            raise tarfile.ReadError("invalid pax header record")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


class Member(io.RawIOBase):
    """One member's data as a readable file; reads hand out source chunks where possible."""

    def __init__(self, outer: OuterTar, size: int) -> None:
        self._outer = outer
        self._left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes | memoryview:
        """Up to ``n`` bytes of the member as the archive's reads hold them (``chunk``)."""
        if not self._left:
            return b""
        if n is None or n < 0:
            n = self._left
        out = self._outer.chunk(min(n, self._left))
        self._left -= len(out)
        return out

    def readall(self) -> bytes:
        parts = []
        while self._left:
            parts.append(self.read())
        return b"".join(parts)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        self._outer.skip(self._left)
        self._left = 0
