"""Streaming decompression of layer archives, chosen by sniffing the first bytes.

A layer blob may be a plain tar or a gzip, bzip2 or xz compressed one, and neither the file name
nor any header a client sends is trusted: ``open_decompressed`` looks at the magic bytes only
(as moby's ``DecompressStream`` does). Memory stays bounded: at most ``CHUNK`` bytes of input and
``CHUNK`` bytes of output are held at a time, however well the data compresses.

Blocking: call it from a worker thread.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib
from collections import deque
from collections.abc import Sequence
from typing import Any, BinaryIO, Protocol, cast

from svc.errors import InvalidParameter

CHUNK = 1 << 20

GZIP_MAGIC = b"\x1f\x8b"
BZIP2_MAGIC = b"BZh"
XZ_MAGIC = b"\xfd7zXZ\x00"
_MAGIC = ((GZIP_MAGIC, "gzip"), (BZIP2_MAGIC, "bzip2"), (XZ_MAGIC, "xz"))


class _Decompressor(Protocol):
    """The part of ``bz2.BZ2Decompressor`` / ``lzma.LZMADecompressor`` this module uses."""

    @property
    def eof(self) -> bool: ...

    @property
    def needs_input(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class _Gzip:
    """``zlib.decompressobj(wbits=31)`` behind the bz2/lzma decompressor interface."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(31)

    @property
    def eof(self) -> bool:
        return self._z.eof

    @property
    def needs_input(self) -> bool:
        return not self._z.unconsumed_tail

    @property
    def unused_data(self) -> bytes:
        return self._z.unused_data

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        tail = self._z.unconsumed_tail
        return self._z.decompress(tail + data if tail else data, max(max_length, 0))


def _new_decompressor(kind: str) -> _Decompressor:
    if kind == "gzip":
        return _Gzip()
    if kind == "bzip2":
        return cast(_Decompressor, bz2.BZ2Decompressor())
    return cast(_Decompressor, lzma.LZMADecompressor(format=lzma.FORMAT_XZ))


def sniff(head: bytes) -> str:
    """Name the compression of a stream from its first bytes: gzip, bzip2, xz or plain."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return "plain"


class Prefixed(io.RawIOBase):
    """A file that gives ``head`` (chunks already read from ``src``: the bytes sniffed here,
    or what a build looked at first) before the rest of ``src``."""

    def __init__(self, head: Sequence[bytes], src: Any, *, views: bool = False) -> None:
        self._head = deque(c for c in head if c)
        self._src = src
        self._views = views  # pass on a view of bytes as it comes (``open_chunks``)

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes, as they come (a chunk of the head, or one read of ``src``);
        b"" at the end."""
        if size is None or size < 0:
            return self.readall()
        if self._head:
            chunk = self._head.popleft()
            if size < len(chunk):
                self._head.appendleft(chunk[size:])
                chunk = chunk[:size]
            return chunk
        data = self._src.read(size)
        if self._views:  # (a view of bytes stands in for bytes: ``open_chunks``)
            return cast(bytes, unchanging(data))
        return data if type(data) is bytes else bytes(data)

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        readinto = getattr(self._src, "readinto", None)
        if self._head or readinto is None:
            data = self.read(len(buffer))
            buffer[:len(data)] = data
            return len(data)
        return int(readinto(buffer) or 0)


