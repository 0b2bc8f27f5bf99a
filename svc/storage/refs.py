"""The reference store: ``repo:tag`` and ``repo@digest`` names -> image ids.

Persisted as one JSON document (``<root>/repositories.json``, the shape dockerd uses:
``{"Repositories": {"busybox": {"busybox:latest": "sha256:..."}}}``), rewritten atomically on
every change. Names are stored in their familiar form (``busybox:latest``); the engine
normalizes before calling. Blocking; called from worker threads.

Two changes in flight (a tag and an ``rmi``, each saving its snapshot of the names in its own
worker thread) may reach the disk in either order; each snapshot carries a version, and one
older than what the file already holds is not written, so the file never goes back in time.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from svc.storage.atomic import DirSyncs, atomic_write

log = logging.getLogger("svc.refs")


class RefStore:
    def __init__(self, root: Path) -> None:
        self.path = root / "repositories.json"
        self._lock = threading.Lock()
        self._written = -1  # the version of the snapshot the file holds

    def load(self) -> dict[str, dict[str, str]]:
        """repo -> {ref -> image id}; a damaged file is reported and treated as empty."""
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError) as exc:
            log.error("%s is damaged (%s): starting with no image names", self.path, exc)
            self.path.replace(self.path.with_name(self.path.name + ".corrupt"))
            return {}
        repos = data.get("Repositories") if isinstance(data, dict) else None
        if not isinstance(repos, dict):
            return {}
        return {str(r): {str(k): str(v) for k, v in refs.items()}
                for r, refs in repos.items() if isinstance(refs, dict)}

    def save(self, repos: dict[str, dict[str, str]], version: int | None = None, *,
             syncs: DirSyncs | None = None) -> bool:
        """Write ``repos`` durably (``syncs``: see ``atomic_write``); False, and nothing
        written, when a snapshot of a newer ``version`` was written already. Without a version
        the snapshot is written whatever came before."""
        data = json.dumps({"Repositories": repos}, sort_keys=True).encode() + b"\n"
        with self._lock:
            if version is not None and version <= self._written:
                return False
            atomic_write(self.path, data, syncs=syncs)
            if version is not None:
                self._written = version
        return True
