"""The layer store at start: what a crash left is removed, the committed layers loaded.

A layer is committed exactly when its ``layer.json`` is whole and consistent (its chain id is
its directory's name and follows from its parent and diff id); ``tmp-*`` directories, layer
directories without such a record and layers whose parent is gone are removed; short links to
no committed layer go and missing ones are made again.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from svc.storage.layerinfo import (
    HEX,
    LINK_DIR,
    LINK_NAME,
    TEMP_PREFIX,
    LayerInfo,
    chain_id_of,
    hex_of,
    remove_tree_quietly,
)

log = logging.getLogger("svc.storage.layers")


def scan(root: Path, discard: Callable[[Path], None] = remove_tree_quietly
         ) -> tuple[dict[str, LayerInfo], list[str]]:
    """The committed layers under ``root`` by chain id, and the paths discarded: ``tmp-*``
    directories, layer directories without a valid ``layer.json`` (or whose parent is gone),
    and short links to no committed layer. ``discard`` takes those directories away (the
    layer store's throws them into the trash)."""
    (root / LINK_DIR).mkdir(parents=True, exist_ok=True, mode=0o700)
    discarded: list[str] = []
    found: dict[str, LayerInfo] = {}
    for entry in sorted(root.iterdir()):
        if entry.name == LINK_DIR:
            continue
        info = _load(entry) if HEX.fullmatch(entry.name) else None
        if info is not None:
            found[info.chain_id] = info
        elif entry.name.startswith(TEMP_PREFIX) or HEX.fullmatch(entry.name):
            discard(entry)
            discarded.append(str(entry))
        else:
            log.warning("leaving unknown entry %s alone", entry)
    for orphan in _orphans(found):
        del found[orphan]
        discard(root / hex_of(orphan))
        discarded.append(str(root / hex_of(orphan)))
    discarded += _sweep_links(root, found)
    return found, discarded


def _load(layer_dir: Path) -> LayerInfo | None:
    try:
        doc = json.loads((layer_dir / "layer.json").read_bytes())
        info = LayerInfo(str(doc["chain_id"]), str(doc["diff_id"]),
                         None if doc["parent"] is None else str(doc["parent"]),
                         int(doc["size"]), str(doc["link"]), int(doc["tar_size"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("layer %s is not committed: %s", layer_dir.name, exc)
        return None
    if info.chain_id != "sha256:" + layer_dir.name \
            or chain_id_of(info.parent, info.diff_id) != info.chain_id \
            or not LINK_NAME.fullmatch(info.link):
        log.warning("layer %s has an inconsistent layer.json", layer_dir.name)
        return None
    return info

def _sweep_links(root: Path, layers: dict[str, LayerInfo]) -> list[str]:
    """Remove short links to no committed layer; recreate missing ones."""
    links = root / LINK_DIR
    wanted = {info.link: f"../{hex_of(info.chain_id)}/diff" for info in layers.values()}
    removed = []
    for entry in links.iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            target = None
        if wanted.get(entry.name) != target:
            if entry.is_dir() and not entry.is_symlink():
                remove_tree_quietly(entry)
            else:
                entry.unlink()
            removed.append(str(entry))
    for name, target in wanted.items():
        if not (links / name).is_symlink():
            os.symlink(target, links / name)
    return removed


def _orphans(layers: dict[str, LayerInfo]) -> list[str]:
    """Chain ids whose parent chain is broken (their parent is not among ``layers``)."""
    alive = dict(layers)
    while True:
        broken = [c for c, i in alive.items() if i.parent is not None and i.parent not in alive]
        if not broken:
            return [c for c in layers if c not in alive]
        for c in broken:
            del alive[c]
