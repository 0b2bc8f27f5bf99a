"""Unpacking a context reads file data past tarfile's small blocks and hashes it beside the
writes: every format's headers (ustar, GNU long names, PAX), every size around the block
boundaries, hard links and compressions give the right files and digests."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from svc.engine.builder.context import ContextError, unpack

SIZES = [0, 1, 511, 512, 513, 10240, 10241, (1 << 20) + 7, 3 << 20]


def _archive(fmt: int) -> tuple[bytes, dict[str, bytes]]:
    files = {f"d/{'long-' * 30}{n}": os.urandom(n) for n in SIZES}
    files["top"] = b"top\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if fmt == tarfile.PAX_FORMAT:
                info.pax_headers = {"comment": "x" * 600}
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("hard")
        link.type, link.linkname = tarfile.LNKTYPE, "top"
        tar.addfile(link)
    files["hard"] = files["top"]
    return buf.getvalue(), files


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("compress", [False, True])
def test_files_and_digests(tmp_path: Path, fmt: int, compress: bool) -> None:
    body, files = _archive(fmt)
    if compress:
        body = gzip.compress(body)
    ctx = unpack(io.BytesIO(body), tmp_path / "ctx")
    for name, data in files.items():
        assert (tmp_path / "ctx" / name).read_bytes() == data
        assert ctx.hashes[name] == hashlib.sha256(data).hexdigest()


def test_cut_inside_a_file_is_refused(tmp_path: Path) -> None:
    body, _ = _archive(tarfile.GNU_FORMAT)
    with pytest.raises(ContextError, match="not a valid tar archive"):
        unpack(io.BytesIO(body[:len(body) // 2]), tmp_path / "ctx")


def test_sparse_file(tmp_path: Path) -> None:
    """A GNU sparse member (what ``tar -S`` writes) is read through tarfile's own map."""
    import shutil
    import subprocess

    if shutil.which("tar") is None:
        pytest.skip("no tar")
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "holes", "wb") as f:
        f.seek(5 << 20)
        f.write(b"end")
    (src / "after").write_bytes(b"after\n")
    body = subprocess.run(["tar", "-c", "-S", "--format=gnu", "-C", str(src), "holes", "after"],
                          check=True, capture_output=True).stdout
    ctx = unpack(io.BytesIO(body), tmp_path / "ctx")
    data = (tmp_path / "ctx" / "holes").read_bytes()
    assert len(data) == (5 << 20) + 3 and data.endswith(b"end")
    assert ctx.hashes["holes"] == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "ctx" / "after").read_bytes() == b"after\n"


def test_nocache_leaves_large_files_to_be_hashed_when_needed(tmp_path: Path) -> None:
    """Without the cache (``hash_large=False``) a file larger than an instructions file may
    be is written but not hashed as it comes; smaller ones (the instructions file among
    them) are, and a key computed later reads the file itself."""
    from svc.engine.builder.context import MAX_SVCFILE
    from svc.engine.builder.sources import Source, source_key

    big, small = os.urandom(MAX_SVCFILE + 1), b"FROM scratch\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Svcfile", small), ("big", big)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    eager = unpack(io.BytesIO(buf.getvalue()), tmp_path / "eager")
    lazy = unpack(io.BytesIO(buf.getvalue()), tmp_path / "lazy", hash_large=False)
    assert lazy.hashes == {"Svcfile": hashlib.sha256(small).hexdigest()}
    assert (tmp_path / "lazy" / "big").read_bytes() == big
    assert eager.hashes["big"] == hashlib.sha256(big).hexdigest()
    keys = [source_key(ctx, Source("big", ctx.root / "big", False)) for ctx in (eager, lazy)]
    assert keys[0] == keys[1]
