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

import hashlib

from svc.engine.images.service import Image, ImageService
from svc.models.imageconfig import HistoryItem, ImageConfig, RootFSConfig, RunConfig
from svc.version import SVC_VERSION
from svc.wire.timefmt import rfc3339_nano

SHELL = ["/bin/sh", "-c"]
SCRATCH_CREATED = "1970-01-01T00:00:00Z"


def nop(text: str) -> list[str]:
    return [*SHELL, f"#(nop) {text}"]


def base_config(image: Image | None) -> RunConfig:
    """The run configuration a FROM starts from (a copy: steps change it)."""
    return image.config.run.model_copy(deep=True) if image else RunConfig()


def probe(config: RunConfig, cmd: list[str], image_id: str) -> RunConfig:
    """What records a step: the run configuration with the step's ``Cmd`` and its parent."""
    return config.model_copy(update={"Cmd": cmd, "Image": image_id}, deep=True)


def find_cached(images: ImageService, parent: Image, probe: RunConfig) -> Image | None:
    """The newest image made from ``parent`` by a step whose configuration equals
    ``probe``; None on a miss."""
    want = probe.comparable()
    hits = [img for img in images.children(parent.id)
            if img.config.container_config is not None
            and img.config.container_config.comparable() == want]
    return max(hits, key=lambda i: i.loaded_ns) if hits else None


def scratch_config() -> bytes:
    """The config of the empty base every ``FROM scratch`` build starts from (fixed bytes:
    one image, whatever the build, so that scratch builds share their cache)."""
    return ImageConfig(architecture="amd64", config=RunConfig(), container_config=RunConfig(),
                       created=SCRATCH_CREATED, docker_version=f"svc-{SVC_VERSION}",
                       history=[], os="linux",
                       rootfs=RootFSConfig(type="layers", diff_ids=[])).encode()


def step_config(parent: Image, config: RunConfig, container_config: RunConfig, *,
                author: str, created_ns: int, diff_id: str | None,
                container_id: str = "") -> bytes:
    """The config of a step's image: ``parent``'s history and layers, plus ``diff_id`` if
    the step made a layer (else the history entry says ``empty_layer``)."""
    created = rfc3339_nano(created_ns)
    entry = HistoryItem(created=created, author=author,
                        created_by=" ".join(container_config.Cmd or []),
                        empty_layer=diff_id is None)
    base = parent.config
    diff_ids = base.diff_ids if diff_id is None else [*base.diff_ids, diff_id]
    return ImageConfig(
        architecture=base.architecture or "amd64", author=author, config=config,
        container=container_id, container_config=container_config, created=created,
        docker_version=f"svc-{SVC_VERSION}", history=[*base.entries, entry],
        os=base.os or "linux", rootfs=RootFSConfig(type="layers", diff_ids=diff_ids)).encode()


def config_id(config_bytes: bytes) -> str:
    return "sha256:" + hashlib.sha256(config_bytes).hexdigest()
