"""Blobs: verified downloads, Range resume, uploads (monolithic, chunked, mounted),
tampered content, and cancellation of a large download."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from svc.registry import blobs, manifests, uploads
from svc.registry.client import RegistryClient
from svc.registry.errors import DigestMismatch, NotFound, RegistryError, Unreachable
from svc.registry.transport import RegistryConfig
from tests.registry.conftest import unique
from tests.registry.content import digest
from tests.registry.netfakes import Answer, CountingProxy, FakeRegistry
from tests.registry.registryd import Registry

MiB = 1 << 20


async def put_blob(domain: str, name: str, data: bytes) -> str:
    async with RegistryClient(domain, push=True) as client:
        await uploads.push(client, name, digest(data), len(data), data)
    return digest(data)


async def test_fetch_verifies_and_reports_progress(open_registry: Registry,
                                                   tmp_path: Path) -> None:
    name, data = unique(), os.urandom(3 * MiB + 17)
    d = await put_blob(open_registry.domain, name, data)
    seen: list[tuple[int, int | None]] = []
    async with RegistryClient(open_registry.domain) as client:
        assert await blobs.exists(client, name, d) == len(data)
        assert await blobs.exists(client, name, digest(b"absent")) is None
        got = await blobs.fetch(client, name, d, tmp_path / "p", size=len(data),
                                progress=lambda n, t: seen.append((n, t)))
        with pytest.raises(NotFound, match="blob unknown"):
            await blobs.fetch(client, name, digest(b"absent"), tmp_path / "q")
    assert (got.size, got.received, got.resumed_from) == (len(data), len(data), 0)
    assert (tmp_path / "p").read_bytes() == data
    assert seen[-1] == (len(data), len(data)) and len(seen) > 1


async def test_range_resume_sends_only_the_rest(open_registry: Registry,
                                                tmp_path: Path) -> None:
    name, data = unique(), os.urandom(4 * MiB)
    d = await put_blob(open_registry.domain, name, data)
    partial = tmp_path / "partial"
    partial.write_bytes(data[:3 * MiB])
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port).start(nursery)
        async with RegistryClient(f"127.0.0.1:{proxy.port}") as client:
            got = await blobs.fetch(client, name, d, partial, size=len(data))
        nursery.cancel_scope.cancel()
    assert (got.resumed_from, got.received) == (3 * MiB, MiB)
    assert partial.read_bytes() == data
    assert MiB < proxy.downstream_bytes < MiB + 16 * 1024  # headers and the ping, no more
    # a partial file that is already complete is only checked (the server answers 416)
    async with RegistryClient(open_registry.domain) as client:
        again = await blobs.fetch(client, name, d, partial)
    assert (again.received, again.size) == (0, len(data))


async def test_bad_partial_is_refused_then_restarted(open_registry: Registry,
                                                     tmp_path: Path) -> None:
    name, data = unique(), os.urandom(MiB)
    d = await put_blob(open_registry.domain, name, data)
    partial = tmp_path / "partial"
    partial.write_bytes(b"\0" * 1000)  # not a prefix of the blob
    async with RegistryClient(open_registry.domain) as client:
        with pytest.raises(DigestMismatch, match="downloaded content has digest"):
            await blobs.fetch(client, name, d, partial)
        assert not partial.exists()
        got = await blobs.fetch(client, name, d, partial)
    assert got.resumed_from == 0 and partial.read_bytes() == data
    partial.write_bytes(data + b"extra")  # longer than announced: thrown away
    async with RegistryClient(open_registry.domain) as client:
        assert (await blobs.fetch(client, name, d, partial, size=len(data))).resumed_from == 0


async def test_tampered_blob_is_refused(open_registry: Registry, tmp_path: Path) -> None:
    name, data = unique(), os.urandom(200_000)
    d = await put_blob(open_registry.domain, name, data)
    stored = open_registry.blob_path(d)
    stored.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    async with RegistryClient(open_registry.domain) as client:
        with pytest.raises(DigestMismatch) as err:
            await blobs.fetch(client, name, d, tmp_path / "p")
        assert err.value.code == "DIGEST_INVALID"
        assert not (tmp_path / "p").exists()
        with pytest.raises(DigestMismatch):
            await blobs.read(client, name, d)


async def test_uploads_chunked_from_file_and_stream(open_registry: Registry,
                                                    tmp_path: Path) -> None:
    name = unique()
    chunked, from_file, streamed = (os.urandom(n) for n in (350_000, 70_000, 90_000))
    source = tmp_path / "layer"
    source.write_bytes(from_file)

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(streamed), 10_000):
            yield streamed[i:i + 10_000]

    async with RegistryClient(open_registry.domain, push=True) as client:
        assert await uploads.push(client, name, digest(chunked), len(chunked), chunked,
                                  chunk_size=100_000) is uploads.Pushed.UPLOADED
        await uploads.push(client, name, digest(from_file), len(from_file), source)
        await uploads.push(client, name, digest(streamed), len(streamed), stream)
        for data in (chunked, from_file, streamed):
            assert await blobs.read(client, name, digest(data)) == data
        with pytest.raises(RegistryError) as err:
            await uploads.push(client, name, digest(b"other"), 5, b"wrong")
    assert err.value.code == "DIGEST_INVALID"


async def test_cross_repository_mount(open_registry: Registry) -> None:
    source, target, data = unique("src"), unique("dst"), os.urandom(50_000)
    d = await put_blob(open_registry.domain, source, data)
    async with RegistryClient(open_registry.domain, push=True) as client:
        assert await blobs.exists(client, target, d) is None
        assert await uploads.push(client, target, d, len(data), data,
                                  mount_from=source) is uploads.Pushed.MOUNTED
        assert await blobs.exists(client, target, d) == len(data)
        other = os.urandom(10)  # not in the source: the registry declines, the upload goes on
        assert not await uploads.mount(client, target, digest(other), source)
        assert await uploads.push(client, target, digest(other), len(other), other,
                                  mount_from=source) is uploads.Pushed.UPLOADED


async def test_cancelling_a_large_download(tmp_path: Path) -> None:
    """A cancel scope stops a download within 100 ms, closes the connection, and leaves the
    bytes received so far in the partial file."""
    chunk = bytes(range(256)) * 256  # 64 KiB
    sent = 0
    enough = trio.Event()

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        while True:
            yield chunk
            sent += len(chunk)
            if sent >= 4 * MiB:
                enough.set()
            await trio.lowlevel.checkpoint()

    async def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        return 200, {"Content-Length": str(1 << 40)}, endless

    cancelled_at: list[float] = []

    async def cancel_when_enough(scope: trio.CancelScope) -> None:
        await enough.wait()
        cancelled_at.append(trio.current_time())
        scope.cancel()

    partial = tmp_path / "partial"
    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        async with RegistryClient(fake.domain) as client:
            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_when_enough, scope)
                await blobs.fetch(client, "big", "sha256:" + "a" * 64, partial)
            stopped = trio.current_time()
            assert scope.cancelled_caught
            assert stopped - cancelled_at[0] < 0.1
        with trio.fail_after(5):
            await fake.closed.wait()
        nursery.cancel_scope.cancel()
    kept = partial.read_bytes()
    assert len(kept) >= 3 * MiB and kept == (chunk * (len(kept) // len(chunk) + 1))[:len(kept)]


async def test_lying_manifests_are_refused() -> None:
    doc = json.dumps({"schemaVersion": 2, "mediaType": manifests.SCHEMA2,
                      "config": {"digest": digest(b"c"), "size": 1}, "layers": []}).encode()

    async def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        announced = digest(b"something else") if path.endswith("/tagged") else digest(doc)
        return 200, {"Content-Type": manifests.SCHEMA2, "Content-Length": str(len(doc)),
                     "Docker-Content-Digest": announced}, doc

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        async with RegistryClient(fake.domain) as client:
            assert (await manifests.get(client, "x", "ok")).digest == digest(doc)
            sha512 = "sha512:" + hashlib.sha512(doc).hexdigest()  # checked in its algorithm
            assert (await manifests.get(client, "x", sha512)).raw == doc
            with pytest.raises(DigestMismatch):
                await manifests.get(client, "x", "sha256:" + "b" * 64)
            with pytest.raises(DigestMismatch):
                await manifests.get(client, "x", "tagged")
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mode", ["ignores-range", "wrong-range", "too-long"])
async def test_servers_that_do_not_resume(tmp_path: Path, mode: str) -> None:
    data = os.urandom(300_000)
    ranges: list[str] = []

    async def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        ranges.append(headers.get("range", ""))
        if mode == "too-long":
            return 200, {"Content-Length": str(len(data) + 5)}, data + b"extra"
        if mode == "wrong-range" and "range" in headers:
            return 206, {"Content-Length": str(len(data)),
                         "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}, data
        return 200, {"Content-Length": str(len(data))}, data

    partial = tmp_path / "partial"
    partial.write_bytes(data[:1000])
    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        async with RegistryClient(fake.domain) as client:
            if mode == "too-long":
                with pytest.raises(DigestMismatch) as err:
                    await blobs.fetch(client, "x", digest(data), partial, size=len(data))
                assert err.value.code == "SIZE_INVALID" and not partial.exists()
            else:
                got = await blobs.fetch(client, "x", digest(data), partial)
                assert got.resumed_from == 0 and partial.read_bytes() == data
        nursery.cancel_scope.cancel()
    assert ranges[0] == "bytes=1000-"
    if mode == "wrong-range":
        assert ranges == ["bytes=1000-", ""]  # the partial file was dropped, then a full GET


async def test_a_stalled_download_times_out_and_keeps_its_bytes(tmp_path: Path) -> None:
    async def stall() -> AsyncIterator[bytes]:
        yield b"x" * 1000
        await trio.sleep_forever()
        yield b""  # pragma: no cover

    async def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        return 200, {"Content-Length": "5000"}, stall

    config = RegistryConfig(read_timeout=0.3)
    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        async with RegistryClient(fake.domain, config=config) as client:
            with trio.fail_after(5), pytest.raises(Unreachable, match="timeout"):
                await blobs.fetch(client, "x", digest(b"y"), tmp_path / "p")
        nursery.cancel_scope.cancel()
    assert (tmp_path / "p").read_bytes() == b"x" * 1000
