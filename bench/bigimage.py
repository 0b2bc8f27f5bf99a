"""The image ``rmi`` is timed on: ~500 MB of file content in ~15,000 files (10 layers of 1,500
files: ~480 small ones of 4 KiB each in directories of 50... no: 1,490 small files of 1-8 KiB
and 10 large ones per layer), random content from a fixed seed, written as a ``docker save``
tarball (manifest layout) with the same writer ``bench_images`` uses. ``scale`` shrinks both
the bytes and the file count (``--scale 0.1``: ~50 MB, ~1,500 files).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bench.bench_images import _KnownDiffIds, _write_layer, _write_save_tarball
from tests.support import images as timg

SEED = 0x27B1E
NAME = "svc-bench/big:latest"
LAYERS = 10
FILES = 15_000
CONTENT = 500_000_000
SMALL_SIZES = (1 << 10, 8 << 10)
LARGE_PER_LAYER = 10
FILES_PER_DIR = 50


@dataclass(frozen=True)
class BigImage:
    name: str
    tarball: Path
    tarball_bytes: int
    files: int
    content_bytes: int
    image_id: str


def _layer(rng: random.Random, index: int, files: int, content: int) -> list[timg.Entry]:
    top = f"srv/big{index:02d}"
    small = files - LARGE_PER_LAYER
    sizes = [(f"{top}/d{i // FILES_PER_DIR:03d}/f{i:05d}.dat", rng.randint(*SMALL_SIZES))
             for i in range(small)]
    large = max(0, content - sum(n for _, n in sizes)) // LARGE_PER_LAYER
    sizes += [(f"{top}/blobs/blob{i:02d}.bin", large) for i in range(LARGE_PER_LAYER)]
    dirs = {"srv", top} | {p.rpartition("/")[0] for p, _ in sizes}
    entries = [timg.directory(d) for d in dirs]
    entries += [timg.file(p, rng.randbytes(n)) for p, n in sizes]
    entries.sort(key=lambda e: e.path.split("/"))
    return entries


def build(where: Path, scale: float = 1.0) -> BigImage:
    """Write the layer tars and the tarball under ``where`` (once: reused when present)."""
    where.mkdir(exist_ok=True)
    files_per_layer = max(LARGE_PER_LAYER + 10, int(FILES * scale) // LAYERS)
    content_per_layer = max(1_000_000, int(CONTENT * scale) // LAYERS)
    rng = random.Random(SEED)
    layer_files, diff_ids = [], []
    files = content = 0
    for i in range(LAYERS):
        entries = _layer(rng, i, files_per_layer, content_per_layer)
        regular = [e for e in entries if e.kind == "file"]
        files += len(regular)
        content += sum(len(e.data) for e in regular)
        layer_files.append(where / f"big{i:02d}.tar")
        diff_ids.append(_write_layer(layer_files[-1], entries))
        del entries, regular
    image = _KnownDiffIds([b""] * LAYERS, repo_tags=[NAME], known_diff_ids=diff_ids)
    tarball = where / "big-save.tar"
    _write_save_tarball(tarball, image, layer_files, NAME)
    for p in layer_files:  # the tarball holds them; half the disk space
        p.unlink()
    return BigImage(NAME, tarball, tarball.stat().st_size, files, content, image.image_id())
