"""``docker push`` of a ~200 MB, 10-layer image to a loopback registry, beside gzip + upload.

The image is the ``images`` benchmark's (``bench_images.build_image``: 10 layers of ~20 MB of
random file content, so compression gains nothing and costs its full price), loaded into svcd
once and tagged into one repository of a fresh registry per repetition (Debian's
``docker-registry``, open, on 127.0.0.1: ``tests.registry.registryd``). A fresh registry holds
none of the blobs, so every layer is compressed and uploaded again (svcd's map only knows the
earlier registries: a few ``HEAD`` answers of 404).

What is measured (best of ``REPS``):
* **push**: ``POST /v1.23/images/<registry>/bench/push/push?tag=latest``, the whole progress
  stream read; the clock stops at its last byte. The stream must end with the ``aux`` message.
  Rate = bytes of the layer tars / that time.
* **floor**: for each layer tar in turn, ``gzip -6 -c`` (gzip's default, the level svcd uses)
  piped into one plain HTTP upload to the same registry (another repository): ``POST`` an
  upload, ``PATCH`` gzip's stdout as a chunked body (hashed on the way), ``PUT ?digest=``.
  Rate = bytes of the layer tars / total time. No manifest (svcd's push does more).
* Both sides start after ``sync`` (no dirty pages of the load or of the other side's upload
  left to write back: the registry's writes are throttled by them, and svcd with them).
* **re-push**: the same push again, to the same repository: every layer must say ``Layer
  already exists`` and the digest must be the same; wall time.

Targets: push >= 80 % of the floor's rate; re-push < 1 s.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.bench_images import BuiltImage, loaded_image, progress_post
from bench.context import Context
from bench.harness import Figure, Outcome, Target, body_of, call
from tests.registry.registryd import Registry

SEED = 0x9F5A11
REPS = 2
OP_TIMEOUT = 300.0
TARGET_RATIO = 0.80
TARGET_REPUSH_S = 1.0
MB = 1_000_000
PIPE_READ = 1 << 20


def svcd_push(ctx: Context, repo: str) -> tuple[float, float, list[dict[str, Any]]]:
    """One push; returns (seconds, svcd CPU %, the progress messages)."""
    status, msgs, body, seconds, cpu_pct = progress_post(
        ctx, f"/v1.23/images/{repo}/push?tag=latest", OP_TIMEOUT)
    if status != 200 or not msgs or "aux" not in msgs[-1]:
        raise RuntimeError(f"push of {repo} answered {status}: {body[-600:]!r}")
    return seconds, cpu_pct, msgs


def _gzip_chunks(layer: Path, digest: Any) -> Iterator[bytes]:
    proc = subprocess.Popen(["gzip", "-6", "-c", "-n", str(layer)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    with proc.stdout as out:
        while chunk := out.read1(PIPE_READ):  # type: ignore[attr-defined]
            digest.update(chunk)
            yield chunk
    if proc.wait() != 0:
        raise RuntimeError(f"gzip {layer} exited with {proc.returncode}")


def floor_push(registry: Registry, img: BuiltImage, repo: str) -> float:
    """gzip each layer tar into one plain HTTP upload, in turn; returns seconds."""
    os.sync()
    t0 = time.perf_counter()
    for layer in img.layer_files:
        conn = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=OP_TIMEOUT)
        try:
            conn.request("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
            r = conn.getresponse()
            r.read()
            location = r.getheader("Location") or ""
            digest = hashlib.sha256()
            conn.request("PATCH", location, body=_gzip_chunks(layer, digest),
                         encode_chunked=True,
                         headers={"Content-Type": "application/octet-stream"})
            r = conn.getresponse()
            r.read()
            location = r.getheader("Location") or location
            sep = "&" if "?" in location else "?"
            conn.request("PUT", f"{location}{sep}digest=sha256:{digest.hexdigest()}",
                         headers={"Content-Length": "0"})
            r = conn.getresponse()
            r.read()
            if r.status != 201:
                raise RuntimeError(f"floor upload of {layer.name} answered {r.status}")
        finally:
            conn.close()
    return time.perf_counter() - t0


def _tag(ctx: Context, img: BuiltImage, repo: str) -> None:
    status, raw = call(ctx.daemon.socket, "POST",
                       f"/v1.23/images/{img.name}/tag?repo={repo}&tag=latest")
    if status != 201:
        raise RuntimeError(f"tag {repo} answered {status}: {body_of(raw)[:300]!r}")


def push(ctx: Context) -> Outcome:
    """docker push of a ~200 MB 10-layer image to a loopback registry: MB/s beside gzip+upload."""
    t_start = time.monotonic()
    img, _ = loaded_image(ctx, "push", SEED)
    pushes: list[tuple[float, float]] = []
    floors: list[float] = []
    repushes: list[float] = []
    digests: set[str] = set()
    for rep in range(REPS):
        registry = Registry(schema1=False).start()
        try:
            repo = f"{registry.domain}/bench/push"
            _tag(ctx, img, repo)
            if rep % 2:
                floors.append(floor_push(registry, img, "bench/floor"))
            seconds, cpu, msgs = svcd_push(ctx, repo)
            pushes.append((seconds, cpu))
            digests.add(str(msgs[-1]["aux"]["Digest"]))
            if not rep % 2:
                floors.append(floor_push(registry, img, "bench/floor"))
            again, _, msgs = svcd_push(ctx, repo)
            repeated = [m for m in msgs if m.get("status") == "Layer already exists"]
            if len(repeated) != len(img.layer_files) or \
                    msgs[-1]["aux"]["Digest"] not in digests:
                raise RuntimeError(f"the re-push pushed again: {msgs[-12:]}")
            repushes.append(again)
        finally:
            registry.stop()
    return _outcome(img, pushes, floors, repushes, digests, time.monotonic() - t_start)


def _outcome(img: BuiltImage, pushes: list[tuple[float, float]], floors: list[float],
             repushes: list[float], digests: set[str], elapsed: float) -> Outcome:
    rates = [img.layer_bytes / MB / s for s, _ in pushes]
    floor_rates = [img.layer_bytes / MB / s for s in floors]
    best = max(range(len(rates)), key=lambda i: rates[i])
    floor = max(floor_rates)
    out = Outcome(details={
        "layer_bytes": img.layer_bytes, "layers": len(img.layer_files),
        "push_s": [round(s, 2) for s, _ in pushes], "push_MB_s": [round(r, 1) for r in rates],
        "svcd_cpu_pct": [round(c) for _, c in pushes],
        "floor_s": [round(s, 2) for s in floors],
        "floor_MB_s": [round(r, 1) for r in floor_rates],
        "repush_s": [round(s, 3) for s in repushes], "same_digest_every_time": len(digests) == 1,
        "elapsed_s": round(elapsed, 1)})
    out.figures += [
        Figure("push", "push (POST /images/{name}/push)", rates[best], "MB/s",
               Target(">=", TARGET_RATIO * floor), floor=floor,
               note=f"best of {len(rates)}; {pushes[best][0]:.1f} s wall; "
                    f"{100 * rates[best] / floor:.0f} % of gzip -6 + one HTTP upload per layer "
                    f"(floor); svcd CPU {pushes[best][1]:.0f} %"),
        Figure("push", "re-push of the same image", max(repushes), "s",
               Target("<", TARGET_REPUSH_S),
               note=f"worst of {len(repushes)}; every layer 'Layer already exists', "
                    f"same digest: {len(digests) == 1}"),
    ]
    if len(digests) != 1:
        out.warnings.append(f"pushes of one image gave {len(digests)} manifest digests")
    return out