class _Decompressing(io.RawIOBase):
    """Decompress ``src`` on the fly; concatenated members/streams are read one after another."""

    def __init__(self, src: BinaryIO, head: bytes, kind: str) -> None:
        self._src = src
        self._kind = kind
        self._input = head  # compressed bytes not yet given to the decompressor
        self._d = _new_decompressor(kind)
        self._out = memoryview(b"")
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        while not self._out and not self._done:
            self._step()
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _read(self) -> bytes:
        """The next compressed bytes, as bytes (a source may give views: ``open_chunks``)."""
        data = self._src.read(CHUNK)
        return data if type(data) is bytes else bytes(data)

    def _corrupt(self, why: str) -> InvalidParameter:
        return InvalidParameter(f"invalid layer archive: corrupt {self._kind} data: {why}")

    def _step(self) -> None:
        """Produce some output (or reach the end); raises InvalidParameter on bad data."""
        if self._d.eof:
            self._next_member()
            return
        if self._d.needs_input and not self._input:
            self._input = self._read()
        data, self._input = self._input, b""
        try:
            self._out = memoryview(self._d.decompress(data, CHUNK))
        except (zlib.error, OSError, lzma.LZMAError, EOFError) as exc:
            raise self._corrupt(str(exc)) from exc
        if not data and not self._out and not self._d.eof and self._d.needs_input:
            raise self._corrupt("unexpected end of data")

    def _next_member(self) -> None:
        """After one gzip member / bzip2 or xz stream: start the next, or finish at EOF."""
        rest = self._d.unused_data + self._input
        while len(rest) < len(XZ_MAGIC) and rest.strip(b"\0"):
            more = self._read()
            if not more:
                break
            rest += more
        if not rest.strip(b"\0"):
            # Zero padding after the last stream is tolerated, as gzip(1) and xz(1) do.
            while more := self._read():
                if more.strip(b"\0"):
                    raise self._corrupt("trailing garbage after the compressed data")
            self._done = True
            return
        if sniff(rest) != self._kind:
            raise self._corrupt("trailing garbage after the compressed data")
        self._d = _new_decompressor(self._kind)
        self._input = rest


def open_decompressed(stream: BinaryIO) -> BinaryIO:
    """Return a readable that yields ``stream`` decompressed, whatever its compression.

    Args:
      stream: the raw blob, positioned at its start; it is read sequentially and never closed.

    Returns:
      A buffered binary reader. Reads raise ``InvalidParameter`` ("invalid layer archive:
      corrupt gzip data: ...") when the compressed data is damaged or truncated.

    Cancellation: blocking and not a checkpoint; an abandoned reader holds no resources beyond
    its buffers.
    """
    head, kind = _sniffed(stream)
    raw: io.RawIOBase
    raw = Prefixed([head], stream) if kind == "plain" else _Decompressing(stream, head, kind)
    return cast(BinaryIO, io.BufferedReader(raw, CHUNK))


def open_chunks(stream: BinaryIO) -> BinaryIO:
    """As ``open_decompressed``, for a reader that takes whatever size a read gives (an image
    archive's ``OuterTar``, a layer's ``TarReader``): an uncompressed stream's reads are
    handed on as they come, with no buffer to copy them through, and may be memoryviews of
    bytes (which never change) instead of bytes. A load's payload then goes
    from the socket's read to the layer's files without being copied."""
    head, kind = _sniffed(stream)
    if kind == "plain":
        return cast(BinaryIO, Prefixed([head], stream, views=True))
    return cast(BinaryIO, io.BufferedReader(_Decompressing(stream, head, kind), CHUNK))


def unchanging(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``data`` itself when its bytes can never change (bytes, or a view of bytes: what
    ``open_chunks`` hands out), else a bytes copy. A chunk that another thread reads later
    (the layer's hashing thread) must be one of these: a source may reuse its buffer."""
    if type(data) is bytes or (type(data) is memoryview and type(data.obj) is bytes):
        return data
    return bytes(data)


def _sniffed(stream: BinaryIO) -> tuple[bytes, str]:
    """The first bytes of ``stream`` (enough for every magic) and the compression they show."""
    head = b""
    while len(head) < len(XZ_MAGIC):
        more = stream.read(len(XZ_MAGIC) - len(head))
        if not more:
            break
        head += more
    return head, sniff(head)


class PrefixDecoder:
    """The plain bytes of the beginning of a stream, decompressed as its chunks come: a look
    at an upload's first bytes before it is read whole. Damaged data sets ``failed`` (the
    whole read, later, says what is wrong)."""

    def __init__(self) -> None:
        self._head = b""
        self._d: _Decompressor | None = None
        self.kind: str | None = None
        self.failed = False

    def feed(self, raw: bytes, *, last: bool = False) -> bytes:
        """The plain bytes that ``raw`` (the next chunk) gives; ``last``: the stream ended."""
        if self.failed:
            return b""
        if self.kind is None:
            self._head += raw
            if len(self._head) < len(XZ_MAGIC) and not last:
                return b""
            self.kind = sniff(self._head)
            raw, self._head = self._head, b""
            if self.kind != "plain":
                self._d = _new_decompressor(self.kind)
        if self._d is None:
            return raw
        if self._d.eof:
            return b""
        try:
            return self._d.decompress(raw)
        except (zlib.error, OSError, lzma.LZMAError, EOFError):
            self.failed = True
            return b""
