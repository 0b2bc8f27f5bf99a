"""A client that goes away at other points of a pull than mid-blob (test_pull_sharing covers
that one): while the manifest is still being fetched, before the response head, and while
every download slot holds a blob and the last layer is Waiting. Each time the daemon drops
its registry requests, keeps nothing half-made, and the next pull of the image works."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import trio

from svc.registry import manifests
from tests.registry.conftest import unique
from tests.registry.content import Image, digest
from tests.registry.netfakes import Answer, FakeRegistry, Route
from tests.registry.pulling import gz_layers, pull, tar_image
from tests.registry.pushing import messages
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head

CHUNK = 1024


def _route(image: Image, manifest_gate: trio.Event, held: Callable[[str], bool]) -> Route:
    """Serve ``image``; the manifest waits for ``manifest_gate``; a blob ``held`` is sent a
    chunk at a time, forever, until the daemon hangs up."""

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        if "/manifests/" in target:
            await manifest_gate.wait()
            return 200, {"Content-Type": manifests.SCHEMA2, "Docker-Content-Digest":
                         image.digest, "Content-Length": str(len(image.manifest))}, \
                image.manifest
        blob = next(b for b in [image.config, *image.layers] if target.endswith(digest(b)))
        if not held(digest(blob)):
            return 200, {"Content-Length": str(len(blob))}, blob

        async def trickle() -> AsyncIterator[bytes]:
            for i in range(0, len(blob) - CHUNK, CHUNK):  # never the last byte
                yield blob[i:i + CHUNK]
                await trio.sleep(0.02)
            await trio.sleep_forever()
        return 200, {"Content-Length": str(len(blob))}, trickle

    return route


def _layers_dir(daemon: Daemon) -> list[str]:
    return sorted(p.name for p in (Path(daemon.root) / "overlay2").iterdir())


async def _pull_raw(daemon: Daemon, repo: str) -> trio.SocketStream:
    s = await connect(daemon.sock)
    await s.send_all(f"POST /v1.23/images/create?fromImage={repo}&tag=latest HTTP/1.1\r\n"
                     "Host: svc\r\nX-Registry-Auth: e30=\r\nContent-Length: 0\r\n\r\n".encode())
    return s


async def _pulls_cleanly_now(client: httpx.AsyncClient, repo: str, image: Image) -> None:
    r = await pull(client, repo)
    assert messages(r.text)[-1] == {"status": f"Status: Downloaded newer image for "
                                              f"{repo}:latest"}, r.text
    got = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert got["Id"] == digest(image.config)


async def test_a_client_gone_before_the_head_drops_the_manifest_request(
        client: httpx.AsyncClient, daemon: Daemon) -> None:
    image = tar_image(gz_layers(50_000))
    gate = trio.Event()
    before = _layers_dir(daemon)
    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(_route(image, gate, lambda d: False)).start(nursery)
        repo = f"{fake.domain}/{unique('gone')}"
        s = await _pull_raw(daemon, repo)
        await trio.sleep(0.5)  # the daemon waits for the manifest
        await s.aclose()
        await trio.sleep(0.3)
        gate.set()  # the manifest answer now finds the daemon's connection closed
        with trio.fail_after(5):
            await fake.closed.wait()
        assert (await client.get(f"/v1.23/images/{repo}:latest/json")).status_code == 404
        assert _layers_dir(daemon) == before
        await _pulls_cleanly_now(client, repo, image)
        nursery.cancel_scope.cancel()


async def test_a_client_gone_while_layers_wait_drops_every_transfer(
        client: httpx.AsyncClient, daemon: Daemon) -> None:
    image = tar_image(gz_layers(400_000, 400_000, 400_000, 400_000))
    gate = trio.Event()
    gate.set()
    holding = True
    before = _layers_dir(daemon)
    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(_route(image, gate, lambda d: holding and d != digest(
            image.config))).start(nursery)
        repo = f"{fake.domain}/{unique('waiting')}"
        s = await _pull_raw(daemon, repo)
        buf = bytearray()
        head = await read_head(s, buf)
        assert head.startswith(b"HTTP/1.1 200"), head
        with trio.fail_after(20):  # three downloads run, the fourth layer waits
            while buf.count(b'"Downloading"') < 3 or b'"Waiting"' not in buf:
                buf += await s.receive_some()
        await s.aclose()
        t0 = trio.current_time()
        with trio.fail_after(5):  # the trickling blobs find their connections closed
            await fake.closed.wait()
        assert trio.current_time() - t0 < 1.0
        await trio.sleep(0.2)
        assert (await client.get(f"/v1.23/images/{repo}:latest/json")).status_code == 404
        assert _layers_dir(daemon) == before
        holding = False
        await _pulls_cleanly_now(client, repo, image)
        nursery.cancel_scope.cancel()
