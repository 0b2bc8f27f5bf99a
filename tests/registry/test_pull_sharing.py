"""Better than the engines users have: concurrent pulls share each blob's download (counted
at a proxy in front of the registry); a client that goes away cancels only what nobody else
waits for, stops its transfers within 100 ms and leaves nothing half-made; the next pull
resumes the partial blob with ``Range`` (counted in bytes served), and a connection cut
mid-blob is retried from where it stopped within the same pull."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio

from svc.registry import manifests
from svc.registry.client import RegistryClient
from tests.registry.conftest import unique
from tests.registry.content import Image, digest, push_image
from tests.registry.netfakes import Answer, CountingProxy, FakeRegistry
from tests.registry.pulling import assert_pulled, gz_layers, layer_statuses, pull, short, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


@pytest.fixture
def image_dirs(daemon: Daemon) -> Iterator[tuple[Path, Path]]:
    root = Path(daemon.root)
    yield root / "overlay2", root / "downloads"


async def _hand_made(registry: Registry, *sizes: int) -> tuple[str, Image]:
    path = unique("share")
    image = tar_image(gz_layers(*sizes))
    async with RegistryClient(registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    return path, image


async def _start_pull(daemon: Daemon, image: str) -> tuple[trio.SocketStream, bytearray]:
    """A pull on a raw connection, its response head read."""
    s = await connect(daemon.sock)
    await s.send_all(f"POST /v1.23/images/create?fromImage={image}&tag=latest HTTP/1.1\r\n"
                     "Host: svc\r\nX-Registry-Auth: e30=\r\nContent-Length: 0\r\n\r\n".encode())
    buf = bytearray()
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s, buf


async def test_five_concurrent_pulls_fetch_each_blob_once(client: httpx.AsyncClient,
                                                          open_registry: Registry) -> None:
    path, image = await _hand_made(open_registry, 1_500_000, 1_000_000, 700_000)
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.01).start(nursery)
        repo = f"127.0.0.1:{proxy.port}/{path}"
        results: list[httpx.Response] = []

        async def one() -> None:
            results.append(await pull(client, repo))

        async with trio.open_nursery() as pulls:
            for _ in range(5):
                pulls.start_soon(one)
        nursery.cancel_scope.cancel()
    for r in results:
        assert messages(r.text)[-1]["status"].startswith("Status: "), r.text
    for blob in image.layers:
        assert proxy.blob_gets(digest(blob)) == 1, proxy.requests
    assert proxy.downstream_bytes < sum(map(len, image.layers)) * 1.2
    shown = [layer_statuses(messages(r.text), short(digest(image.layers[0]))) for r in results]
    # (a pull that finds the layer committed by another after its first look says so)
    assert all("Download complete" in s or s[-1:] == ["Already exists"] for s in shown), shown


async def test_a_client_leaving_cancels_only_its_own(client: httpx.AsyncClient, daemon: Daemon,
                                                     open_registry: Registry,
                                                     image_dirs: tuple[Path, Path]) -> None:
    store, downloads = image_dirs
    path, image = await _hand_made(open_registry, 6_000_000)
    blob = digest(image.layers[0])
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.01).start(nursery)
        repo = f"127.0.0.1:{proxy.port}/{path}"
        leaving, _ = await _start_pull(daemon, repo)
        staying: list[httpx.Response] = []

        async def stay() -> None:
            staying.append(await pull(client, repo))

        nursery.start_soon(stay)
        with trio.fail_after(30):
            while proxy.downstream_bytes < 1_000_000:
                await trio.sleep(0.02)
        await leaving.aclose()
        with trio.fail_after(60):
            while not staying:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    msgs = messages(staying[0].text)
    assert_pulled(layer_statuses(msgs, short(blob)))
    assert msgs[-1]["status"] == f"Status: Downloaded newer image for {repo}:latest"
    # the transfer went on with the staying client's connection, from where it was
    assert proxy.blob_gets(blob) <= 2, proxy.requests
    assert proxy.downstream_bytes < len(image.layers[0]) + 300_000
    assert not any(p.name.startswith("tmp-") for p in store.iterdir())
    assert not (downloads / f"sha256-{blob.partition(':')[2]}.partial").exists()


async def test_disconnect_stops_at_once_and_the_next_pull_resumes(
        client: httpx.AsyncClient, daemon: Daemon, open_registry: Registry,
        image_dirs: tuple[Path, Path]) -> None:
    store, downloads = image_dirs
    path, image = await _hand_made(open_registry, 100_000, 8_000_000)
    small, big = image.layers
    blob = digest(big)
    partial = downloads / f"sha256-{blob.partition(':')[2]}.partial"
    before = sorted(p.name for p in store.iterdir())
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.005).start(nursery)
        repo = f"127.0.0.1:{proxy.port}/{path}"
        s, buf = await _start_pull(daemon, repo)
        with trio.fail_after(30):
            while proxy.downstream_bytes < 3_000_000:
                buf += await s.receive_some()
        assert b'"Downloading"' in buf
        assert f'"Pull complete","id":"{short(digest(small))}"'.encode() in buf
        # ...so the base layer was committed: it must be gone again
        await s.aclose()
        await trio.sleep(0.1)
        stopped = proxy.downstream_bytes
        await trio.sleep(0.7)
        assert proxy.downstream_bytes <= stopped + 65536  # at most a chunk in flight
        assert stopped < len(small) + len(big)
        assert (await client.get(f"/v1.23/images/{repo}:latest/json")).status_code == 404
        assert sorted(p.name for p in store.iterdir()) == before  # nothing half-made
        kept = partial.stat().st_size
        assert 1_000_000 < kept < len(big)

        served_before = proxy.downstream_bytes
        r = await pull(client, repo)
        nursery.cancel_scope.cancel()
    msgs = messages(r.text)
    assert msgs[-1] == {"status": f"Status: Downloaded newer image for {repo}:latest"}, r.text
    served = proxy.downstream_bytes - served_before
    assert served < len(small) + len(big) - kept + 200_000, (served, kept)
    got = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert got["Id"] == digest(image.config)
    assert not partial.exists()


async def _cut_pull(daemon: Daemon, proxy: CountingProxy, repo: str, partial: Path) -> None:
    """A pull of ``repo`` whose client goes once a part of the blob is in ``partial``."""
    s, _ = await _start_pull(daemon, repo)
    start = proxy.downstream_bytes
    with trio.fail_after(30):
        while proxy.downstream_bytes < start + 1_000_000:
            await s.receive_some()
    await s.aclose()
    with trio.fail_after(10):
        while not partial.exists():
            await trio.sleep(0.05)
    await trio.sleep(0.5)  # the transfer has stopped and the daemon noted what it was for


async def test_partial_blobs_go_with_the_name_they_were_pulled_for(
        client: httpx.AsyncClient, daemon: Daemon, open_registry: Registry,
        image_dirs: tuple[Path, Path]) -> None:
    """A cut pull of a new version of ``repo:latest`` leaves its partial blob; removing
    ``repo:latest`` (the old version) drops it, and so does pulling the tag in full."""
    _, downloads = image_dirs
    path, old = await _hand_made(open_registry, 20_000)
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.005).start(nursery)
        repo = f"127.0.0.1:{proxy.port}/{path}"
        assert (await pull(client, repo)).status_code == 200
        partials = []
        for _ in range(2):
            new = tar_image(gz_layers(6_000_000))
            async with RegistryClient(open_registry.domain, push=True) as reg:
                await push_image(reg, path, new, "latest")
            blob = digest(new.layers[0])
            partials.append(downloads / f"sha256-{blob.partition(':')[2]}.partial")
            await _cut_pull(daemon, proxy, repo, partials[-1])
        r = await client.delete(f"/v1.23/images/{repo}:latest")
        assert r.status_code == 200, r.text
        assert not any(p.exists() for p in partials)

        await _cut_pull(daemon, proxy, repo, partials[-1])  # the newest again, cut
        newest = tar_image(gz_layers(30_000))
        async with RegistryClient(open_registry.domain, push=True) as reg:
            await push_image(reg, path, newest, "latest")
        assert (await pull(client, repo)).status_code == 200
        nursery.cancel_scope.cancel()
    assert not partials[-1].exists()
    # this test's blobs only: the session's daemon keeps other tests' partial files for
    # resuming, and a pull another test left retrying may still be writing one
    mine = {p.name for p in partials} | {
        f"sha256-{digest(b).partition(':')[2]}.partial"
        for b in (*old.layers, old.config, *newest.layers, newest.config)}
    assert [p.name for p in downloads.iterdir() if p.name.removesuffix(".owners") in mine] == []
    assert old.config != newest.config


async def test_a_cut_connection_is_retried_from_where_it_stopped(
        client: httpx.AsyncClient) -> None:
    """A registry that drops the connection half-way through a blob: the same pull tries
    again a second later, asking only for the rest."""
    image = tar_image(gz_layers(600_000))
    layer = image.layers[0]
    half = len(layer) // 2
    ranges: list[str] = []

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        if target.endswith("/manifests/latest"):
            return 200, {"Content-Type": manifests.SCHEMA2, "Content-Length":
                         str(len(image.manifest)), "Docker-Content-Digest": image.digest}, \
                image.manifest
        if target.endswith(f"/blobs/{digest(image.config)}"):
            return 200, {"Content-Length": str(len(image.config))}, image.config
        assert target.endswith(f"/blobs/{digest(layer)}"), target
        if "range" not in headers:
            async def cut() -> AsyncIterator[bytes]:
                yield layer[:half]
                raise trio.ClosedResourceError  # the connection drops
            return 200, {"Content-Length": str(len(layer))}, cut
        ranges.append(headers["range"])
        start = int(headers["range"].removeprefix("bytes=").rstrip("-"))
        return 206, {"Content-Length": str(len(layer) - start),
                     "Content-Range": f"bytes {start}-{len(layer) - 1}/{len(layer)}"}, \
            layer[start:]

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        repo = f"{fake.domain}/{unique('cut')}"
        r = await pull(client, repo)
        nursery.cancel_scope.cancel()
    msgs = messages(r.text)
    seen = layer_statuses(msgs, short(digest(layer)))
    assert "Retrying in 1 second" in seen, msgs
    assert seen[-1] == "Pull complete"
    assert ranges == [f"bytes={half}-"]
    got = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert got["Id"] == digest(image.config)
