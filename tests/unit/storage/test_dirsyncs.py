"""Deferred directory fsyncs (``DirSyncs``): a change over several directories fsyncs each one
once, at its end and all at once, and still fsyncs a written file before its rename; the names
file never goes back to an older snapshot when two writers finish out of order."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from svc.storage import atomic
from svc.storage.atomic import DirSyncs, atomic_remove, atomic_write
from svc.storage.refs import RefStore
from svc.storage.store import ObjectStore
from svc.storage.trash import Trash


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What was fsynced, in order: ``dir:<path>`` or ``file:<path>``."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        seen.append(("dir:" if os.path.isdir(path) else "file:") + path)
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    return seen


def test_a_change_over_four_directories_syncs_each_once_at_the_end(
        tmp_path: Path, fsynced: list[str]) -> None:
    store = ObjectStore(tmp_path)
    store.prepare()
    store.put("images", "ab" * 32, {"chain": []})
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "c1"
    config.write_bytes(b"{}")
    layer = tmp_path / "layers" / "l1"
    layer.mkdir(parents=True)
    (layer / "f").write_bytes(b"x")
    trash = Trash(tmp_path / "trash")
    trash.prepare()
    fsynced.clear()

    syncs = DirSyncs()
    atomic_write(tmp_path / "names.json", b"{}", syncs=syncs)
    assert store.delete("images", "ab" * 32, syncs)
    assert atomic_remove(config, syncs)
    assert trash.throw([layer], syncs=syncs)
    # Before the flush: only the new file's data, never a directory.
    assert fsynced == [f"file:{tmp_path}/.names.json{atomic.TEMP_MARK}" + fsynced[0].split(
        atomic.TEMP_MARK)[1]]
    assert (tmp_path / "names.json").read_bytes() == b"{}"
    assert store.get("images", "ab" * 32) is None and not config.exists()

    syncs.flush()
    dirs = sorted(s.removeprefix("dir:") for s in fsynced[1:])
    assert dirs == sorted([str(tmp_path), str(tmp_path / "store" / "images"),
                           str(tmp_path / "configs"), str(tmp_path / "trash"),
                           str(tmp_path / "layers")])
    syncs.flush()  # forgotten once flushed
    assert len(fsynced) == 6


def test_a_failed_fsync_is_raised_after_the_others_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    done: list[Path] = []

    def fsync_dir(path: Path) -> None:
        if path == dirs[2]:
            raise OSError(5, "Input/output error", str(path))
        done.append(path)

    monkeypatch.setattr(atomic, "fsync_dir", fsync_dir)
    syncs = DirSyncs()
    for d in dirs:
        syncs.add(d)
    with pytest.raises(OSError, match="Input/output error"):
        syncs.flush()
    assert sorted(done) == [dirs[0], dirs[1], dirs[3]]


def test_without_syncs_every_change_syncs_its_directory_at_once(
        tmp_path: Path, fsynced: list[str]) -> None:
    (tmp_path / "f").write_bytes(b"x")
    assert atomic_remove(tmp_path / "f")
    assert fsynced == [f"dir:{tmp_path}"]
    assert not atomic_remove(tmp_path / "f")  # nothing there: nothing synced
    assert fsynced == [f"dir:{tmp_path}"]


def test_names_never_go_back_to_an_older_snapshot(tmp_path: Path) -> None:
    refs = RefStore(tmp_path)
    newer = {"busybox": {"busybox:latest": "sha256:" + "b" * 64}}
    older = {"busybox": {"busybox:latest": "sha256:" + "a" * 64}}
    assert refs.save(newer, 2)
    assert not refs.save(older, 1)  # its writer finished last: not written
    assert refs.load() == newer
    assert json.loads((tmp_path / "repositories.json").read_bytes()) == {"Repositories": newer}
    assert refs.save(older)  # without a version: written whatever came before
    assert refs.load() == older
