"""``docker pull`` of a ~200 MB, 10-layer image from a loopback registry, beside HTTP + tar -xz.

The image is the ``images`` benchmark's (``bench_images.build_image``: 10 layers of ~20 MB of
random file content), loaded into svcd once and pushed by svcd to a fresh registry (Debian's
``docker-registry``, open, on 127.0.0.1: ``tests.registry.registryd``), so the registry holds
gzip'd blobs as engines make them. Before each pull the image is removed from svcd (by id,
forced), which deletes its layers: every blob is downloaded, verified and unpacked again.

What is measured (best of ``REPS``):
* **pull**: ``POST /v1.23/images/create?fromImage=<registry>/bench/pull&tag=latest``, the
  whole progress stream read; the clock stops at its last byte, which must be the ``Status:
  Downloaded newer image`` line. Rate = bytes of the layer tars / that time.
* **floor**: for each blob, one plain HTTP ``GET`` of it from the registry piped into
  ``tar -xzf - -C <fresh dir>``, three pipelines at a time (svcd downloads three blobs at
  once, as dockerd). Rate = bytes of the layer tars / total time. No digest check, no
  store (svcd's pull does more).
* Both sides start after ``sync`` and with the blobs in the page cache (read once first).

Target: pull >= 80 % of the floor's rate.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.bench_images import BuiltImage, loaded_image, progress_post, read_body
from bench.context import Context
from bench.harness import Figure, Outcome, Target, body_of, call, connect
from tests.registry.registryd import Registry

SEED = 0x9F5A12
REPS = 3
OP_TIMEOUT = 300.0
TARGET_RATIO = 0.80
MB = 1_000_000
CHUNK = 1 << 20
REPO = "bench/pull"
FLOOR_PARALLEL = 3  # as svc.engine.images.downloads.CONCURRENCY


def svcd_pull(ctx: Context, image: str) -> tuple[float, float, list[dict[str, Any]]]:
    """One pull; returns (seconds, svcd CPU %, the progress messages)."""
    status, msgs, body, seconds, cpu_pct = progress_post(
        ctx, f"/v1.23/images/create?fromImage={image}&tag=latest", OP_TIMEOUT)
    if status != 200 or not msgs or not str(msgs[-1].get("status", "")).startswith(
            "Status: Downloaded newer image"):
        raise RuntimeError(f"pull of {image} answered {status}: {body[-600:]!r}")
    return seconds, cpu_pct, msgs


def blob_digests(registry: Registry) -> list[str]:
    conn = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=OP_TIMEOUT)
    try:
        conn.request("GET", f"/v2/{REPO}/manifests/latest", headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        r = conn.getresponse()
        doc = json.loads(r.read())
    finally:
        conn.close()
    return [layer["digest"] for layer in doc["layers"]]


def floor_pull(registry: Registry, digests: list[str], where: Path) -> float:
    """GET each blob and pipe it into ``tar -xz``, ``FLOOR_PARALLEL`` at a time (as many
    as svcd downloads at once); returns seconds."""
    os.sync()
    targets = [where / f"layer{i:02d}" for i in range(len(digests))]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(FLOOR_PARALLEL) as pool:
        for done in [pool.submit(_floor_one, registry, d, t)
                     for d, t in zip(digests, targets, strict=True)]:
            done.result()
    return time.perf_counter() - t0


def _floor_one(registry: Registry, digest: str, target: Path) -> None:
    target.mkdir()
    conn = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=OP_TIMEOUT)
    tar = subprocess.Popen(["tar", "-xzf", "-", "-C", str(target)], stdin=subprocess.PIPE)
    assert tar.stdin is not None
    try:
        conn.request("GET", f"/v2/{REPO}/blobs/{digest}")
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"floor GET of {digest} answered {r.status}")
        while chunk := r.read(CHUNK):
            tar.stdin.write(chunk)
    finally:
        tar.stdin.close()
        conn.close()
        if tar.wait() != 0:
            raise RuntimeError(f"tar -xz of {digest} exited with {tar.returncode}")


def _warm(registry: Registry, digests: list[str]) -> None:
    for d in digests:
        with open(registry.blob_path(d), "rb") as f:
            while f.read(CHUNK):
                pass


def _prepare(ctx: Context, img: BuiltImage, registry: Registry) -> str:
    """Tag the loaded image into the registry's repository and push it there; its id."""
    repo = f"{registry.domain}/{REPO}"
    status, raw = call(ctx.daemon.socket, "POST",
                       f"/v1.23/images/{img.name}/tag?repo={repo}&tag=latest")
    if status != 201:
        raise RuntimeError(f"tag {repo} answered {status}: {body_of(raw)[:300]!r}")
    req = (f"POST /v1.23/images/{repo}/push?tag=latest HTTP/1.1\r\nHost: docker\r\n"
           "X-Registry-Auth: e30=\r\nContent-Length: 0\r\n\r\n")
    with connect(ctx.daemon.socket, OP_TIMEOUT) as sock:
        sock.sendall(req.encode())
        status, _, body = read_body(sock, keep=1 << 20)
    if status != 200 or b'"aux"' not in body:
        raise RuntimeError(f"push answered {status}: {body[-300:]!r}")
    return repo


