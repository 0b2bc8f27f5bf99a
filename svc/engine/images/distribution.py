"""Where each layer is known to be in registries: diffID -> {(blob digest, repository)}.

A layer's content (its diffID, the digest of the tar) reaches a registry as a compressed blob
named by another digest. Remembering which blob stands for which layer, and in which
repositories it was seen, lets a push say "Layer already exists" after one ``HEAD``, mount the
blob from another repository of the same registry ("Mounted from ..."), and never compress a
layer again that a registry already holds. Pushes record what they uploaded, found or
mounted; pulls record what they downloaded. Sizes of blobs are kept beside them when known
(a manifest names every blob with its size).

Repositories are full names (``127.0.0.1:5000/team/app``, ``docker.io/library/busybox``), so
"the same registry" is the same domain.

Durable: the whole map is one JSON document, ``<root>/distribution.json``, rewritten
atomically (temp, fsync, rename) on every change, in a worker thread, shielded from
cancellation: a caller cancelled while recording leaves memory and disk agreeing. A damaged
file is moved aside and the map starts empty (the map is a cache: losing it costs a
recompression, never correctness). Entries are added only for blobs a registry confirmed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import trio

from svc.storage.atomic import atomic_write

log = logging.getLogger("svc.images.distribution")

MAX_REPOSITORIES = 32  # per diffID: the most recent ones are kept


class DistributionMap:
    """diffID -> [(blob digest, repository)], newest last; blob digest -> size."""

    def __init__(self, root: Path) -> None:
        self.path = root / "distribution.json"
        self._entries: dict[str, list[tuple[str, str]]] = {}
        self._sizes: dict[str, int] = {}
        self._lock = trio.Lock()

    def open(self) -> None:
        """Load the map (blocking; before serving)."""
        try:
            doc = json.loads(self.path.read_bytes())
            entries = doc["layers"]
            self._entries = {str(d): [(str(b), str(r)) for b, r in pairs]
                             for d, pairs in entries.items()}
            self._sizes = {str(b): int(s) for b, s in doc.get("sizes", {}).items()}
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            log.error("%s is damaged (%s): starting with an empty map", self.path, exc)
            self._entries, self._sizes = {}, {}
            self.path.replace(self.path.with_name(self.path.name + ".corrupt"))

    def lookup(self, diff_id: str) -> list[tuple[str, str]]:
        """Every (blob digest, repository) known for a layer, most recent first."""
        return list(reversed(self._entries.get(diff_id, [])))

    def size(self, blob_digest: str) -> int | None:
        return self._sizes.get(blob_digest)

    async def record(self, diff_id: str, blob_digest: str, repository: str, *,
                     size: int | None = None) -> None:
        """Remember that ``repository`` holds the layer ``diff_id`` as ``blob_digest``.

        Cancellation: shielded; when it returns (or is cancelled) the entry is on disk.
        """
        with trio.CancelScope(shield=True):
            async with self._lock:
                pairs = [p for p in self._entries.get(diff_id, [])
                         if p != (blob_digest, repository)]
                pairs.append((blob_digest, repository))
                self._entries[diff_id] = pairs[-MAX_REPOSITORIES:]
                if size is not None:
                    self._sizes[blob_digest] = size
                await self._save()

    def diff_id_of(self, blob_digest: str) -> str | None:
        """The layer a blob is known to hold (a schema 1 manifest names only blobs)."""
        for diff_id, pairs in self._entries.items():
            if any(b == blob_digest for b, _ in pairs):
                return diff_id
        return None

    async def record_many(self, entries: list[tuple[str, str, int | None]],
                          repository: str) -> None:
        """Record several (diff_id, blob digest, size) of one repository in one write."""
        with trio.CancelScope(shield=True):
            async with self._lock:
                for diff_id, blob_digest, size in entries:
                    pairs = [p for p in self._entries.get(diff_id, [])
                             if p != (blob_digest, repository)]
                    pairs.append((blob_digest, repository))
                    self._entries[diff_id] = pairs[-MAX_REPOSITORIES:]
                    if size is not None:
                        self._sizes[blob_digest] = size
                await self._save()

    async def forget(self, diff_id: str, blob_digest: str, repository: str) -> None:
        """Drop an entry a registry contradicted (the blob is not there any more)."""
        with trio.CancelScope(shield=True):
            async with self._lock:
                pairs = self._entries.get(diff_id, [])
                if (blob_digest, repository) not in pairs:
                    return
                pairs.remove((blob_digest, repository))
                if not pairs:
                    del self._entries[diff_id]
                used = {b for ps in self._entries.values() for b, _ in ps}
                self._sizes = {b: s for b, s in self._sizes.items() if b in used}
                await self._save()

    async def _save(self) -> None:
        doc = {"layers": {d: [list(p) for p in pairs] for d, pairs in self._entries.items()},
               "sizes": self._sizes}
        data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        await trio.to_thread.run_sync(atomic_write, self.path, data)
