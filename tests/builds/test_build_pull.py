"""FROM pulls what is missing (or everything with ``pull=1``) through the registry
adapter, with the credentials ``X-Registry-Config`` carries; the pull's progress is in the
build's stream; a pull that fails ends the build with a clear error."""

from __future__ import annotations

import base64
import json

import httpx

from svc.wire.authconfig import AuthConfig, encode_auth_header
from tests.builds.conftest import BASE, build, built_id, context_tar, stream_text
from tests.registry.conftest import PASSWORD, USER, basic_registry, open_registry, unique
from tests.registry.pushing import messages
from tests.registry.registryd import Registry

__all__ = ["basic_registry", "open_registry"]  # the registry fixtures, used here


async def _publish(api: httpx.AsyncClient, repo: str, auth: str = "e30=") -> None:
    """Push the base image as ``repo:v1``, then drop that name here."""
    r = await api.post(f"/v1.23/images/{BASE}/tag", params={"repo": repo, "tag": "v1"})
    assert r.status_code == 201, r.text
    r = await api.post(f"/v1.23/images/{repo}/push", params={"tag": "v1"},
                       headers={"X-Registry-Auth": auth})
    assert "aux" in messages(r.text)[-1], r.text
    r = await api.delete(f"/v1.23/images/{repo}:v1")
    assert r.status_code == 200, r.text


async def test_from_pulls_a_missing_image(api: httpx.AsyncClient,
                                          open_registry: Registry) -> None:
    repo = f"{open_registry.domain}/{unique('base')}"
    await _publish(api, repo)
    files = {"Dockerfile": f"FROM {repo}:v1\nRUN echo on the pulled base\n"}
    msgs = await build(api, files, nocache="1")
    assert {"status": f"Pulling from {repo.split('/', 1)[1]}", "id": "v1"} in msgs
    assert "on the pulled base" in stream_text(msgs)
    built_id(msgs)
    again = await build(api, files, pull="1", nocache="1")  # pull=1: asks the registry again
    assert any(m.get("status", "").startswith("Status: Image is up to date") for m in again)
    missing = await build(api, {"Dockerfile": f"FROM {repo}:nope\n"})
    assert missing[-1]["error"].startswith(f"FROM {repo}:nope: pulling the image failed: ")
    assert "not found" in missing[-1]["error"]


async def test_from_pulls_with_registry_config(api: httpx.AsyncClient,
                                               basic_registry: Registry) -> None:
    repo = f"{basic_registry.domain}/{unique('private')}"
    alice = AuthConfig(username=USER, password=PASSWORD)
    await _publish(api, repo, auth=encode_auth_header(alice))
    body = context_tar({"Dockerfile": f"FROM {repo}:v1\nLABEL private=1\n"})
    r = await api.post("/build", content=body)
    refused = messages(r.text)[-1]
    assert refused["error"].startswith(f"FROM {repo}:v1: pulling the image failed")
    config = {basic_registry.domain: {"username": USER, "password": PASSWORD}}
    header = base64.urlsafe_b64encode(json.dumps(config).encode()).decode()
    r = await api.post("/build", content=body, headers={"X-Registry-Config": header})
    built_id(messages(r.text))
