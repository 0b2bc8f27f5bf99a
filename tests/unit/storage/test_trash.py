"""Trash: durable throws under unique names, deletes (paced, stoppable, resumable), figures;
the layer store's deletes through it (a chain id committed again while its old copy waits)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from svc.storage.layers import GONE_LINK, LayerStore
from svc.storage.trash import Pending, Trash
from tests.unit.support_layers import directory, file, tar


def tree(where: Path, files: int = 30) -> Path:
    for i in range(files):
        d = where / f"d{i % 3}" / "deeper"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_bytes(b"x" * i)
    os.symlink("/etc/passwd", where / "link")  # never followed
    return where


def trash_at(tmp_path: Path) -> Trash:
    t = Trash(tmp_path / "trash")
    assert t.prepare() == Pending(0, 0)
    return t


def test_throw_renames_away_under_unique_names_and_counts(tmp_path: Path) -> None:
    t = trash_at(tmp_path)
    woken = []
    t.notify = lambda: woken.append(1)
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    names = t.throw([a, b, tmp_path / "missing"], [100, 200])
    assert len(names) == 2 and len(set(names)) == 2
    assert not a.exists() and not b.exists()
    assert t.entries() == sorted(names)
    assert t.pending() == Pending(2, 300)
    assert woken == [1]
    # the same path thrown again (a layer re-used after its removal) gets a name of its own
    again = t.throw([tree(tmp_path / "a")])
    assert again[0] not in names and t.pending() == Pending(3, 300)


def test_empty_deletes_an_entry_and_paces_each_removal(tmp_path: Path) -> None:
    t = trash_at(tmp_path)
    [name] = t.throw([tree(tmp_path / "a", files=30)], [5])
    calls = []
    assert t.empty(name, lambda: calls.append(1))
    assert t.entries() == [] and t.pending() == Pending(0, 0)
    # 30 files + a symlink + 3 x (d, deeper) directories
    assert len(calls) == 31 + 6
    assert Path("/etc/passwd").exists()


def test_a_stopped_delete_stays_in_the_trash_and_is_finished_after_a_restart(
        tmp_path: Path) -> None:
    t = trash_at(tmp_path)
    [name] = t.throw([tree(tmp_path / "a", files=30)], [5])

    class Stop(BaseException):
        pass

    count = 0

    def stop_after_ten() -> None:
        nonlocal count
        count += 1
        if count == 10:
            raise Stop

    with pytest.raises(Stop):
        t.empty(name, stop_after_ten)
    assert t.entries() == [name]
    # a new daemon finds it (bytes unknown) and finishes it
    again = Trash(tmp_path / "trash")
    assert again.prepare() == Pending(1, 0)
    assert again.empty(name)
    assert again.entries() == [] and again.pending() == Pending(0, 0)


def test_an_entry_with_a_mount_below_is_left(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    t = trash_at(tmp_path)
    [name] = t.throw([tree(tmp_path / "a")])

    def around_a_mount(*args: object, **kwargs: object) -> None:
        assert kwargs["ignore_errors"]  # all it can; what it cannot stays

    monkeypatch.setattr("svc.storage.trash.remove_tree", around_a_mount)
    assert not t.empty(name)
    assert t.entries() == [name] and t.pending().entries == 1


def test_a_tree_on_another_file_system_is_deleted_on_the_spot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = trash_at(tmp_path)
    a = tree(tmp_path / "a")

    def exdev(src: object, dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("svc.storage.trash.os.rename", exdev)
    assert t.throw([a]) == []
    assert not a.exists() and t.entries() == []


def test_undurable_throws_skip_the_fsyncs(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    t = trash_at(tmp_path)
    synced: list[Path] = []
    monkeypatch.setattr("svc.storage.atomic.fsync_dir", synced.append)  # (DirSyncs.flush)
    t.throw([tree(tmp_path / "a")], durable=False)
    assert synced == []
    t.throw([tree(tmp_path / "p" / "b"), tree(tmp_path / "p" / "c")])
    assert sorted(synced) == sorted([tmp_path / "trash", tmp_path / "p"])


BASE = tar(directory("etc"), file("etc/os-release", b"svc\n"))
TOP = tar(file("etc/motd", b"hello\n"))


def test_layer_delete_throws_and_the_chain_id_can_come_back_at_once(tmp_path: Path) -> None:
    import io

    t = trash_at(tmp_path)
    s = LayerStore(tmp_path / "overlay2", t)
    assert s.prepare() == []
    base = s.register(io.BytesIO(BASE), None)
    top = s.register(io.BytesIO(TOP), base.chain_id)
    s.delete(top.chain_id, base.chain_id)  # children first, in one step
    assert s.list() == [] and len(t.entries()) == 2
    assert t.pending().bytes_known == base.size + top.size
    assert sorted(os.listdir(s.root)) == ["l"] and os.listdir(s.root / "l") == []
    # each short link went along with its layer (a rename: nothing unlinked on the way)
    links = sorted(os.readlink(t.path / n / GONE_LINK) for n in t.entries())
    assert links == sorted(f"../{i.chain_id.removeprefix('sha256:')}/diff" for i in (base, top))
    again = s.register(io.BytesIO(BASE), None)  # the old copy still in the trash
    assert again.chain_id == base.chain_id
    assert (s.diff_dir(again.chain_id) / "etc" / "os-release").read_bytes() == b"svc\n"
    for name in t.entries():
        assert t.empty(name)
    assert (s.diff_dir(again.chain_id) / "etc" / "os-release").read_bytes() == b"svc\n"
    assert [i.chain_id for i in LayerStore(s.root, t).list()] == []  # not prepared: empty
    reopened = LayerStore(s.root, t)
    reopened.prepare()
    assert [i.chain_id for i in reopened.list()] == [base.chain_id]


def test_layer_delete_of_a_parent_alone_is_refused_and_deletes_nothing(tmp_path: Path) -> None:
    import io

    from svc.errors import Conflict

    t = trash_at(tmp_path)
    s = LayerStore(tmp_path / "overlay2", t)
    s.prepare()
    base = s.register(io.BytesIO(BASE), None)
    top = s.register(io.BytesIO(TOP), base.chain_id)
    with pytest.raises(Conflict):
        s.delete(base.chain_id)
    assert {i.chain_id for i in s.list()} == {base.chain_id, top.chain_id}
    assert t.entries() == []


def test_leftovers_of_a_crash_go_to_the_trash_at_start(tmp_path: Path) -> None:
    t = trash_at(tmp_path)
    root = tmp_path / "overlay2"
    (root / "tmp-0123").mkdir(parents=True)
    (root / "tmp-0123" / "f").write_bytes(b"half a layer")
    s = LayerStore(root, t)
    assert s.prepare() == [str(root / "tmp-0123")]
    assert not (root / "tmp-0123").exists() and len(t.entries()) == 1


def test_a_mount_in_an_entry_is_never_walked_into(tmp_path: Path) -> None:
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    t = trash_at(tmp_path)
    [name] = t.throw([tree(tmp_path / "a")])
    point = tmp_path / "trash" / name / "m"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(point)], check=True)
    try:
        (point / "kept").write_bytes(b"not the trash's")
        assert not t.empty(name)
        assert (point / "kept").read_bytes() == b"not the trash's"
        assert sorted(os.listdir(tmp_path / "trash" / name)) == ["m"]
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert t.empty(name) and t.entries() == []
