"""GNU sparse entries, as GNU tar writes them in each of its formats: accepted as Go's
archive/tar (and so moby) accepts them, unpacked with holes, and rebuilt byte for byte;
malformed maps refused clearly."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from svc.errors import InvalidParameter
from svc.storage.tarlayer import apply_layer, write_layer_from_skeleton

MIB = 1 << 20


def _sparse_file(path: Path, segments: list[tuple[int, bytes]], size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in segments:
            f.seek(offset)
            f.write(data)


def _gnu_tar(src: Path, out: Path, *args: str) -> bytes:
    subprocess.run(["tar", "--sparse", *args, "--owner=0", "--group=0", "--numeric-owner",
                    "--mtime=@1700000000", "-cf", str(out), "-C", str(src), "."], check=True)
    return out.read_bytes()


def _apply(data: bytes, tmp: Path) -> tuple[Path, bytes, str]:
    diff = tmp / "diff"
    diff.mkdir(parents=True)
    skeleton = io.BytesIO()
    result = apply_layer(io.BytesIO(data), diff, skeleton, tmp / "stale")
    return diff, skeleton.getvalue(), result.diff_id


FORMATS = {
    "old gnu": ["--format=gnu"],
    "pax 0.0": ["--format=pax", "--sparse-version=0.0"],
    "pax 0.1": ["--format=pax", "--sparse-version=0.1"],
    "pax 1.0": ["--format=pax", "--sparse-version=1.0"],
}


@pytest.mark.parametrize("args", FORMATS.values(), ids=FORMATS.keys())
@pytest.mark.parametrize("segments", [3, 30], ids=["few segments", "extended map"])
def test_gnu_tar_sparse_files_unpack_and_rebuild(tmp_path: Path, args: list[str],
                                                 segments: int) -> None:
    src = tmp_path / "src"
    src.mkdir()
    parts = [(i * 2 * MIB // segments * 3 + 4096, os.urandom(5000 + i)) for i in range(segments)]
    size = 8 * MIB
    _sparse_file(src / "holes", parts, size)
    (src / "plain").write_bytes(b"after the sparse one")
    data = _gnu_tar(src, tmp_path / "layer.tar", *args)
    diff, skeleton, diff_id = _apply(data, tmp_path / "applied")
    assert (diff / "holes").read_bytes() == (src / "holes").read_bytes()
    assert (diff / "holes").stat().st_size == size
    assert (diff / "holes").stat().st_blocks * 512 < size  # holes stay holes
    assert (diff / "plain").read_bytes() == b"after the sparse one"
    out = io.BytesIO()
    write_layer_from_skeleton(io.BytesIO(skeleton), diff, out, tmp_path / "applied" / "stale")
    assert out.getvalue() == data
    assert diff_id == "sha256:" + hashlib.sha256(data).hexdigest()


def _pax_sparse(records: dict[str, str], payload: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo("s")
        info.size = len(payload)
        info.pax_headers = records
        t.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


@pytest.mark.parametrize("records, payload, says", [
    ({"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "0,5,2,5",
      "GNU.sparse.size": "20"}, b"x" * 10, "out of order"),
    ({"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "0,5",
      "GNU.sparse.size": "20"}, b"x" * 10, "does not match the data stored"),
    ({"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "0,50",
      "GNU.sparse.size": "20"}, b"x" * 50, "beyond its size"),
    ({"GNU.sparse.major": "0", "GNU.sparse.minor": "1", "GNU.sparse.map": "0,x"},
     b"", "malformed sparse map"),
    ({"GNU.sparse.major": "2", "GNU.sparse.minor": "0"}, b"", "unknown GNU sparse format"),
    ({"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "10"},
     b"1\n0\nnope\n".ljust(512, b"\0"), "malformed sparse map"),
], ids=["overlap", "short map", "beyond size", "not numbers", "unknown version", "bad 1.0 map"])
def test_malformed_sparse_maps_are_refused(tmp_path: Path, records: dict[str, str],
                                           payload: bytes, says: str) -> None:
    with pytest.raises(InvalidParameter, match=says):
        _apply(_pax_sparse(records, payload), tmp_path)
