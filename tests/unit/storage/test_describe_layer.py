"""A layer laid out in place (``LayerStore.stage_dir``): its diff id and skeleton are those of
the tar ``produce_layer`` writes for the same tree, and the store rebuilds that exact tar."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from svc.storage.layerproduce import produce_layer
from svc.storage.layers import LayerStore


def _fill(diff: Path) -> None:
    (diff / "d" / "sub").mkdir(parents=True)
    (diff / "d" / "big").write_bytes(os.urandom(3 << 20))
    (diff / "d" / "small").write_bytes(b"x" * 513)
    os.link(diff / "d" / "small", diff / "d" / "hard")
    os.symlink("small", diff / "d" / "link")
    (diff / "empty").write_bytes(b"")
    for p in diff.rglob("*"):
        os.utime(p, (1_600_000_000, 1_600_000_000), follow_symlinks=False)


def test_stage_dir_matches_produce_layer(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "layers")
    store.prepare()
    staged = store.stage_dir(_fill)
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
        store.stage_dir(fail)
    assert [p.name for p in (tmp_path / "layers").iterdir() if p.name.startswith("tmp-")] == []
