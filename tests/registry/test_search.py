"""Search: distribution's catalog (paged, filtered), a v1 search endpoint where served."""

from __future__ import annotations

import json
import uuid

import pytest
import trio

from svc.registry import search
from svc.registry.client import RegistryClient
from svc.registry.errors import Unauthorized
from svc.wire.authconfig import AuthConfig
from tests.registry.conftest import PASSWORD, USER
from tests.registry.content import push_image, random_image
from tests.registry.netfakes import Answer, FakeRegistry
from tests.registry.registryd import Registry


async def test_catalog_search_pages_and_filters(open_registry: Registry,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    term = uuid.uuid4().hex[:8]
    names = sorted(f"team/{term}-{i}" for i in range(5))
    async with RegistryClient(open_registry.domain, push=True) as client:
        for name in names:
            await push_image(client, name, random_image(10), "v1")
        await push_image(client, "team/unrelated-" + uuid.uuid4().hex[:6], random_image(10),
                         "v1")
        monkeypatch.setattr(search, "CATALOG_PAGE", 2)  # follow Link: rel="next"
        found = await search.search(client, term)
        assert [r.name for r in found] == names
        assert found[0].model_dump() == {"name": names[0], "description": "",
                                         "star_count": 0, "is_official": False,
                                         "is_automated": False}
        assert len(await search.search(client, term, limit=3)) == 3
        assert await search.search(client, "no-such-" + term) == []


async def test_catalog_needs_credentials_on_a_token_registry(token_registry: Registry) -> None:
    async with RegistryClient(token_registry.domain) as anonymous:
        with pytest.raises(Unauthorized):
            await search.search(anonymous, "x")
    name = "searchable-" + uuid.uuid4().hex[:8]
    alice = AuthConfig(username=USER, password=PASSWORD)
    async with RegistryClient(token_registry.domain, credentials=alice, push=True) as client:
        await push_image(client, name, random_image(10), "v1")
        assert [r.name for r in await search.search(client, name)] == [name]


async def test_v1_search_where_served() -> None:
    seen: list[str] = []

    async def route(method: str, path: str, headers: dict[str, str]) -> Answer:
        seen.append(path)
        body = json.dumps({"num_results": 2, "query": "busybox", "results": [
            {"name": "busybox", "description": "Busybox base image.", "star_count": 2000,
             "is_official": True, "is_automated": False},
            {"name": "someone/busybox", "description": "", "star_count": 3,
             "is_official": False, "is_automated": True, "is_trusted": True},
        ]}).encode()
        return 200, {"Content-Type": "application/json",
                     "Content-Length": str(len(body))}, body

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        async with RegistryClient(fake.domain) as client:
            found = await search.search(client, "busybox", limit=1)
        nursery.cancel_scope.cancel()
    assert seen == ["/v1/search?q=busybox&n=1"]
    assert [r.model_dump() for r in found] == [
        {"name": "busybox", "description": "Busybox base image.", "star_count": 2000,
         "is_official": True, "is_automated": False}]
