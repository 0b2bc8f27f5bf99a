"""The local volume driver's directories: ``<dir>/<name>/_data``, as dockerd lays them out
(``dir`` is ``<root>/volumes``), and the copy of an image's content into a new volume.

Blocking; the engine calls these from worker threads.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from svc.storage.fsutil import remove_tree

DATA = "_data"


def data_dir(root: Path, name: str) -> Path:
    """Where volume ``name`` keeps its files (its ``Mountpoint``)."""
    return root / name / DATA


def create(root: Path, name: str) -> Path:
    """Make the volume's directories (an existing one is kept: a crash may have left it).
    ``root`` is the daemon's own (0700, as dockerd's): no other user walks into volumes."""
    root.mkdir(mode=0o700, exist_ok=True)
    (root / name).mkdir(mode=0o700, exist_ok=True)
    data = data_dir(root, name)
    data.mkdir(mode=0o755, exist_ok=True)
    return data


def remove(root: Path, name: str) -> None:
    """Delete the volume's directories and files (nothing mounted may be left in them)."""
    remove_tree(root / name, ignore_errors=True)


def is_empty(path: Path) -> bool:
    try:
        with os.scandir(path) as it:
            return next(it, None) is None
    except FileNotFoundError:
        return True


def copy_contents(src: Path, dst: Path) -> None:
    """Copy the tree under ``src`` into ``dst`` keeping owners, modes, times, links and
    xattrs (GNU ``cp -a``), and give ``dst`` the owner and mode of ``src``, as dockerd does
    when it fills a new volume from the image.

    Raises:
        OSError: the copy failed (cp's message).
    """
    if src.is_symlink() or not src.is_dir():
        return
    result = subprocess.run(["cp", "-a", "--", f"{src}/.", f"{dst}/"], capture_output=True,
                            check=False)
    if result.returncode != 0:
        raise OSError(f"copying {src} into the volume failed: "
                      f"{result.stderr.decode(errors='replace').strip()}")
    st = src.stat()
    os.chown(dst, st.st_uid, st.st_gid)
    os.chmod(dst, st.st_mode & 0o7777)
