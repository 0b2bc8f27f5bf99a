"""``GET /images/search`` through the daemon: a registry named in the term is searched (its
catalog, filtered), ``X-Registry-Auth`` is honoured, the unreachable default index is a quick
clear error; the docker CLI and both SDKs get the spec's shape."""

from __future__ import annotations

import json
import uuid

import httpx
import trio

from svc.registry.client import RegistryClient
from svc.wire.authconfig import ANONYMOUS, AuthConfig, encode_auth_header
from tests.conftest import docker_cli, run_sdk
from tests.registry.conftest import PASSWORD, USER
from tests.registry.content import push_image, random_image
from tests.registry.registryd import Registry
from tests.support.daemon import Daemon


async def _publish(registry: Registry, names: list[str],
                   credentials: AuthConfig = ANONYMOUS) -> None:
    async with RegistryClient(registry.domain, credentials=credentials, push=True) as c:
        for name in names:
            await push_image(c, name, random_image(10), "v1")


async def test_search_a_registry_named_in_the_term(client: httpx.AsyncClient,
                                                   open_registry: Registry) -> None:
    term = "find-" + uuid.uuid4().hex[:8]
    names = sorted([f"{term}/a", f"team/{term}-b", f"{term}-c"])
    await _publish(open_registry, [*names, "other-" + uuid.uuid4().hex[:8]])
    r = await client.get("/v1.23/images/search",
                         params={"term": f"{open_registry.domain}/{term}", "limit": "25"})
    assert r.status_code == 200, r.text
    assert sorted(r.json(), key=lambda x: x["name"]) == [
        {"name": n, "description": "", "star_count": 0, "is_official": False,
         "is_automated": False} for n in names]
    r = await client.get("/v1.23/images/search",
                         params={"term": f"{open_registry.domain}/{term}", "limit": "2"})
    assert len(r.json()) == 2
    r = await client.get("/v1.23/images/search", params={"term": "x", "limit": "0"})
    assert r.status_code == 400 and "outside the range" in r.text


async def test_search_honours_registry_auth(client: httpx.AsyncClient,
                                            token_registry: Registry) -> None:
    alice = AuthConfig(username=USER, password=PASSWORD)
    name = "hidden-" + uuid.uuid4().hex[:8]
    await _publish(token_registry, [name], alice)
    term = f"{token_registry.domain}/{name}"
    r = await client.get("/v1.23/images/search", params={"term": term},
                         headers={"X-Registry-Auth": "e30="})
    assert r.status_code == 401, r.text
    r = await client.get("/v1.23/images/search", params={"term": term},
                         headers={"X-Registry-Auth": encode_auth_header(alice)})
    assert r.status_code == 200, r.text
    assert [x["name"] for x in r.json()] == [name]


async def test_default_index_unreachable_is_quick(client: httpx.AsyncClient) -> None:
    with trio.fail_after(10):  # no internet on this machine
        r = await client.get("/v1.23/images/search", params={"term": "busybox", "limit": "5"})
    assert r.status_code == 503
    assert "docker.io" in r.text


SDK7 = """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
print(json.dumps(c.images.search(sys.argv[2])))
"""

DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
print(json.dumps(c.search(sys.argv[2])))
"""


async def test_search_with_the_cli_and_sdks(daemon: Daemon, open_registry: Registry) -> None:
    term = "cli-" + uuid.uuid4().hex[:8]
    await _publish(open_registry, [f"{term}/one", f"{term}/two"])
    full = f"{open_registry.domain}/{term}"
    out = await trio.to_thread.run_sync(lambda: docker_cli(daemon.url, "search", full))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "DESCRIPTION"]
    assert [line.split()[0] for line in lines[1:]] == [f"{term}/one", f"{term}/two"]
    for sdk, script in (("sdk7", SDK7), ("dockerpy1", DOCKERPY1)):
        found = json.loads(await trio.to_thread.run_sync(
            lambda s=sdk, sc=script: run_sdk(s, sc, daemon.url, full)))  # type: ignore[misc]
        assert [x["name"] for x in found] == [f"{term}/one", f"{term}/two"], sdk
        assert found[0]["star_count"] == 0 and found[0]["is_official"] is False
