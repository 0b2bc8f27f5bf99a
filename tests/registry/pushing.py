"""Helpers of the push tests: images with random layers loaded into a daemon, progress
streams read back, what a registry holds."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from tests.support import images as timg


def random_layers(*sizes: int) -> list[bytes]:
    """Layer tars holding one file of random bytes each (incompressible, like real data)."""
    return [timg.layer_tar([timg.file(f"data{i}.bin", os.urandom(n))])
            for i, n in enumerate(sizes)]


async def load_image(client: httpx.AsyncClient, layers: list[bytes], *tags: str) -> str:
    """``docker load`` an image of ``layers`` tagged ``tags``; returns its id."""
    image = timg.SaveImage(layers, repo_tags=list(tags))
    r = await client.post("/v1.23/images/load", content=timg.docker_save_tar([image]),
                          headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 200 and "error" not in r.text, r.text
    return image.image_id()


def messages(body: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def statuses(msgs: list[dict[str, Any]], ident: str) -> list[str]:
    """The statuses of one layer's line, repeats of ``Pushing`` folded."""
    out: list[str] = []
    for m in msgs:
        if m.get("id") == ident and m.get("status") and (not out or out[-1] != m["status"]):
            out.append(m["status"])
    return out


def short(diff_id: str) -> str:
    return diff_id.removeprefix("sha256:")[:12]