def _remove(ctx: Context, image_id: str) -> None:
    status, raw = call(ctx.daemon.socket, "DELETE", f"/v1.23/images/{image_id}?force=1")
    if status != 200:
        raise RuntimeError(f"remove {image_id} answered {status}: {body_of(raw)[:300]!r}")


def pull(ctx: Context) -> Outcome:
    """docker pull of a ~200 MB 10-layer image from a loopback registry: MB/s beside GET|tar."""
    t_start = time.monotonic()
    img, scratch = loaded_image(ctx, "pull", SEED)
    registry = Registry(schema1=False).start()
    pulls: list[tuple[float, float]] = []
    floors: list[float] = []
    try:
        repo = _prepare(ctx, img, registry)
        digests = blob_digests(registry)
        _warm(registry, digests)
        for rep in range(REPS):
            _remove(ctx, img.image_id)
            if rep % 2:
                floors.append(_floor(registry, digests, scratch))
            seconds, cpu, _ = svcd_pull(ctx, repo)
            pulls.append((seconds, cpu))
            if not rep % 2:
                floors.append(_floor(registry, digests, scratch))
        compressed = sum(registry.blob_path(d).stat().st_size for d in digests)
    finally:
        registry.stop()
    return _outcome(img, compressed, pulls, floors, time.monotonic() - t_start)


def _floor(registry: Registry, digests: list[str], scratch: Path) -> float:
    where = Path(tempfile.mkdtemp(prefix="floor-", dir=scratch))
    try:
        return floor_pull(registry, digests, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _outcome(img: BuiltImage, compressed: int, pulls: list[tuple[float, float]],
             floors: list[float], elapsed: float) -> Outcome:
    rates = [img.layer_bytes / MB / s for s, _ in pulls]
    floor_rates = [img.layer_bytes / MB / s for s in floors]
    best = max(range(len(rates)), key=lambda i: rates[i])
    floor = max(floor_rates)
    out = Outcome(details={
        "layer_bytes": img.layer_bytes, "blob_bytes": compressed,
        "layers": len(img.layer_files),
        "pull_s": [round(s, 2) for s, _ in pulls], "pull_MB_s": [round(r, 1) for r in rates],
        "svcd_cpu_pct": [round(c) for _, c in pulls],
        "floor_s": [round(s, 2) for s in floors],
        "floor_MB_s": [round(r, 1) for r in floor_rates],
        "elapsed_s": round(elapsed, 1)})
    out.figures.append(
        Figure("pull", "pull (POST /images/create?fromImage=)", rates[best], "MB/s",
               Target(">=", TARGET_RATIO * floor), floor=floor,
               note=f"best of {len(rates)}; {pulls[best][0]:.1f} s wall; "
                    f"{100 * rates[best] / floor:.0f} % of HTTP GET | tar -xz per blob, "
                    f"{FLOOR_PARALLEL} at a time (floor); svcd CPU {pulls[best][1]:.0f} %"))
    return out
