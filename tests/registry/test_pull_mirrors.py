"""``--registry-mirror``: a pull from Docker Hub goes through the mirrors in turn, as dockerd
1.11 does; a mirror that answers ``/v2/`` but lacks the repository (401, 404), fails with a
5xx, or fails mid-pull (a blob it does not serve) hands over to the next one."""

from __future__ import annotations

import trio

from svc.registry import manifests
from svc.registry.client import RegistryClient
from tests.conftest import http_client
from tests.registry.conftest import unique
from tests.registry.content import digest, push_image
from tests.registry.netfakes import Answer, FakeRegistry
from tests.registry.pulling import gz_layers, pull, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry


async def test_mirrors_that_fail_hand_over_to_the_next(  # type: ignore[no-untyped-def]
        spawn, open_registry: Registry, basic_registry: Registry) -> None:
    name = unique("mirrored")
    image = tar_image(gz_layers(50_000, 20_000))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, f"library/{name}", image, "latest")
    asked: list[str] = []

    async def broken(method: str, target: str, headers: dict[str, str]) -> Answer:
        asked.append(target)
        if target.endswith("/manifests/latest"):  # the manifest, but none of its blobs
            return 200, {"Content-Type": manifests.SCHEMA2, "Docker-Content-Digest":
                         image.digest, "Content-Length": str(len(image.manifest))}, \
                image.manifest
        return 404, {"Content-Length": "0"}, b""

    async def busy(method: str, target: str, headers: dict[str, str]) -> Answer:
        return 503, {"Content-Length": "0"}, b""

    async with trio.open_nursery() as nursery:
        mid_pull = await FakeRegistry(broken).start(nursery)
        erroring = await FakeRegistry(busy).start(nursery)
        mirrors = [erroring.domain, basic_registry.domain, mid_pull.domain,
                   open_registry.domain]
        d = spawn([a for m in mirrors for a in ("--registry-mirror", f"http://{m}")])
        async with http_client(d.sock) as c:
            r = await pull(c, name)
            got = (await c.get(f"/v1.23/images/{name}:latest/json")).json()
        nursery.cancel_scope.cancel()
    msgs = messages(r.text)
    assert r.status_code == 200
    assert msgs[-1] == {"status": f"Status: Downloaded newer image for {name}:latest"}, r.text
    assert got["Id"] == digest(image.config)
    assert any("/blobs/" in t for t in asked)  # the mirror failing mid-pull was used first
