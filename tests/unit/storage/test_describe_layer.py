"""A layer laid out in place (``LayerStore.stage_tree``, then ``describe``): its diff id and
skeleton are those of the tar ``produce_layer`` writes for the same tree, and the store
rebuilds that exact tar. A tree staged by ``stage_tree`` is mountable through its short link
before it is described and after it is committed; a copy of a layer the store has already
stays until discarded."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from svc.storage.layerproduce import produce_layer
from svc.storage.layers import LayerStore, StagedLayer

BIG = os.urandom(3 << 20)


def _fill(diff: Path) -> None:
    (diff / "d" / "sub").mkdir(parents=True)
    (diff / "d" / "big").write_bytes(BIG)
    (diff / "d" / "small").write_bytes(b"x" * 513)
    os.link(diff / "d" / "small", diff / "d" / "hard")
    os.symlink("small", diff / "d" / "link")
    (diff / "empty").write_bytes(b"")
    for p in diff.rglob("*"):
        os.utime(p, (1_600_000_000, 1_600_000_000), follow_symlinks=False)


def _stage_dir(store: LayerStore, fill: Callable[[Path], None]) -> StagedLayer:
    staged = store.stage_tree(fill)
    store.describe(staged)
    return staged


def test_stage_dir_matches_produce_layer(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()
    staged = _stage_dir(store, _fill)
    produced = io.BytesIO()
    diff_id = produce_layer(staged.path / "diff", produced)
    assert staged.diff_id == diff_id
    assert staged.tar_size == len(produced.getvalue())
    assert staged.size == (3 << 20) + 513
    layer = store.commit(staged, None)
    rebuilt = io.BytesIO()
    store.write_tar(layer.chain_id, rebuilt)
    assert rebuilt.getvalue() == produced.getvalue()
    assert "sha256:" + hashlib.sha256(rebuilt.getvalue()).hexdigest() == layer.diff_id


def test_stage_dir_failure_leaves_nothing(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()

    def fail(diff: Path) -> None:
        (diff / "f").write_bytes(b"x")
        raise ValueError("no")

    with pytest.raises(ValueError):
        _stage_dir(store, fail)
    assert [p.name for p in (tmp_path / "layers").iterdir() if p.name.startswith("tmp-")] == []


def _resolves_to_tree(store: LayerStore, lower_dir: str) -> bool:
    return (store.root / lower_dir / "d" / "small").read_bytes() == b"x" * 513


def test_stage_tree_link_follows_the_commit(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()
    staged = store.stage_tree(_fill)
    assert staged.diff_id == ""
    assert _resolves_to_tree(store, staged.lower_dir)
    store.describe(staged)
    layer = store.commit(staged, None)
    assert layer.diff_id == staged.diff_id
    assert f"l/{layer.link}" == staged.lower_dir  # the same short name, now the store's
    assert _resolves_to_tree(store, staged.lower_dir)
    assert store.lower_dirs(layer.chain_id) == [staged.lower_dir]
    store.discard(staged)  # committed: nothing to do
    assert _resolves_to_tree(store, staged.lower_dir)
    again = LayerStore(tmp_path / "layers")
    again.prepare()  # the link is the committed layer's: kept
    assert again.lower_dirs(layer.chain_id) == [staged.lower_dir]


def test_a_staged_copy_of_a_known_layer_stays_until_discarded(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()
    first = _stage_dir(store, _fill)
    layer = store.commit(first, None)
    second = store.stage_tree(_fill)
    store.describe(second)
    assert store.commit(second, None) == layer
    assert _resolves_to_tree(store, second.lower_dir)  # a mount may still use it
    store.discard(second)
    assert not (store.root / second.lower_dir).is_symlink()
    assert not second.path.exists()
    assert _resolves_to_tree(store, f"l/{layer.link}")


def test_prepare_removes_a_staged_tree_and_its_link(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()
    staged = store.stage_tree(_fill)  # then the daemon died
    discarded = LayerStore(tmp_path / "layers").prepare()
    assert str(staged.path) in discarded
    assert not (store.root / staged.lower_dir).is_symlink()
