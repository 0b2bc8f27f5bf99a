"""The tar an ADD'd local archive is written again as: its owner, its limits (no daemon)."""

from __future__ import annotations

import io
import lzma
import tarfile
from pathlib import Path

import pytest

from svc.engine.builder import context as ctxmod
from svc.engine.builder.archives import archive_tar
from svc.engine.builder.context import ContextError


def _xz(tmp_path: Path, members: dict[str, bytes]) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.uid, info.uname = len(data), 7, "seven"
            info.pax_headers = {"SCHILY.xattr.user.k": "v"}
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "a.tar.xz"
    path.write_bytes(lzma.compress(buf.getvalue()))
    return path


def _members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


def test_owner_and_extended_headers(tmp_path: Path) -> None:
    path = _xz(tmp_path, {"a": b"1", "b/c": b"22"})
    out = io.BytesIO()
    archive_tar(path, out, owner=None, disk=tmp_path)
    kept = _members(out.getvalue())
    assert [(m.name, m.size, m.uid, m.uname) for m in kept] == [("a", 1, 7, "seven"),
                                                                 ("b/c", 2, 7, "seven")]
    assert kept[0].pax_headers["SCHILY.xattr.user.k"] == "v"
    out = io.BytesIO()
    archive_tar(path, out, owner=(1000, 2000), disk=tmp_path)
    assert {(m.uid, m.gid, m.uname) for m in _members(out.getvalue())} == {(1000, 2000, "")}


def test_an_archive_expanding_past_the_limit_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctxmod, "MAX_BYTES", 4 << 20)
    path = _xz(tmp_path, {"first": bytes(3 << 20), "second": bytes(2 << 20)})
    assert path.stat().st_size < 10_000
    out = io.BytesIO()
    with pytest.raises(ContextError, match="ADD of a.tar.xz refused: 'second' takes it past"):
        archive_tar(path, out, owner=None, disk=tmp_path)
    assert len(out.getvalue()) < 4 << 20  # the second file was not written


def test_a_damaged_archive_is_named(tmp_path: Path) -> None:
    path = _xz(tmp_path, {"a": bytes(100_000)})
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(ContextError, match="ADD of a.tar.xz failed: the archive cannot be read"):
        archive_tar(path, io.BytesIO(), owner=None, disk=tmp_path)
