"""A container's root filesystem pieces that need no runner: the init layer (the mount points
runc needs, kept out of changes, export and commit), a directory of the image at a volume's
path, and a quiet unmount. Blocking."""

from __future__ import annotations

import logging
from pathlib import Path

from svc.errors import SvcError
from svc.runtime.mounts import unmount
from svc.storage.securejoin import secure_join

log = logging.getLogger("svc.engine.containers")

# Mount points runc needs, present in a lower layer so that they never show up in the
# container's changes, export or commit (moby's "-init" layer).
INIT_DIRS = ("dev", "dev/pts", "dev/shm", "dev/mqueue", "proc", "sys", "etc")
INIT_FILES = ("etc/hosts", "etc/hostname", "etc/resolv.conf", "dev/console", ".dockerenv")


def make_init_layer(path: Path) -> None:
    """Blocking; idempotent (a marker beside the layer says it is complete)."""
    done = path.with_name(path.name + ".done")
    if done.exists():
        return
    for d in INIT_DIRS:
        (path / d).mkdir(parents=True, exist_ok=True, mode=0o755)
    for f in INIT_FILES:
        (path / f).touch(mode=0o644 if not f.startswith("dev/") else 0o600)
    done.touch()


def image_dir(rootfs: Path, destination: str) -> Path | None:
    """The directory at ``destination`` inside ``rootfs`` (symlinks resolved inside it), or
    None when there is none to copy from."""
    try:
        path = secure_join(rootfs, destination)
    except (OSError, SvcError):
        return None
    return path if path.is_dir() and not path.is_symlink() else None


def unmount_quietly(path: Path) -> None:
    try:
        unmount(path)
    except OSError as exc:
        log.warning("unmounting %s: %s", path, exc)
