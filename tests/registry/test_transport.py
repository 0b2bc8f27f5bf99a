"""TLS per registry from ``certs.d`` (CA and client certificates), and Hub mirrors."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from svc.registry import manifests
from svc.registry.client import RegistryClient
from svc.registry.errors import RegistryError, Unreachable
from svc.registry.transport import Endpoint, RegistryConfig, describe, make_http, tls_context
from tests.registry.conftest import unique
from tests.registry.content import push_image, random_image
from tests.registry.registryd import Registry


@pytest.fixture(scope="module")
def tls_setup() -> Iterator[tuple[Registry, trustme.CA, Path]]:
    """A registry serving TLS only, demanding a client certificate signed by ``ca``."""
    ca = trustme.CA()
    work = Path(tempfile.mkdtemp(prefix="svc-tls-"))
    try:
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(work / "server.pem"))
        ca.cert_pem.write_to_path(str(work / "ca.pem"))
        registry = Registry(http_extra=(f"  tls:\n    certificate: {work / 'server.pem'}\n"
                                        f"    key: {work / 'server.pem'}\n"
                                        f"    clientcas:\n      - {work / 'ca.pem'}"))
        try:
            yield registry.start(), ca, work
        finally:
            registry.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def certs_dir(root: Path, domain: str, ca: trustme.CA, *, with_ca: bool = True,
              with_client: bool = True) -> RegistryConfig:
    host_dir = root / "certs.d" / domain
    host_dir.mkdir(parents=True)
    if with_ca:
        ca.cert_pem.write_to_path(str(host_dir / "ca.crt"))
    if with_client:
        client = ca.issue_cert("svc-client")
        client.cert_chain_pems[0].write_to_path(str(host_dir / "client.cert"))
        client.private_key_pem.write_to_path(str(host_dir / "client.key"))
    return RegistryConfig(certs_dir=root)


async def test_client_certificate_from_certs_d(tls_setup: tuple[Registry, trustme.CA, Path],
                                               tmp_path: Path) -> None:
    registry, ca, _ = tls_setup
    config = certs_dir(tmp_path, registry.domain, ca)
    async with RegistryClient(registry.domain, config=config, push=True) as client:
        assert (await client.ping()).url == f"https://{registry.domain}"
        image = random_image(100)
        await push_image(client, unique(), image, "v1")
    with pytest.raises(Unreachable, match="not reachable"):  # no client certificate
        async with RegistryClient(registry.domain) as client:
            await client.ping()


async def test_verified_tls_uses_the_ca_of_certs_d(
        tls_setup: tuple[Registry, trustme.CA, Path], tmp_path: Path) -> None:
    """Loopback registries are never verified (as with the engines), so the verified path is
    driven directly: the CA from certs.d is trusted in addition to the system's."""
    registry, ca, _ = tls_setup
    endpoint = Endpoint(f"https://{registry.domain}", verify_tls=True, host=registry.domain)
    good = certs_dir(tmp_path / "good", registry.domain, ca)
    async with await make_http(endpoint, good) as http:
        assert (await http.get(endpoint.url + "/v2/")).status_code == 200
    client_only = certs_dir(tmp_path / "bad", registry.domain, ca, with_ca=False)
    async with await make_http(endpoint, client_only) as http:
        with pytest.raises(httpx.ConnectError) as err:
            await http.get(endpoint.url + "/v2/")
        assert "CERTIFICATE_VERIFY_FAILED" in describe(err.value)


def test_client_certificate_without_key(tmp_path: Path) -> None:
    ca = trustme.CA()
    config = certs_dir(tmp_path, "reg:5000", ca)
    assert tls_context("reg:5000", config).get_ca_certs()
    (tmp_path / "certs.d/reg:5000/client.key").unlink()
    with pytest.raises(RegistryError, match="missing key for client certificate"):
        tls_context("reg:5000", config)
    assert tls_context("other:5000", config) is not None  # no directory: system CAs only


async def test_hub_pulls_go_to_a_mirror(open_registry: Registry) -> None:
    """Hub names are pulled from the first mirror that answers (Hub itself is not asked)."""
    name = "library/" + unique()
    image = random_image(10)
    async with RegistryClient(open_registry.domain, push=True) as client:
        await push_image(client, name, image, "v1")
    config = RegistryConfig(registry_mirrors=(f"http://{open_registry.domain}",))
    async with RegistryClient("docker.io", config=config) as client:
        assert (await manifests.get(client, name, "v1")).digest == image.digest
        assert client.endpoint is not None and client.endpoint.mirror
