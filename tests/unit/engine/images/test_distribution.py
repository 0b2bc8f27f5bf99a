"""The diffID -> (blob, repository) map, the push's deterministic gzip, search terms."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import trio

from svc.engine.images.compress import GzipSink, compress_layer, gzip_bytes
from svc.engine.images.distribution import MAX_REPOSITORIES, DistributionMap
from svc.engine.registries import SearchTerm, split_search_term
from svc.storage.layers import LayerStore
from tests.support import images as timg

D1 = "sha256:" + "1" * 64
B1, B2 = "sha256:" + "a" * 64, "sha256:" + "b" * 64


async def test_record_lookup_forget_and_reload(tmp_path: Path) -> None:
    m = DistributionMap(tmp_path)
    m.open()
    assert m.lookup(D1) == []
    await m.record(D1, B1, "127.0.0.1:5000/a", size=10)
    await m.record(D1, B1, "127.0.0.1:5000/b")
    await m.record(D1, B1, "127.0.0.1:5000/a")  # seen again: most recent first
    assert m.lookup(D1) == [(B1, "127.0.0.1:5000/a"), (B1, "127.0.0.1:5000/b")]
    again = DistributionMap(tmp_path)
    again.open()
    assert again.lookup(D1) == m.lookup(D1) and again.size(B1) == 10
    await again.forget(D1, B1, "127.0.0.1:5000/a")
    await again.forget(D1, B1, "127.0.0.1:5000/b")
    assert again.lookup(D1) == [] and again.size(B1) is None
    assert json.loads((tmp_path / "distribution.json").read_text()) == {"layers": {},
                                                                         "sizes": {}}
    for i in range(MAX_REPOSITORIES + 5):
        await again.record(D1, B2, f"r/{i}")
    assert len(again.lookup(D1)) == MAX_REPOSITORIES


def test_a_damaged_map_starts_empty(tmp_path: Path) -> None:
    (tmp_path / "distribution.json").write_text("{not json")
    m = DistributionMap(tmp_path)
    m.open()
    assert m.lookup(D1) == []
    assert (tmp_path / "distribution.json.corrupt").exists()


async def test_layer_gzip_is_deterministic(tmp_path: Path) -> None:
    tar = timg.layer_tar([timg.file("a/b", b"hello " * 100_000), timg.file("c", b"x")])
    store = LayerStore(tmp_path / "overlay2")
    store.prepare()
    info = store.register(io.BytesIO(tar), None)

    async def once() -> tuple[bytes, str, int]:
        send, recv = trio.open_memory_channel[tuple[bytes, int]](100)
        sink = GzipSink(send)
        async with send:
            await trio.to_thread.run_sync(compress_layer, store, info.chain_id, sink)
        pieces = [p async for p, _ in recv]
        return b"".join(pieces), sink.digest, sink.consumed

    first, second = await once(), await once()
    assert first == second
    blob, digest, consumed = first
    assert gzip.decompress(blob) == tar and consumed == len(tar)
    assert blob == gzip_bytes(tar)
    assert blob[4:8] == b"\0\0\0\0"  # mtime 0, and no file name (flags 0)
    assert blob[3] == 0
    assert digest == timg.sha256_digest(blob)


def test_search_terms_split_as_docker_splits_them() -> None:
    assert split_search_term("busybox") == SearchTerm("docker.io", "busybox")
    assert split_search_term("library/busybox") == SearchTerm("docker.io", "library/busybox")
    assert split_search_term("localhost:5000/busy") == SearchTerm("localhost:5000", "busy")
    assert split_search_term("localhost/a/b") == SearchTerm("localhost", "a/b")
    assert split_search_term("reg.example.com/team/x") == SearchTerm("reg.example.com",
                                                                      "team/x")
    assert split_search_term("index.docker.io/busybox") == SearchTerm("docker.io", "busybox")
