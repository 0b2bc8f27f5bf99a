"""The images a build makes: their config documents, and the cache that finds them again.

Each step's image records two configurations, as engines of this API generation did:
``config`` (what a container of the image runs: the real CMD) and ``container_config``
(what made the step: for a metadata step ``Cmd = ["/bin/sh", "-c", "#(nop) <instruction>"]``,
for RUN the command, prefixed ``|N K=V...`` with the build args it saw, for COPY/ADD
``#(nop) COPY file:<content hash> in <dest>``). A later build hits the cache for a step when
an image whose parent is the current image has an equal ``container_config``: images
without a parent (pulled, imported, loaded) never count. Records survive a restart, and so
does the cache.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from svc.engine.images.config import encode_config, normalize_container_config
from svc.engine.images.service import Image, ImageService
from svc.version import SVC_VERSION
from svc.wire.timefmt import rfc3339_nano

SHELL = ["/bin/sh", "-c"]
SCRATCH_CREATED = "1970-01-01T00:00:00Z"


def nop(text: str) -> list[str]:
    return [*SHELL, f"#(nop) {text}"]


def base_config(image: Image | None) -> dict[str, Any]:
    """The run configuration a FROM starts from (a copy: steps change it)."""
    cfg = normalize_container_config(image.container_config if image else None)
    return copy.deepcopy(cfg)


def comparable(cfg: dict[str, Any]) -> str:
    """A canonical form of a container configuration for cache equality: empty values are
    one value (``null``, ``[]``, ``{}`` and ``""`` compare equal, as engines' compare did)."""
    norm = {k: v for k, v in normalize_container_config(cfg).items()
            if v not in (None, "", [], {}, False)}
    return json.dumps(norm, sort_keys=True)


def find_cached(images: ImageService, parent: Image, probe: dict[str, Any]) -> Image | None:
    """The newest image made from ``parent`` by a step whose configuration equals
    ``probe``; None on a miss."""
    want = comparable(probe)
    hits = [img for img in images.children(parent.id)
            if isinstance(img.config.get("container_config"), dict)
            and comparable(img.config["container_config"]) == want]
    return max(hits, key=lambda i: i.loaded_ns) if hits else None


def scratch_config() -> bytes:
    """The config of the empty base every ``FROM scratch`` build starts from (fixed bytes:
    one image, whatever the build, so that scratch builds share their cache)."""
    doc = {"architecture": "amd64", "config": normalize_container_config(None),
           "container_config": normalize_container_config(None), "created": SCRATCH_CREATED,
           "docker_version": f"svc-{SVC_VERSION}", "history": [], "os": "linux",
           "rootfs": {"type": "layers", "diff_ids": []}}
    return encode_config(doc)


def step_config(parent: Image, config: dict[str, Any], container_config: dict[str, Any], *,
                author: str, created_ns: int, diff_id: str | None,
                container_id: str = "") -> bytes:
    """The config of a step's image: ``parent``'s history and layers, plus ``diff_id`` if
    the step made a layer (else the history entry says ``empty_layer``)."""
    created = rfc3339_nano(created_ns)
    cmd = container_config.get("Cmd") or []
    entry: dict[str, Any] = {"created": created, "created_by": " ".join(cmd)}
    if author:
        entry["author"] = author
    if diff_id is None:
        entry["empty_layer"] = True
    history = [*(parent.config.get("history") or []), entry]
    diff_ids = list((parent.config.get("rootfs") or {}).get("diff_ids") or [])
    if diff_id is not None:
        diff_ids.append(diff_id)
    doc = {"architecture": parent.config.get("architecture") or "amd64", "author": author,
           "config": normalize_container_config(config), "container": container_id,
           "container_config": normalize_container_config(container_config),
           "created": created, "docker_version": f"svc-{SVC_VERSION}", "history": history,
           "os": parent.config.get("os") or "linux",
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    return encode_config(doc)


def config_id(config_bytes: bytes) -> str:
    return "sha256:" + hashlib.sha256(config_bytes).hexdigest()
