"""remove_tree: deep trees, plain files, symlinks out, filesystems mounted below."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from svc.storage.fsutil import remove_tree


def _deep(base: Path, levels: int, name: str) -> None:
    """A chain of ``levels`` directories (made relative to a descriptor: it is deeper than
    PATH_MAX allows a path to be) with a file at the bottom."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_tree_deeper_than_recursion_and_path_max(tmp_path: Path) -> None:
    top = tmp_path / "tmp-import"
    top.mkdir()
    _deep(top, 3000, "d" * 20)  # 63,000 bytes of path, 3,000 levels
    remove_tree(top)
    assert not top.exists()


def test_files_symlinks_and_missing(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    plain = tmp_path / "tmp-commit-1"
    plain.write_text("")
    remove_tree(plain)
    assert not plain.exists()
    link = tmp_path / "tmp-link"
    link.symlink_to(outside)
    remove_tree(link)
    assert not link.is_symlink() and (outside / "keep").exists()
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    (tree / "a" / "out").symlink_to(outside)
    os.mkfifo(tree / "fifo")
    remove_tree(tree)
    assert not tree.exists() and (outside / "keep").read_text() == "keep"
    remove_tree(tmp_path / "never-was")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_mounted_filesystem_below_is_left_alone(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    point = tree / "sub" / "mnt"
    point.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(point)], check=True)
    try:
        (point / "precious").write_text("mine")
        (tree / "sub" / "f").write_text("x")
        with pytest.raises(OSError):
            remove_tree(tree)
        assert (point / "precious").read_text() == "mine"
        remove_tree(tree, ignore_errors=True)
        assert (point / "precious").read_text() == "mine"
        assert not (tree / "sub" / "f").exists()
    finally:
        subprocess.run(["umount", str(point)], check=False)
