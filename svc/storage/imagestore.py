"""Image configs, content-addressed: ``<root>/image/sha256/<hex>`` holds the exact config bytes
whose sha256 is the image id (as engines since 1.10 do), so an id always verifies its content.

Blocking; the engine calls these from worker threads. A config written by a crashed daemon is
either complete (atomic write) or absent; one whose content does not match its name is
reported and skipped by ``load_all``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from svc.storage.atomic import DirSyncs, atomic_remove, atomic_write, remove_stale_temps
from svc.storage.trash import Trash

log = logging.getLogger("svc.images")

_HEX = re.compile(r"^[0-9a-f]{64}$")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ConfigStore:
    def __init__(self, root: Path) -> None:
        self.dir = root / "image" / "sha256"

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale_temps(self.dir)

    def _path(self, image_id: str) -> Path:
        hexpart = image_id.removeprefix("sha256:")
        if not _HEX.match(hexpart):
            raise ValueError(f"invalid image id {image_id!r}")
        return self.dir / hexpart

    def put(self, data: bytes) -> str:
        """Store config bytes durably; returns the image id."""
        image_id = digest_of(data)
        path = self._path(image_id)
        if not path.exists():
            atomic_write(path, data, mode=0o600)
        return image_id

    def get(self, image_id: str) -> bytes:
        return self._path(image_id).read_bytes()

    def delete(self, image_id: str, syncs: DirSyncs | None = None,
               trash: Trash | None = None) -> None:
        """Remove a config durably (with ``syncs``: once it is flushed); with ``trash`` by a
        rename into it (as ``ObjectStore.delete``)."""
        if trash is not None:
            trash.throw([self._path(image_id)], syncs=syncs)
        else:
            atomic_remove(self._path(image_id), syncs)

    def load_all(self) -> dict[str, bytes]:
        """Every stored config that verifies against its name."""
        out: dict[str, bytes] = {}
        for entry in os.scandir(self.dir):
            if not _HEX.match(entry.name):
                continue
            data = Path(entry.path).read_bytes()
            image_id = "sha256:" + entry.name
            if digest_of(data) != image_id:
                log.error("image config %s does not match its digest: skipped", entry.path)
                continue
            out[image_id] = data
        return out
