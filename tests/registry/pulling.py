"""Helpers of the pull tests: a pull over the API, the blobs of a pushed image, a layer's
statuses, hand-made images with real (gzip'd tar) layers."""

from __future__ import annotations

import gzip
import json
import os
from typing import Any

import httpx

from svc.registry import manifests
from svc.registry.client import RegistryClient
from tests.registry.content import Image
from tests.support import images as timg


async def pull(client: httpx.AsyncClient, image: str, tag: str | None = "latest",
               auth: str | None = "e30=", timeout: float = 120) -> httpx.Response:
    params = {"fromImage": image}
    if tag is not None:
        params["tag"] = tag
    headers = {"X-Registry-Auth": auth} if auth is not None else {}
    return await client.post("/v1.23/images/create", params=params, headers=headers,
                             timeout=timeout)


async def blob_digests(domain: str, path: str, tag: str = "latest") -> list[str]:
    """The layer blob digests of an image in a registry, base first."""
    async with RegistryClient(domain) as reg:
        _, image = await manifests.resolve(reg, path, tag)
    return [layer["digest"] for layer in json.loads(image.raw)["layers"]]


def short(digest: str) -> str:
    return digest.partition(":")[2][:12]


def layer_statuses(msgs: list[dict[str, Any]], ident: str) -> list[str]:
    """The distinct statuses of one layer's line, in order (repeats folded)."""
    out: list[str] = []
    for m in msgs:
        if m.get("id") == ident and m.get("status") and (not out or out[-1] != m["status"]):
            out.append(m["status"])
    return out


def assert_pulled(seen: list[str]) -> None:
    """A layer's statuses as dockerd reports a download (Waiting and Downloading may be
    absent for a small blob)."""
    assert seen[0] == "Pulling fs layer" and seen[-1] == "Pull complete", seen
    core = [s for s in seen if s not in ("Waiting", "Downloading")]
    assert core == ["Pulling fs layer", "Verifying Checksum", "Download complete",
                    "Extracting", "Pull complete"], seen


def gz_layers(*sizes: int) -> list[bytes]:
    """gzip'd layer tars of one random file each (what registries serve)."""
    return [gzip.compress(timg.layer_tar([timg.file(f"f{i}.bin", os.urandom(n))]),
                          compresslevel=1, mtime=0) for i, n in enumerate(sizes)]


def tar_image(layers: list[bytes], **kw: Any) -> Image:
    """A hand-made image whose config names the real diffIDs of gzip'd ``layers``."""
    image = Image(layers, **kw)
    config = json.loads(image.config)
    config["rootfs"]["diff_ids"] = [timg.diff_id(gzip.decompress(x)) for x in layers]
    image.config = json.dumps(config).encode()
    doc = json.loads(image.manifest)
    doc["config"]["size"] = len(image.config)
    doc["config"]["digest"] = timg.sha256_digest(image.config)
    image.manifest = json.dumps(doc, indent=3).encode()
    return image
