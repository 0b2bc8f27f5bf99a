"""Registry authentication against distribution 2.8: open, htpasswd (Basic) and token."""

from __future__ import annotations

import pytest
import trio

from svc.registry import manifests
from svc.registry.auth import parse_challenges, repository_scope
from svc.registry.client import RegistryClient, login
from svc.registry.errors import NotFound, Unauthorized, Unreachable
from svc.registry.transport import RegistryConfig, endpoints, is_insecure, split_host
from svc.wire.authconfig import AuthConfig
from tests.registry.conftest import PASSWORD, USER, unique
from tests.registry.content import push_image, random_image
from tests.registry.registryd import Registry, free_port
from tests.registry.tokenserver import TokenServer

ALICE = AuthConfig(username=USER, password=PASSWORD)
WRONG = AuthConfig(username=USER, password="wrong")


def test_parse_challenges() -> None:
    got = parse_challenges([
        'Bearer realm="https://auth.example/token",service="reg",'
        'scope="repository:a/b:pull,push",error="insufficient_scope"',
        'Basic realm="x \\"quoted\\"", Bearer realm=http://t/token',
    ])
    assert [c.scheme for c in got] == ["bearer", "basic", "bearer"]
    assert got[0].params == {"realm": "https://auth.example/token", "service": "reg",
                             "scope": "repository:a/b:pull,push", "error": "insufficient_scope"}
    assert got[1].params == {"realm": 'x "quoted"'}
    assert got[2].params == {"realm": "http://t/token"}
    assert parse_challenges(["", "   ", ",,"]) == []


async def test_endpoints_and_insecure() -> None:
    config = RegistryConfig(insecure_registries=("10.1.0.0/16", "reg.example:5000"),
                            registry_mirrors=("https://mirror.example/",))
    assert split_host("[::1]:5000") == ("::1", 5000)
    assert split_host("host:5000") == ("host", 5000)
    assert await is_insecure("localhost:5000", config)
    assert await is_insecure("127.0.0.2:5000", config)
    assert await is_insecure("[::1]:5000", config)
    assert await is_insecure("10.1.2.3", config)
    assert await is_insecure("reg.example:5000", config)
    assert not await is_insecure("10.2.0.1:5000", config)
    assert not await is_insecure("quay.io", config)
    assert [e.url for e in await endpoints("docker.io", config)] == [
        "https://mirror.example", "https://registry-1.docker.io"]
    assert [e.url for e in await endpoints("docker.io", config, push=True)] == [
        "https://registry-1.docker.io"]
    assert [(e.url, e.verify_tls) for e in await endpoints("10.1.0.9:5000", config)] == [
        ("https://10.1.0.9:5000", False), ("http://10.1.0.9:5000", False)]
    assert [(e.url, e.verify_tls) for e in await endpoints("quay.io", config)] == [
        ("https://quay.io", True)]


async def test_ping_open_registry_falls_back_to_http(open_registry: Registry) -> None:
    async with RegistryClient(open_registry.domain) as client:
        endpoint = await client.ping()
        assert endpoint.url == f"http://{open_registry.domain}"
        assert client.auth.challenges == []
    assert await login(open_registry.domain, ALICE) is not None  # open: any login passes


async def test_unreachable() -> None:
    with pytest.raises(Unreachable, match="not reachable"):
        async with RegistryClient(f"127.0.0.1:{free_port()}") as client:
            await client.ping()


async def test_basic_auth(basic_registry: Registry) -> None:
    name = unique()
    async with RegistryClient(basic_registry.domain) as anonymous:
        with pytest.raises(Unauthorized) as err:
            await manifests.get(anonymous, name, "latest")
        assert str(err.value) == "unauthorized: authentication required"
        assert err.value.status == 401 and err.value.code == "UNAUTHORIZED"
    async with RegistryClient(basic_registry.domain, credentials=WRONG) as wrong:
        with pytest.raises(Unauthorized):
            await manifests.get(wrong, name, "latest")
    async with RegistryClient(basic_registry.domain, credentials=ALICE, push=True) as alice:
        with pytest.raises(NotFound, match="manifest unknown|name unknown"):
            await manifests.get(alice, name, "latest")
        image = random_image(100)
        await push_image(alice, name, image, "v1")
        assert (await manifests.get(alice, name, "v1")).digest == image.digest
    assert (await login(basic_registry.domain, ALICE)).identity_token == ""
    with pytest.raises(Unauthorized, match="authentication required"):
        await login(basic_registry.domain, WRONG)
    with pytest.raises(Unauthorized):
        await login(basic_registry.domain, AuthConfig())


