"""How a pull fails, as dockerd 1.11 answers: refused credentials are a 401 before the
stream (the CLI asks for a login, the SDK raises APIError 401); what goes wrong once the
manifest is in hand (no linux/amd64 in a list, a registry's 5xx) is the stream's last line,
never a 500; ``scratch`` is a reserved name."""

from __future__ import annotations

import json
import subprocess
import tempfile

import httpx
import trio

from svc.registry import manifests
from tests.conftest import docker_cli, run_sdk
from tests.registry.conftest import unique
from tests.registry.content import digest
from tests.registry.netfakes import Answer, FakeRegistry
from tests.registry.pulling import gz_layers, pull, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry
from tests.support.daemon import Daemon

SDK7 = """
import sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
try:
    c.images.pull(sys.argv[2], tag="latest")
except docker.errors.APIError as e:
    print(e.response.status_code, e.explanation)
"""


async def test_refused_credentials_are_a_401_for_the_clients(daemon: Daemon,
                                                             basic_registry: Registry) -> None:
    repo = f"{basic_registry.domain}/{unique('refused')}"
    out = await trio.to_thread.run_sync(lambda: run_sdk("sdk7", SDK7, daemon.url, repo))
    assert out.strip() == "401 unauthorized: authentication required", out
    with tempfile.TemporaryDirectory() as cfg:
        shown = await trio.to_thread.run_sync(_cli_pull, daemon.url, repo, cfg)
    assert "Login prior to pull" in shown, shown


def _cli_pull(url: str, repo: str, cfg: str) -> str:
    """What ``docker pull`` shows; it may sit at its login prompt, so it is stopped."""
    try:
        done = docker_cli(url, "pull", repo, timeout=8, extra_env={"DOCKER_CONFIG": cfg})
    except subprocess.TimeoutExpired as exc:
        return _text(exc.stdout) + _text(exc.stderr)
    assert done.returncode != 0
    return done.stdout + done.stderr


def _text(data: bytes | str | None) -> str:
    return data.decode() if isinstance(data, bytes) else data or ""


def _list_without_amd64() -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": manifests.MANIFEST_LIST,
                       "manifests": [{"mediaType": manifests.SCHEMA2, "size": 10,
                                      "digest": "sha256:" + "a" * 64,
                                      "platform": {"os": "linux",
                                                   "architecture": "arm64"}}]}).encode()


async def test_failures_after_the_manifest_are_in_the_stream(
        client: httpx.AsyncClient) -> None:
    listing = _list_without_amd64()

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        if target.endswith("/manifests/arm"):
            return 200, {"Content-Type": manifests.MANIFEST_LIST,
                         "Content-Length": str(len(listing))}, listing
        body = b'{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}'
        return 503, {"Content-Length": str(len(body))}, body

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        path = unique("fails")
        repo = f"{fake.domain}/{path}"
        arm = await pull(client, repo, "arm")
        busy = await pull(client, repo, "latest")
        every = await pull(client, repo, None)
        nursery.cancel_scope.cancel()
    assert arm.status_code == 200
    wanted = "no matching manifest for linux/amd64 in the manifest list entries"
    assert messages(arm.text) == [{"status": f"Pulling from {path}", "id": "arm"},
                                  {"error": wanted, "errorDetail": {"message": wanted}}]
    for r in (busy, every):
        assert r.status_code == 200
        assert "try later" in messages(r.text)[-1]["error"], r.text


async def test_reserved_name_and_trailing_colon(client: httpx.AsyncClient,
                                                open_registry: Registry) -> None:
    for name in ("scratch", "docker.io/library/scratch"):
        r = await pull(client, name)
        assert r.status_code == 400 and r.text == "'scratch' is a reserved name\n", r.text
    r = await pull(client, f"{open_registry.domain}/{unique('colon')}:", "latest")
    assert r.status_code == 404 and "manifest unknown" in r.text, r.text


async def test_every_tag_one_at_a_time_a_bad_one_ends_the_stream(
        client: httpx.AsyncClient) -> None:
    """Tag ``a`` is pulled before tag ``b``'s manifest is asked for; ``b`` (no linux/amd64)
    is reported in the stream; a digest that does not match is too."""
    image = tar_image(gz_layers(20_000))
    listing = _list_without_amd64()
    asked: list[str] = []

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        asked.append(target)
        if target.endswith("/tags/list") or "/tags/list?" in target:
            body = json.dumps({"name": "x", "tags": ["b", "a"]}).encode()
            return 200, {"Content-Type": "application/json",
                         "Content-Length": str(len(body))}, body
        if target.endswith(("/manifests/a", f"/manifests/{WRONG}")):
            return 200, {"Content-Type": manifests.SCHEMA2,
                         "Content-Length": str(len(image.manifest))}, image.manifest
        if target.endswith("/manifests/b"):
            return 200, {"Content-Type": manifests.MANIFEST_LIST,
                         "Content-Length": str(len(listing))}, listing
        for blob in (image.config, *image.layers):
            if target.endswith(f"/blobs/{digest(blob)}"):
                return 200, {"Content-Length": str(len(blob))}, blob
        return 404, {"Content-Length": "0"}, b""

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        path = unique("alltags")
        repo = f"{fake.domain}/{path}"
        every = await pull(client, repo, None)
        wrong = await pull(client, repo, WRONG)
        nursery.cancel_scope.cancel()
    msgs = messages(every.text)
    assert every.status_code == 200
    assert [m["id"] for m in msgs if str(m.get("status")).startswith("Pulling from")] == \
        ["a", "b"]
    assert msgs[-1]["error"].startswith("no matching manifest for linux/amd64"), every.text
    manifest_gets = [t for t in asked if "/manifests/" in t]
    blob_gets = [i for i, t in enumerate(asked) if "/blobs/" in t]
    assert asked.index(manifest_gets[1]) > max(blob_gets)  # b asked for after a's blobs
    got = (await client.get(f"/v1.23/images/{repo}:a/json")).json()
    assert got["Id"] == digest(image.config)
    w = messages(wrong.text)
    assert wrong.status_code == 200 and w[0] == {"status": f"Pulling from {path}",
                                                 "id": WRONG}
    assert "digest" in w[-1]["error"], wrong.text


WRONG = "sha256:" + "b" * 64
