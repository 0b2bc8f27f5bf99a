"""Many pulls of one image at once: every client's stream ends, each with its own final
status, however the users of a shared download interleave."""

from __future__ import annotations

import httpx
import trio

from svc.registry.client import RegistryClient
from tests.registry.conftest import unique
from tests.registry.content import push_image
from tests.registry.netfakes import CountingProxy
from tests.registry.pulling import gz_layers, pull, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry


async def test_twelve_concurrent_pulls_of_one_image_all_finish(
        client: httpx.AsyncClient, open_registry: Registry) -> None:
    path = unique("many")
    image = tar_image(gz_layers(900_000, 700_000, 500_000, 300_000))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    results: list[httpx.Response] = []
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.001).start(nursery)
        repo = f"127.0.0.1:{proxy.port}/{path}"

        async def one() -> None:
            results.append(await pull(client, repo))

        with trio.fail_after(90):
            async with trio.open_nursery() as pulls:
                for _ in range(12):
                    pulls.start_soon(one)
                    await trio.sleep(0.03)
        nursery.cancel_scope.cancel()
    finals = [messages(r.text)[-1]["status"] for r in results]
    assert len(finals) == 12
    assert all(f in (f"Status: Downloaded newer image for {repo}:latest",
                     f"Status: Image is up to date for {repo}:latest") for f in finals), finals
