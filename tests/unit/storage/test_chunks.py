"""A load's payload handed on without copies (``open_chunks``, ``OuterTar.chunk``, the layer's
``TarReader``): what is passed on uncopied is bytes or a view of bytes, never a
buffer its source may change, so the layer's files and its diff id stay right whatever the
source does with its own buffers."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

from svc.storage.compression import open_chunks
from svc.storage.outertar import OuterTar
from svc.storage.tarlayer import apply_layer


class Reads(io.RawIOBase):
    """Hands out ``data`` in reads of ``step`` bytes, as ``kind``: new bytes each time, or
    one bytearray that it overwrites at the next read (a source reusing its buffer)."""

    def __init__(self, data: bytes, step: int, kind: str = "bytes") -> None:
        self.data, self.pos, self.step, self.kind = data, 0, step, kind
        self.given: list[object] = []
        self._buf = bytearray(step)

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes | bytearray:  # type: ignore[override]
        n = min(self.step, len(self.data) - self.pos, size if size and size > 0 else self.step)
        piece = self.data[self.pos:self.pos + n]
        self.pos += n
        if self.kind == "bytearray":
            self._buf[:n] = piece
            out: bytes | bytearray = memoryview(self._buf)[:n]  # type: ignore[assignment]
        else:
            out = piece
        self.given.append(out)
        return out


def _layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _archive(layer: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("abc/layer.tar", layer), ("manifest.json", b"[]")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


FILES = {f"d/f{i}": os.urandom(size) for i, size in enumerate((0, 1, 511, 512, 70_000,
                                                                 300_000, 1 << 20))}


def test_a_plain_stream_s_reads_are_handed_on_as_they_are() -> None:
    src = Reads(b"x" * 100_000, 30_000)
    f = open_chunks(src)  # type: ignore[arg-type]
    assert f.read(6) == b"xxxxxx"  # (the sniffed head first)
    second = f.read(1 << 20)
    assert second is src.given[-1]  # not copied


def test_a_compressed_stream_is_decompressed() -> None:
    blob = gzip.compress(b"y" * 100_000)
    f = open_chunks(Reads(blob, 7_000))  # type: ignore[arg-type]
    out = b""
    while data := f.read(1 << 20):
        out += data
    assert out == b"y" * 100_000


def test_member_data_are_views_of_the_archive_s_reads_never_copies() -> None:
    layer = _layer(FILES)
    outer = OuterTar(open_chunks(Reads(_archive(layer), 200_000)))  # type: ignore[arg-type]
    for m, body in outer.members():
        if m.name == "abc/layer.tar":
            pieces = []
            while piece := body.read(1 << 20):
                uncopied = type(piece) is memoryview and type(piece.obj) is bytes
                assert type(piece) is bytes or uncopied
                pieces.append(bytes(piece))
            assert b"".join(pieces) == layer
        else:
            assert body.readall() == b"[]"


def test_a_compressed_layer_in_an_archive_decompresses_from_views() -> None:
    """A gzip layer member read through ``open_chunks`` gets views from the outer tar; the
    zero padding after its stream is tolerated, as gzip(1) does."""
    layer = _layer(FILES)
    blob = gzip.compress(layer) + b"\0" * 300_000  # (past the read that ends the stream)
    outer = OuterTar(open_chunks(Reads(_archive(blob), 100_000)))  # type: ignore[arg-type]
    for m, body in outer.members():
        if m.name == "abc/layer.tar":
            f = open_chunks(body)  # type: ignore[arg-type]
            out = b""
            while data := f.read(1 << 20):
                out += data
            assert out == layer
        else:
            assert body.readall() == b"[]"


def _applied(tmp_path: Path, name: str, src: Reads) -> tuple[str, dict[str, bytes]]:
    dest = tmp_path / name
    dest.mkdir()
    result = apply_layer(open_chunks(src), dest, io.BytesIO(),  # type: ignore[arg-type]
                         tmp_path / f"{name}.stale")
    return result.diff_id, {k: (dest / k).read_bytes() for k in FILES}


def test_a_layer_applies_alike_from_views_and_from_a_reused_buffer(tmp_path: Path) -> None:
    """The hasher's thread reads a chunk after the next read: a view of bytes is safe to hand
    it; a buffer its source overwrites must be copied first (the diff id would be wrong)."""
    layer = _layer(FILES)
    want = "sha256:" + hashlib.sha256(layer).hexdigest()
    for kind in ("bytes", "bytearray"):
        for step in (512, 65_536, 1 << 20):
            diff_id, files = _applied(tmp_path, f"{kind}-{step}", Reads(layer, step, kind))
            assert diff_id == want and files == FILES, (kind, step)
