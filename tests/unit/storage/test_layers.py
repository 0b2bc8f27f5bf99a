"""LayerStore: register/dedupe, crash recovery, delete, byte-exact tars, a 60-layer overlay."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from svc.errors import Conflict, InvalidParameter, NotFound
from svc.storage.layers import LayerInfo, LayerStore, chain_id_of
from tests.unit.support_layers import directory, file, tar


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def store(root: Path) -> LayerStore:
    s = LayerStore(root / "overlay2")
    assert s.prepare() == []
    return s


def layer_dirs(s: LayerStore) -> list[str]:
    return sorted(p.name for p in s.root.iterdir() if p.name != "l")


BASE = tar(directory("etc"), file("etc/os-release", b"svc\n"), file("bin/sh", b"#!", mode=0o755))
TOP = tar(file("etc/motd", b"hello\n"))


def test_register_computes_chain_ids_and_dedupes(tmp_path: Path) -> None:
    s = store(tmp_path)
    base = s.register(io.BytesIO(gzip.compress(BASE)), None)
    assert base.chain_id == base.diff_id == sha(BASE)
    assert (base.parent, base.size, base.tar_size) == (None, 6, len(BASE))
    top = s.register(io.BytesIO(TOP), base.chain_id)
    assert top.chain_id == "sha256:" + hashlib.sha256(
        f"{base.chain_id} {sha(TOP)}".encode()).hexdigest()
    assert top.chain_id == chain_id_of(base.chain_id, top.diff_id)
    again = s.register(io.BytesIO(BASE), None)  # plain this time: same diff id
    assert again == base
    assert layer_dirs(s) == sorted([base.chain_id[7:], top.chain_id[7:]])
    assert len(os.listdir(s.root / "l")) == 2
    assert (s.diff_dir(base.chain_id) / "etc/os-release").read_bytes() == b"svc\n"
    link = s.root / "l" / base.link
    assert len(base.link) == 26 and os.readlink(link) == f"../{base.chain_id[7:]}/diff"
    assert (s.root / base.chain_id[7:] / "link").read_text() == base.link
    assert s.list() == [top, base]  # children first
    with pytest.raises(InvalidParameter, match="parent layer sha256:nope does not exist"):
        s.register(io.BytesIO(TOP), "sha256:nope")
    assert layer_dirs(s) == sorted([base.chain_id[7:], top.chain_id[7:]])


def test_write_tar_is_byte_identical(tmp_path: Path) -> None:
    s = store(tmp_path)
    data = BASE + b"\0" * 5000  # extra zero padding is part of the diff id
    info = s.register(io.BytesIO(data), None)
    out = io.BytesIO()
    s.write_tar(info.chain_id, out)
    assert out.getvalue() == data and s.tar_size(info.chain_id) == len(data)


def test_bad_archive_leaves_nothing(tmp_path: Path) -> None:
    s = store(tmp_path)
    with pytest.raises(InvalidParameter, match="invalid layer archive"):
        s.register(io.BytesIO(BASE[:700]), None)
    assert layer_dirs(s) == [] and s.list() == []


def test_concurrent_registers_of_one_layer_commit_once(tmp_path: Path) -> None:
    s = store(tmp_path)
    results: list[LayerInfo] = []

    def reg() -> None:
        results.append(s.register(io.BytesIO(BASE), None))

    threads = [threading.Thread(target=reg) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6 and len(set(results)) == 1
    assert layer_dirs(s) == [results[0].chain_id[7:]]
    assert len(os.listdir(s.root / "l")) == 1


def test_stage_then_commit_on_two_parents(tmp_path: Path) -> None:
    s = store(tmp_path)
    staged, other = s.stage(io.BytesIO(TOP)), s.stage(io.BytesIO(BASE))
    assert staged.diff_id == sha(TOP)
    base = s.commit(other, None)
    a = s.commit(staged, None)
    b = s.commit(staged, base.chain_id)  # same layer.tar at two places of a load
    s.discard(staged)
    s.discard(other)
    assert a.chain_id == sha(TOP) and b.parent == base.chain_id
    assert (s.diff_dir(b.chain_id) / "etc/motd").read_bytes() == b"hello\n"
    out = io.BytesIO()
    s.write_tar(b.chain_id, out)
    assert out.getvalue() == TOP
    assert len(layer_dirs(s)) == 3  # no temp dir left


def test_prepare_discards_what_a_crash_left(tmp_path: Path) -> None:
    s = store(tmp_path)
    base = s.register(io.BytesIO(BASE), None)
    top = s.register(io.BytesIO(TOP), base.chain_id)
    (s.root / "tmp-0123456789abcdef" / "diff" / "half").mkdir(parents=True)  # mid-unpack
    uncommitted = s.root / ("ab" * 32)
    (uncommitted / "diff").mkdir(parents=True)  # renamed, but layer.json not yet written
    os.symlink(f"../{'ab' * 32}/diff", s.root / "l" / ("A" * 26))
    damaged = s.register(io.BytesIO(tar(file("x"))), None)
    (s.root / damaged.chain_id[7:] / "layer.json").write_text("{not json")
    reopened = LayerStore(s.root)
    gone = reopened.prepare()
    assert sorted(Path(p).name for p in gone) == sorted(
        ["tmp-0123456789abcdef", "ab" * 32, "A" * 26, damaged.chain_id[7:], damaged.link])
    assert reopened.list() == [top, base]
    assert layer_dirs(reopened) == sorted([base.chain_id[7:], top.chain_id[7:]])
    assert sorted(os.listdir(s.root / "l")) == sorted([base.link, top.link])


def test_prepare_drops_a_layer_whose_parent_is_gone(tmp_path: Path) -> None:
    s = store(tmp_path)
    base = s.register(io.BytesIO(BASE), None)
    top = s.register(io.BytesIO(TOP), base.chain_id)
    (s.root / base.chain_id[7:] / "layer.json").unlink()  # a crash in a forced delete
    reopened = LayerStore(s.root)
    assert len(reopened.prepare()) == 4  # both dirs and both links
    assert reopened.get(top.chain_id) is None and layer_dirs(reopened) == []


def test_delete(tmp_path: Path) -> None:
    s = store(tmp_path)
    base = s.register(io.BytesIO(BASE), None)
    top = s.register(io.BytesIO(TOP), base.chain_id)
    with pytest.raises(Conflict, match="parent of another layer"):
        s.delete(base.chain_id)
    s.delete(top.chain_id)
    assert s.get(top.chain_id) is None and not (s.root / "l" / top.link).exists()
    assert layer_dirs(s) == [base.chain_id[7:]]
    with pytest.raises(NotFound):
        s.delete(top.chain_id)
    with pytest.raises(NotFound):
        s.lower_dirs(top.chain_id)
    s.delete(base.chain_id)
    assert layer_dirs(s) == [] and os.listdir(s.root / "l") == []
    assert LayerStore(s.root).prepare() == []


def test_layer_json_is_the_commit_record(tmp_path: Path) -> None:
    s = store(tmp_path)
    info = s.register(io.BytesIO(BASE), None)
    doc = json.loads((s.root / info.chain_id[7:] / "layer.json").read_text())
    assert doc == {"chain_id": info.chain_id, "diff_id": info.diff_id, "parent": None,
                   "size": info.size, "link": info.link, "tar_size": info.tar_size}


# -- a real overlay mount over 60 layers ---------------------------------------------------------


def _sixty_layers(s: LayerStore) -> LayerInfo:
    """Layer i writes f<i>; layer 10 deletes f3 and d/x (whiteouts); layer 20 makes o opaque."""
    info = None
    for i in range(60):
        members = [file(f"f{i}", f"layer {i}".encode()), file("top", f"{i}".encode())]
        if i == 0:
            members += [directory("d"), file("d/x", b"x"), file("d/y", b"y"), directory("o"),
                        file("o/hidden", b"h")]
        if i == 10:
            members += [file(".wh.f3"), file("d/.wh.x")]
        if i == 20:
            members += [directory("o"), file("o/.wh..wh..opq"), file("o/new", b"n")]
        info = s.register(io.BytesIO(tar(*members)), info.chain_id if info else None)
    assert info is not None
    return info


def test_sixty_layers_mount_as_overlay(tmp_path: Path) -> None:
    s = store(tmp_path)
    top = _sixty_layers(s)
    lowers = s.lower_dirs(top.chain_id)
    assert len(lowers) == 60 and lowers[0] == f"l/{top.link}"
    assert all(len(lo) == 28 for lo in lowers)
    option = "lowerdir=" + ":".join(lowers)
    assert len(option) < 4096 - 100  # fits one page with room for the other options
    merged = tmp_path / "merged"
    merged.mkdir()
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", option, str(merged)],
                   cwd=s.root, check=True, capture_output=True)
    try:
        names = sorted(os.listdir(merged))
        assert names == sorted({f"f{i}" for i in range(60)} - {"f3"} | {"top", "d", "o"})
        assert (merged / "top").read_text() == "59"
        assert (merged / "f0").read_text() == "layer 0"
        assert os.listdir(merged / "d") == ["y"]
        assert os.listdir(merged / "o") == ["new"]  # opaque: o/hidden is gone
        assert stat.S_ISREG((merged / "f59").stat().st_mode)
    finally:
        subprocess.run(["umount", str(merged)], check=True)
