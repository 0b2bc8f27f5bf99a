"""The pull's download manager: partial blobs kept within a day and a disk budget, and
forgotten with the image that needed them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from svc.engine.images.downloads import MAX_AGE, DownloadManager
from svc.registry.transport import RegistryConfig

A, B, C = ("sha256:" + c * 64 for c in "abc")


def _partial(m: DownloadManager, digest: str, size: int, age: float) -> Path:
    path = m.partial_path(digest)
    path.write_bytes(b"x" * size)
    when = time.time() - age
    os.utime(path, (when, when))
    return path


async def test_sweep_drops_day_old_partials_then_the_oldest_beyond_the_budget(
        tmp_path: Path) -> None:
    m = DownloadManager(tmp_path, RegistryConfig(), budget=1000)
    m.dir.mkdir()
    stale = _partial(m, A, 10, MAX_AGE + 60)
    older = _partial(m, B, 800, 120)
    newer = _partial(m, C, 700, 60)
    other = m.dir / "notes.txt"
    other.write_text("not a partial blob")
    removed = await m.sweep()
    assert sorted(removed) == sorted([stale, older])
    assert newer.exists() and other.exists()
    assert await m.sweep() == []  # 700 bytes fit


def test_forget_removes_the_partials_of_named_blobs(tmp_path: Path) -> None:
    m = DownloadManager(tmp_path, RegistryConfig())
    m.dir.mkdir()
    a = _partial(m, A, 5, 0)
    b = _partial(m, B, 5, 0)
    m.blobs_gone([A, C])()
    assert not a.exists() and b.exists()
    assert m.partial_path(A).name == "sha256-" + "a" * 64 + ".partial"


def test_owners_lists_updated_from_many_threads_at_once_keep_every_owner(
        tmp_path: Path) -> None:
    """Kept partial files of concurrent pulls name their owners from worker threads at the
    same moment: each update lands (no shared temp file renamed twice, which took the
    daemon down), and the list ends up with every owner."""
    from concurrent.futures import ThreadPoolExecutor

    from svc.engine.images import downloads

    partial = tmp_path / "sha256-ab.partial"
    partial.write_bytes(b"x")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: downloads._add_owners(partial, {f"repo{i}:latest"}),
                      range(200)))
    assert downloads._read_owners(partial) == {f"repo{i}:latest" for i in range(200)}
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
