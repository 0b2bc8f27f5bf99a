"""Hand-made images for the registry tests: random layer blobs, a config, manifests."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from svc.registry import manifests, uploads
from svc.registry.client import RegistryClient


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Image:
    """Layers (random bytes: the registry never looks inside), a config, a manifest."""

    layers: list[bytes]
    arch: str = "amd64"
    os: str = "linux"
    oci: bool = False
    config: bytes = field(init=False)
    manifest: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.config = json.dumps({
            "architecture": self.arch, "os": self.os,
            "rootfs": {"type": "layers", "diff_ids": [digest(x) for x in self.layers]},
            "config": {"Cmd": ["sh"]},
        }).encode()
        config_type = ("application/vnd.oci.image.config.v1+json" if self.oci
                       else "application/vnd.docker.container.image.v1+json")
        layer_type = ("application/vnd.oci.image.layer.v1.tar+gzip" if self.oci
                      else "application/vnd.docker.image.rootfs.diff.tar.gzip")
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": self.media_type,
            "config": {"mediaType": config_type, "size": len(self.config),
                       "digest": digest(self.config)},
            "layers": [{"mediaType": layer_type, "size": len(x), "digest": digest(x)}
                       for x in self.layers],
        }, indent=3).encode()

    @property
    def media_type(self) -> str:
        return manifests.OCI_MANIFEST if self.oci else manifests.SCHEMA2

    @property
    def digest(self) -> str:
        return digest(self.manifest)

    def descriptor(self, **platform: str) -> dict[str, object]:
        return {"mediaType": self.media_type, "size": len(self.manifest),
                "digest": self.digest, "platform": platform}


def random_image(*sizes: int, **kw: object) -> Image:
    return Image([os.urandom(n) for n in sizes], **kw)  # type: ignore[arg-type]


async def push_image(client: RegistryClient, name: str, image: Image, tag: str | None) -> str:
    """Push every blob, then the manifest (by tag, or by digest when ``tag`` is None)."""
    for blob in [image.config, *image.layers]:
        await uploads.push(client, name, digest(blob), len(blob), blob)
    return await manifests.put(client, name, tag or image.digest, image.manifest,
                               image.media_type)


def index_document(entries: list[dict[str, object]], *, oci: bool) -> bytes:
    media = manifests.OCI_INDEX if oci else manifests.MANIFEST_LIST
    return json.dumps({"schemaVersion": 2, "mediaType": media, "manifests": entries}).encode()
