"""The context unpacker and the COPY source rules, on crafted archives (no daemon)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from svc.engine.builder import context as ctxmod
from svc.engine.builder import sources
from svc.engine.builder.context import ContextError, unpack
from svc.errors import InvalidParameter, NotFound


def _tar(*members: tuple[str, bytes | str | None]) -> io.BytesIO:
    """(name, bytes) files, (name/, None) directories, (name, "->target") symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name.rstrip("/"))
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data.removeprefix("->")
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def test_unpack_hashes_files(tmp_path: Path) -> None:
    ctx = unpack(_tar(("d/", None), ("d/f", b"abc"), ("l", "->d/f")), tmp_path / "c")
    assert ctx.hashes == {"d/f": hashlib.sha256(b"abc").hexdigest()}
    assert (tmp_path / "c" / "l").is_symlink()


@pytest.mark.parametrize(("members", "words"), [
    ((("../x", b""),), "points outside"),
    ((("/x", b""),), "absolute path"),
    ((("l", "->/etc"), ("l/passwd", b"x")), "lies below the symlink"),
])
def test_unpack_refuses(tmp_path: Path, members: tuple[tuple[str, bytes | str | None], ...],
                        words: str) -> None:
    with pytest.raises(ContextError, match=words):
        unpack(_tar(*members), tmp_path / "c")


def test_empty_body_is_an_empty_context(tmp_path: Path) -> None:
    ctx = unpack(io.BytesIO(b""), tmp_path / "c")
    with pytest.raises(ContextError, match="Cannot locate specified Dockerfile"):
        ctxmod.read_svcfile(ctx, None)


def test_svcfile_wins_and_names_stay_inside(tmp_path: Path) -> None:
    ctx = unpack(_tar(("Svcfile", b"FROM a"), ("Dockerfile", b"FROM b"), ("out", "->/etc/passwd")),
                 tmp_path / "c")
    assert ctxmod.read_svcfile(ctx, None) == ("Svcfile", "FROM a")
    assert ctxmod.read_svcfile(ctx, "Dockerfile") == ("Dockerfile", "FROM b")
    with pytest.raises(ContextError, match="must be within the build context"):
        ctxmod.read_svcfile(ctx, "out")


def test_sources_and_keys(tmp_path: Path) -> None:
    ctx = unpack(_tar(("a.txt", b"1"), ("b.txt", b"2"), ("d/", None), ("d/x", b"3"),
                      ("esc", "->/etc"), ("in", "->d")), tmp_path / "c")
    assert [s.rel for s in sources.resolve(ctx, "*.txt", "COPY")] == ["a.txt", "b.txt"]
    assert sources.resolve(ctx, "/in", "COPY")[0].is_dir
    with pytest.raises(InvalidParameter, match="forbidden path outside"):
        sources.resolve(ctx, "esc", "COPY")
    with pytest.raises(InvalidParameter, match="forbidden path outside"):
        sources.resolve(ctx, "../../x", "COPY")
    with pytest.raises(NotFound):
        sources.resolve(ctx, "nope*", "COPY")
    key = sources.source_key(ctx, sources.resolve(ctx, "a.txt", "COPY")[0])
    assert key.startswith("file:")
    (tmp_path / "c" / "a.txt").touch()  # mtime only: same key
    assert sources.source_key(ctx, sources.resolve(ctx, "a.txt", "COPY")[0]) == key
    assert sources.source_key(ctx, sources.resolve(ctx, "d", "COPY")[0]).startswith("dir:")
    assert sources.combined_key(["file:a", "file:b"]).startswith("multi:")


def test_destination_and_plan(tmp_path: Path) -> None:
    assert sources.destination("rel/", "/w") == "/w/rel/"
    assert sources.destination("/a/../b", "/w") == "/b"
    assert sources.destination(".", "/w") == "/w/"
    f = sources.Source("f", tmp_path / "f", False)
    assert sources.plan([f], "/x", False) == [(tmp_path / "f", "x")]
    assert sources.plan([f], "/x/", False) == [(tmp_path / "f", "x/f")]
    assert sources.plan([f], "/x", True) == [(tmp_path / "f", "x/f")]


def test_missing_trailer_is_accepted_but_cut_data_is_not(tmp_path: Path) -> None:
    """CLI 28 with -f outside the context sends no padding nor end blocks after the last
    member; a body cut inside a member's data is refused."""
    whole = _tar(("a", b"x" * 100), ("b", b"y" * 48)).getvalue()
    no_trailer = whole[:512 * 3 + 48]  # a: header + 1 block; b: header + 48 bytes
    ctx = unpack(io.BytesIO(no_trailer), tmp_path / "c1")
    assert (tmp_path / "c1" / "b").read_bytes() == b"y" * 48 and len(ctx.hashes) == 2
    with pytest.raises(ContextError, match="not a valid tar archive"):
        unpack(io.BytesIO(whole[:512 * 3 + 20]), tmp_path / "c2")


def test_directories_keep_their_modes(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("ro")
        info.type, info.mode = tarfile.DIRTYPE, 0o555
        tar.addfile(info)
        info = tarfile.TarInfo("ro/f")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    buf.seek(0)
    unpack(buf, tmp_path / "c")
    assert (tmp_path / "c" / "ro").stat().st_mode & 0o7777 == 0o555
    assert (tmp_path / "c" / "ro" / "f").read_bytes() == b"x"


def _sparse(size: int) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("holes")
        info.size = 1
        info.pax_headers = {"GNU.sparse.size": str(size), "GNU.sparse.map": f"{size - 1},1",
                            "GNU.sparse.name": "holes"}
        tar.addfile(info, io.BytesIO(b"x"))
    buf.seek(0)
    return buf


def test_bombs_are_refused_by_absolute_limits(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_BYTES, or past the free disk, before a byte of the file is written."""
    with pytest.raises(ContextError, match="past 16 GiB"):
        unpack(_sparse(1 << 40), tmp_path / "a")
    assert not (tmp_path / "a" / "holes").exists()
    monkeypatch.setattr(ctxmod, "MAX_BYTES", 1 << 60)
    with pytest.raises(ContextError, match="does not fit on the daemon's disk"):
        unpack(_sparse(1 << 50), tmp_path / "b")
    assert not (tmp_path / "b" / "holes").exists()
    monkeypatch.setattr(ctxmod, "MAX_BYTES", 8 << 20)
    assert unpack(_sparse(8 << 20), tmp_path / "c").size == 8 << 20