async def test_bearer_flows(token_registry: Registry, token_server: TokenServer) -> None:
    name = unique("private")
    async with RegistryClient(token_registry.domain) as anonymous:
        assert anonymous.auth.challenges == []
        await anonymous.ping()
        assert anonymous.auth.challenges[0].scheme == "bearer"
        with pytest.raises(Unauthorized, match="authentication required"):
            await manifests.get(anonymous, name, "latest")
        # anonymous pulls of public/ repositories get a token (and then a 404)
        with pytest.raises(NotFound):
            await manifests.get(anonymous, unique("public/x"), "latest")
    async with RegistryClient(token_registry.domain, credentials=ALICE, push=True) as alice:
        image = random_image(300, 500)
        pushed = await push_image(alice, name, image, "v1")
        before = token_server.fetches(repository_scope(name, "pull"))
        for _ in range(3):
            assert (await manifests.get(alice, name, "v1")).digest == pushed
        assert token_server.fetches(repository_scope(name, "pull")) - before == 1  # cached


async def test_bad_credentials_carry_the_token_servers_reason(
        token_registry: Registry) -> None:
    async with RegistryClient(token_registry.domain, credentials=WRONG) as wrong:
        with pytest.raises(Unauthorized) as err:
            await manifests.get(wrong, unique(), "latest")
    assert str(err.value) == "incorrect username or password"
    assert err.value.status == 401
    with pytest.raises(Unauthorized, match="incorrect username or password"):
        await login(token_registry.domain, WRONG)


async def test_token_expiry_and_refresh_on_401(token_registry: Registry,
                                               token_server: TokenServer) -> None:
    name = unique()
    scope = repository_scope(name, "pull")
    async with RegistryClient(token_registry.domain, credentials=ALICE, push=True) as alice:
        await push_image(alice, name, random_image(10), "v1")
        token_server.expires_in = 2
        try:
            await manifests.get(alice, name, "v1")
            first = token_server.fetches(scope)
            await trio.sleep(2.1)  # expires_in 2 -> the cached token is too old
            await manifests.get(alice, name, "v1")
            assert token_server.fetches(scope) == first + 1
        finally:
            token_server.expires_in = 300
        # a token the registry refuses is dropped and fetched again, once
        for cached in alice.auth._tokens.values():
            cached.value = cached.value[:-8] + "AAAAAAAA"
        await manifests.get(alice, name, "v1")
        assert token_server.fetches(scope) == first + 2


async def test_login_identity_token_and_registry_token(token_registry: Registry,
                                                       token_server: TokenServer) -> None:
    name = unique()
    result = await login(token_registry.domain, ALICE)
    assert result.identity_token == "idtoken-alice"
    async with RegistryClient(token_registry.domain, push=True,
                              credentials=AuthConfig(identitytoken=result.identity_token)
                              ) as client:
        await push_image(client, name, random_image(10), "v1")
    assert token_server.requests[-1][0] == "POST"  # the refresh_token grant
    with pytest.raises(Unauthorized, match="refresh token refused"):
        async with RegistryClient(token_registry.domain,
                                  credentials=AuthConfig(identitytoken="stolen")) as client:
            await manifests.get(client, name, "v1")
    # a registry token is sent as it is: no token server round trip
    async with RegistryClient(token_registry.domain, credentials=ALICE) as alice:
        await manifests.get(alice, name, "v1")
        token = next(iter(alice.auth._tokens.values())).value
    before = len(token_server.requests)
    async with RegistryClient(token_registry.domain,
                              credentials=AuthConfig(registrytoken=token)) as client:
        assert (await manifests.get(client, name, "v1")).media_type == manifests.SCHEMA2
    assert len(token_server.requests) == before
