"""Two different images that share their base layer, pulled at the same time by two
requests: the shared blob is downloaded once, each image gets its own top layer, and a
request that goes away does not take the shared download from the one that stays."""

from __future__ import annotations

import httpx
import trio

from svc.registry.client import RegistryClient
from tests.registry.conftest import unique
from tests.registry.content import Image, digest, push_image
from tests.registry.netfakes import CountingProxy
from tests.registry.pulling import gz_layers, pull, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def _two_images(registry: Registry) -> tuple[str, Image, str, Image]:
    base, top_a, top_b = gz_layers(3_000_000, 200_000, 300_000)
    a, b = tar_image([base, top_a]), tar_image([base, top_b])
    path_a, path_b = unique("shared-a"), unique("shared-b")
    async with RegistryClient(registry.domain, push=True) as reg:
        await push_image(reg, path_a, a, "latest")
        await push_image(reg, path_b, b, "latest")
    return path_a, a, path_b, b


async def test_images_sharing_a_layer_download_it_once(client: httpx.AsyncClient,
                                                      open_registry: Registry) -> None:
    path_a, a, path_b, b = await _two_images(open_registry)
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.01).start(nursery)
        got: dict[str, httpx.Response] = {}

        async def one(path: str) -> None:
            got[path] = await pull(client, f"127.0.0.1:{proxy.port}/{path}")

        async with trio.open_nursery() as pulls:
            pulls.start_soon(one, path_a)
            pulls.start_soon(one, path_b)
        nursery.cancel_scope.cancel()
    for path, image in ((path_a, a), (path_b, b)):
        assert messages(got[path].text)[-1]["status"].startswith(
            "Status: Downloaded newer image"), got[path].text
        repo = f"127.0.0.1:{proxy.port}/{path}"
        assert (await client.get(f"/v1.23/images/{repo}:latest/json")).json()["Id"] \
            == digest(image.config)
    assert proxy.blob_gets(digest(a.layers[0])) == 1, proxy.requests
    assert proxy.blob_gets(digest(a.layers[1])) == 1
    assert proxy.blob_gets(digest(b.layers[1])) == 1


async def test_the_request_that_stays_keeps_the_shared_download(
        client: httpx.AsyncClient, daemon: Daemon, open_registry: Registry) -> None:
    path_a, a, path_b, b = await _two_images(open_registry)
    base = digest(a.layers[0])
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.01).start(nursery)
        s = await connect(daemon.sock)
        await s.send_all(f"POST /v1.23/images/create?fromImage=127.0.0.1:{proxy.port}/{path_a}"
                         "&tag=latest HTTP/1.1\r\nHost: svc\r\nX-Registry-Auth: e30=\r\n"
                         "Content-Length: 0\r\n\r\n".encode())
        assert (await read_head(s, bytearray())).startswith(b"HTTP/1.1 200")
        staying: list[httpx.Response] = []

        async def stay() -> None:
            staying.append(await pull(client, f"127.0.0.1:{proxy.port}/{path_b}"))

        nursery.start_soon(stay)
        with trio.fail_after(30):
            while proxy.downstream_bytes < 500_000:
                await trio.sleep(0.02)
        await s.aclose()  # the first request goes; the second still needs the base layer
        with trio.fail_after(60):
            while not staying:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert messages(staying[0].text)[-1]["status"].startswith(
        "Status: Downloaded newer image"), staying[0].text
    # the download went on through the staying request's connection, from where it was
    # (a second, ranged GET at most), never from the start again
    assert proxy.blob_gets(base) <= 2, proxy.requests
    total = len(a.layers[0]) + len(b.layers[1]) + len(a.layers[1])
    assert proxy.downstream_bytes < total + 300_000
    repo_a = f"127.0.0.1:{proxy.port}/{path_a}"
    assert (await client.get(f"/v1.23/images/{repo_a}:latest/json")).status_code == 404
