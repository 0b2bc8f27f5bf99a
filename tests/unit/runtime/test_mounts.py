"""unmount_all against the real kernel: mounts stacked on one point all go."""

from __future__ import annotations

import subprocess
from pathlib import Path

from svc.runtime.mounts import mounts_under, unmount_all


def test_stacked_mounts_are_all_unmounted(tmp_path: Path) -> None:
    point = tmp_path / "a" / "merged"
    point.mkdir(parents=True)
    for _ in range(2):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(point)], check=True)
    try:
        assert len(unmount_all(tmp_path)) == 2
        assert mounts_under(tmp_path) == []
    finally:
        unmount_all(tmp_path)
