"""Layers compressed for a registry: deterministic gzip, hashed while it is made.

A pushed layer is the gzip of the layer's tar exactly as the store holds it (its diffID
verifies). The gzip is deterministic: zlib at a fixed level with a fixed header (no name, mtime
0), so the same layer always gives the same blob digest and the same image the same manifest,
whoever pushes it and however often. The compression runs in a worker thread that writes the
tar (``LayerStore.write_tar``) into a :class:`GzipSink`; compressed pieces of about ``CHUNK``
bytes go to the trio side through a bounded channel, each with the count of tar bytes
consumed so far (the push's progress).

Cancellation: the thread's next hand-off raises ``trio.Cancelled`` (the host task was
cancelled), which ends ``write_tar``; nothing is written anywhere but the channel.
"""

from __future__ import annotations

import hashlib
import io
import zlib

import trio

from svc.storage.layers import LayerStore

LEVEL = 6  # gzip's and Go's default: what engines push, and what `gzip` does on its own
CHUNK = 256 * 1024  # small enough that a cancel is noticed within a few milliseconds
GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header zlib writes itself: no name, mtime 0

Piece = tuple[bytes, int]  # (compressed bytes, tar bytes consumed so far)


class GzipSink(io.RawIOBase):
    """A writable file for the worker thread: compresses, hashes, hands pieces to trio."""

    def __init__(self, send: trio.MemorySendChannel[Piece]) -> None:
        self._send = send
        self._zip = zlib.compressobj(LEVEL, zlib.DEFLATED, GZIP_WBITS)
        self._hash = hashlib.sha256()
        self._buf = bytearray()
        self.consumed = 0
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        n = len(b)
        self.consumed += n
        self._out(self._zip.compress(b))
        return n

    def finish(self) -> None:
        """Flush the compressor and the last piece (the thread's last call)."""
        self._out(self._zip.flush())
        self._hand_off()

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def _out(self, data: bytes) -> None:
        if not data:
            return
        self._hash.update(data)
        self.size += len(data)
        self._buf += data
        if len(self._buf) >= CHUNK:
            self._hand_off()

    def _hand_off(self) -> None:
        if self._buf:
            piece, self._buf = bytes(self._buf), bytearray()
            trio.from_thread.run(self._send.send, (piece, self.consumed))


def compress_layer(layers: LayerStore, chain_id: str, sink: GzipSink) -> None:
    """Write the layer's tar through ``sink`` (blocking: run it in a worker thread)."""
    layers.write_tar(chain_id, sink)  # type: ignore[arg-type]
    sink.finish()


def gzip_bytes(data: bytes) -> bytes:
    """The same deterministic gzip of bytes in memory (tests, benchmarks)."""
    z = zlib.compressobj(LEVEL, zlib.DEFLATED, GZIP_WBITS)
    return z.compress(data) + z.flush()
