"""A pull's registry traffic: one client per request (one ``/v2/`` ping, one token cache for
all its blobs), blob GETs answered 5xx or 429 tried again (``Retrying in N seconds``),
refusals never, and a shared download that goes on with the next waiting request's registry
when the first one's fails."""

from __future__ import annotations

import httpx
import trio

from svc.registry import manifests
from svc.registry.client import RegistryClient
from tests.registry.conftest import unique
from tests.registry.content import Image, digest, push_image
from tests.registry.netfakes import Answer, CountingProxy, FakeRegistry
from tests.registry.pulling import gz_layers, layer_statuses, pull, short, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry


async def test_one_ping_per_pull(client: httpx.AsyncClient, open_registry: Registry) -> None:
    path = unique("oneping")
    image = tar_image(gz_layers(30_000, 20_000, 10_000, 5_000))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port).start(nursery)
        r = await pull(client, f"127.0.0.1:{proxy.port}/{path}")
        nursery.cancel_scope.cancel()
    assert messages(r.text)[-1]["status"].startswith("Status: Downloaded newer image"), r.text
    assert proxy.requests.count("GET /v2/") == 1, proxy.requests


def _serving(image: Image, blob_answers: list[int], hits: list[str],
             pause: float = 0.0) -> FakeRegistry:
    """A registry serving ``image`` whose layer GETs first answer the given statuses."""
    layer = image.layers[0]

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        if target.endswith("/manifests/latest"):
            return 200, {"Content-Type": manifests.SCHEMA2, "Docker-Content-Digest":
                         image.digest, "Content-Length": str(len(image.manifest))}, \
                image.manifest
        if target.endswith(f"/blobs/{digest(image.config)}"):
            return 200, {"Content-Length": str(len(image.config))}, image.config
        hits.append(target)
        await trio.sleep(pause)
        if blob_answers:
            status = blob_answers.pop(0)
            body = b'{"errors":[{"code":"X","message":"not now"}]}'
            return status, {"Content-Length": str(len(body))}, body
        return 200, {"Content-Length": str(len(layer))}, layer

    return FakeRegistry(route)


async def test_server_errors_are_retried_refusals_are_not(client: httpx.AsyncClient) -> None:
    image, other = tar_image(gz_layers(40_000)), tar_image(gz_layers(30_000))
    ident, other_ident = short(digest(image.layers[0])), short(digest(other.layers[0]))
    busy_hits: list[str] = []
    refused_hits: list[str] = []
    async with trio.open_nursery() as nursery:
        busy = await _serving(image, [503, 429], busy_hits).start(nursery)
        refused = await _serving(other, [403, 403], refused_hits).start(nursery)
        ok = await pull(client, f"{busy.domain}/{unique('busy')}")
        no = await pull(client, f"{refused.domain}/{unique('refused')}")
        nursery.cancel_scope.cancel()
    seen = layer_statuses(messages(ok.text), ident)
    assert seen[:3] == ["Pulling fs layer", "Retrying in 1 second", "Retrying in 2 seconds"], seen
    assert seen[-1] == "Pull complete" and len(busy_hits) == 3
    assert "Retrying in 1 second" not in layer_statuses(messages(no.text), other_ident)
    assert "not now" in messages(no.text)[-1]["error"] and len(refused_hits) == 1, no.text


async def test_a_shared_download_goes_on_with_the_next_registry(
        client: httpx.AsyncClient, open_registry: Registry) -> None:
    image = tar_image(gz_layers(300_000))
    path = unique("second")
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    hits: list[str] = []
    results: dict[str, httpx.Response] = {}
    async with trio.open_nursery() as nursery:
        failing = await _serving(image, [403], hits, pause=1.0).start(nursery)

        async def one(name: str, repo: str) -> None:
            results[name] = await pull(client, repo)

        nursery.start_soon(one, "failing", f"{failing.domain}/{unique('first')}")
        await trio.sleep(0.5)
        nursery.start_soon(one, "good", f"{open_registry.domain}/{path}")
        with trio.fail_after(60):
            while len(results) < 2:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert len(hits) == 1
    for r in results.values():
        assert messages(r.text)[-1]["status"].startswith("Status: Downloaded newer image") \
            or messages(r.text)[-1]["status"].startswith("Status: Image is up to date"), r.text


async def test_a_failing_storage_redirect_is_retried(client: httpx.AsyncClient) -> None:
    """Registries send blob GETs to storage; storage answering 502 is tried again."""
    image = tar_image(gz_layers(30_000))
    layer = image.layers[0]
    stored: list[str] = []

    async def storage(method: str, target: str, headers: dict[str, str]) -> Answer:
        stored.append(target)
        if len(stored) == 1:
            return 502, {"Content-Length": "0"}, b""
        return 200, {"Content-Length": str(len(layer))}, layer

    async with trio.open_nursery() as nursery:
        store = await FakeRegistry(storage).start(nursery)
        hits: list[str] = []
        inner = _serving(image, [], hits).route

        async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
            if target.endswith(f"/blobs/{digest(layer)}"):
                return 307, {"Location": f"http://{store.domain}/s3/blob",
                             "Content-Length": "0"}, b""
            return await inner(method, target, headers)

        registry = await FakeRegistry(route).start(nursery)
        r = await pull(client, f"{registry.domain}/{unique('redirect')}")
        nursery.cancel_scope.cancel()
    seen = layer_statuses(messages(r.text), short(digest(layer)))
    assert "Retrying in 1 second" in seen and seen[-1] == "Pull complete", r.text
    assert stored == ["/s3/blob", "/s3/blob"]
