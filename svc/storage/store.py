"""The object store: one JSON document per object, grouped in collections, under ``--root``.

Every object a later issue adds (containers, images, volumes, networks) is a record here:
``<root>/<collection>/<id>.json``, written with ``atomic_write``. Loading tolerates damage: a
record that does not parse is reported, moved aside to ``<id>.json.corrupt`` and skipped, so one
bad file never keeps the daemon from starting.

All methods block on the disk; the engine calls them through ``trio.to_thread``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from svc.storage.atomic import DirSyncs, atomic_remove, atomic_write, remove_stale_temps
from svc.storage.trash import Trash

log = logging.getLogger("svc.store")

COLLECTIONS = ("containers", "images", "volumes", "networks")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,254}$")


@dataclass
class LoadReport:
    """What ``load`` found: the good records and the damaged files it skipped."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


class ObjectStore:
    """Durable JSON records keyed by (collection, id)."""

    def __init__(self, root: Path) -> None:
        self.root = root / "store"

    def prepare(self) -> None:
        """Create the collection directories and sweep temp files from an interrupted write."""
        for name in COLLECTIONS:
            d = self.root / name
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            for stale in remove_stale_temps(d):
                log.warning("removed an interrupted write: %s", stale)

    def _path(self, collection: str, oid: str) -> Path:
        if collection not in COLLECTIONS:
            raise ValueError(f"unknown collection {collection!r}")
        if not _ID_RE.match(oid) or oid in (".", ".."):
            raise ValueError(f"invalid record id {oid!r}")
        return self.root / collection / f"{oid}.json"

    def put(self, collection: str, oid: str, record: dict[str, Any]) -> None:
        """Write a record durably; when this returns the record survives a crash."""
        data = json.dumps(record, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        atomic_write(self._path(collection, oid), data)

    def delete(self, collection: str, oid: str, syncs: DirSyncs | None = None,
               trash: Trash | None = None) -> bool:
        """Remove a record durably (with ``syncs``: once it is flushed); False if none. With
        ``trash`` it is renamed into it rather than unlinked: a rename frees no blocks on the
        caller's path (see ``LayerStore.delete``)."""
        path = self._path(collection, oid)
        if trash is not None:
            return bool(trash.throw([path], syncs=syncs))
        return atomic_remove(path, syncs)

    def ids_on_disk(self, collection: str) -> set[str]:
        """Every id with a file in ``collection``: its records, good or moved aside as
        damaged (``<id>.json.corrupt``), so that what belongs to them is never taken for a
        leftover."""
        try:
            names = os.listdir(self.root / collection)
        except FileNotFoundError:
            return set()
        return {n.split(".json", 1)[0] for n in names if ".json" in n and not n.startswith(".")}

    def get(self, collection: str, oid: str) -> dict[str, Any] | None:
        try:
            return _decode(self._path(collection, oid).read_bytes())
        except FileNotFoundError:
            return None

    def load(self, collection: str) -> LoadReport:
        """Read every record of a collection, skipping (and moving aside) damaged ones."""
        report = LoadReport()
        directory = self.root / collection
        for entry in sorted(directory.glob("*.json")):
            oid = entry.name[: -len(".json")]
            try:
                report.records[oid] = _decode(entry.read_bytes())
            except (ValueError, OSError) as exc:
                reason = str(exc) or type(exc).__name__
                report.skipped.append((entry, reason))
                log.error("skipping damaged %s record %s: %s", collection, entry, reason)
                try:
                    os.replace(entry, entry.with_name(entry.name + ".corrupt"))
                except OSError as mv_exc:
                    log.error("could not move %s aside: %s", entry, mv_exc)
        return report


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("record is not a JSON object")
    return value
