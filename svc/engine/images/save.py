"""GET /images/{name}/get and /images/get?names=: ``docker save`` tarballs, streamed.

The layout is the spec's (one directory per layer with VERSION, json and layer.tar, plus
``repositories``) and also carries what engines since 1.10 write and load (``<config>.json``
and ``manifest.json``). Each layer.tar is the exact bytes the layer was loaded from, so its
digest is the diff id in the config and a load verifies. Nothing is held in memory: the tar is
written in a worker thread straight into the response's channel.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import trio

from svc.engine.images.config import LEGACY_KEYS
from svc.engine.images.service import Image, ImageService
from svc.errors import InvalidParameter
from svc.models.imageconfig import HistoryItem
from svc.storage.layers import LayerStore

BLOCK = 512


@dataclass
class SaveItem:
    image: Image
    config: bytes
    tags: list[str] = field(default_factory=list)  # familiar "repo:tag" names to record


async def plan_save(svc: ImageService, names: list[str]) -> list[SaveItem]:
    """Resolve every name first (an unknown one is a 404 before any byte is sent)."""
    if not names:
        raise InvalidParameter("no image names given: use names=<image>")
    items: dict[str, SaveItem] = {}
    for name in names:
        image = svc.resolve(name)
        item = items.get(image.id) or SaveItem(
            image, await trio.to_thread.run_sync(svc.config_bytes, image.id))
        items[image.id] = item
        if not image.id.removeprefix("sha256:").startswith(name.removeprefix("sha256:")):
            ref, _ = svc.lookup_ref(name)
            key = ref.familiar_string()
            if "@" not in key and key not in item.tags:
                item.tags.append(key)
    return list(items.values())


def v1_ids(image: Image) -> list[str]:
    """Stable legacy layer ids: one per layer, the top one bound to the image."""
    out: list[str] = []
    for i, chain_id in enumerate(image.chain):
        seed = f"{chain_id} {out[-1] if out else ''}"
        if i == len(image.chain) - 1:
            seed += f" {image.id}"
        out.append(hashlib.sha256(seed.encode()).hexdigest())
    return out


def v1_json(image: Image, index: int, ids: list[str]) -> bytes:
    doc: dict[str, Any] = {"id": ids[index]}
    if index:
        doc["parent"] = ids[index - 1]
    history = [h for h in image.config.entries if not h.empty_layer]
    h = history[index] if index < len(history) else HistoryItem()
    if index == len(ids) - 1:
        config = image.config.doc()
        doc.update((k, config[k]) for k in LEGACY_KEYS if k in config)
    else:
        doc["created"] = h.created or image.config.created
        if h.created_by:
            doc["container_config"] = {"Cmd": [h.created_by]}
    return json.dumps(doc, separators=(",", ":")).encode()


class TarWriter:
    """A minimal streaming tar writer (ustar/pax headers from ``tarfile``)."""

    def __init__(self, out: BinaryIO, *, mtime: int | None = None,
                 count_only: bool = False) -> None:
        self.out = out
        self.mtime = int(time.time()) if mtime is None else mtime
        self.count_only = count_only  # streams are counted, not written (for Content-Length)

    def _header(self, name: str, size: int, kind: bytes, mode: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.type, info.mode, info.mtime = size, kind, mode, self.mtime
        self.out.write(info.tobuf(format=tarfile.PAX_FORMAT))

    def _pad(self, size: int) -> None:
        if size % BLOCK:
            self.out.write(b"\0" * (BLOCK - size % BLOCK))

    def add_dir(self, name: str) -> None:
        self._header(name.rstrip("/") + "/", 0, tarfile.DIRTYPE, 0o755)

    def add_bytes(self, name: str, data: bytes) -> None:
        self._header(name, len(data), tarfile.REGTYPE, 0o644)
        self.out.write(data)
        self._pad(len(data))

    def add_stream(self, name: str, size: int, write: Callable[[BinaryIO], None]) -> None:
        self._header(name, size, tarfile.REGTYPE, 0o644)
        if self.count_only:
            self.out.seek(size, 1)
        else:
            write(self.out)
        self._pad(size)

    def close(self) -> None:
        self.out.write(b"\0" * (BLOCK * 2))
        self.out.flush()


class _Counter(io.RawIOBase):
    """Counts what would be written; ``seek(n, 1)`` adds n bytes that are not materialized."""

    def __init__(self) -> None:
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.total += len(b)
        return len(b)

    def seek(self, offset: int, whence: int = 0) -> int:
        self.total += offset
        return self.total


def save_size(items: list[SaveItem], layers: LayerStore, mtime: int) -> int:
    """The exact byte length ``write_save`` will produce (for Content-Length)."""
    counter = _Counter()
    write_save(items, layers, counter, mtime=mtime, count_only=True)  # type: ignore[arg-type]
    return counter.total


def write_save(items: list[SaveItem], layers: LayerStore, out: BinaryIO, *,
               mtime: int | None = None, count_only: bool = False) -> None:
    """Write the tarball (blocking; in a worker thread)."""
    tar = TarWriter(out, mtime=mtime, count_only=count_only)
    written: set[str] = set()
    manifest = []
    repositories: dict[str, dict[str, str]] = {}
    for item in items:
        image = item.image
        ids = v1_ids(image)
        for i, (v1, chain_id) in enumerate(zip(ids, image.chain, strict=True)):
            if v1 in written:
                continue
            written.add(v1)
            tar.add_dir(v1)
            tar.add_bytes(f"{v1}/VERSION", b"1.0")
            tar.add_bytes(f"{v1}/json", v1_json(image, i, ids))
            size = layers.tar_size(chain_id)
            tar.add_stream(f"{v1}/layer.tar", size,
                           lambda o, c=chain_id: layers.write_tar(c, o))  # type: ignore[misc]
        config_name = image.id.removeprefix("sha256:") + ".json"
        if config_name not in written:
            written.add(config_name)
            tar.add_bytes(config_name, item.config)
        manifest.append({"Config": config_name, "RepoTags": item.tags or None,
                         "Layers": [f"{v}/layer.tar" for v in ids]})
        for tag in item.tags:
            repo, _, t = tag.rpartition(":")
            repositories.setdefault(repo, {})[t] = ids[-1]
    tar.add_bytes("manifest.json", json.dumps(manifest, separators=(",", ":")).encode())
    if repositories:
        tar.add_bytes("repositories", json.dumps(repositories, separators=(",", ":")).encode())
    tar.close()
