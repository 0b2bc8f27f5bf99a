"""Pulls by the real clients: the docker CLI 28 (``docker pull`` after a login, and ``docker
run`` of an image that is only in the registry: create, 404, pull, create), the docker SDK
7.0.0 and docker-py 1.10.6 against the token registry, each as its users call it."""

from __future__ import annotations

import json

import httpx
import trio

from svc.wire.authconfig import AuthConfig, encode_auth_header
from tests.conftest import docker_cli, run_sdk
from tests.registry.conftest import PASSWORD, USER, unique
from tests.registry.pulling import pull
from tests.registry.pushing import load_image, messages, random_layers
from tests.registry.registryd import Registry
from tests.support import images as timg
from tests.support.daemon import Daemon


async def _push(client: httpx.AsyncClient, repo: str, tag: str, auth: str = "e30=") -> str:
    r = await client.post(f"/v1.23/images/{repo}/push", params={"tag": tag},
                          headers={"X-Registry-Auth": auth}, timeout=120)
    last = messages(r.text)[-1]
    assert "aux" in last, r.text
    return str(last["aux"]["Digest"])


async def _remove(client: httpx.AsyncClient, image_id: str) -> None:
    r = await client.delete(f"/v1.23/images/{image_id}", params={"force": "1"})
    assert r.status_code == 200, r.text


async def test_docker_run_of_an_image_only_in_the_registry(client: httpx.AsyncClient,
                                                           daemon: Daemon,
                                                           open_registry: Registry) -> None:
    repo = f"{open_registry.domain}/{unique('run')}"
    r = await client.post("/v1.23/images/create", params={"fromSrc": "-", "repo": repo,
                                                          "tag": "latest"},
                          content=timg.busybox_rootfs_tar())
    assert r.status_code == 200, r.text
    image_id = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()["Id"]
    await _push(client, repo, "latest")
    await _remove(client, image_id)

    def cli(*args: str) -> tuple[int, str, str]:
        out = docker_cli(daemon.url, *args, timeout=120)
        return out.returncode, out.stdout, out.stderr

    code, out, err = await trio.to_thread.run_sync(cli, "run", "--rm", repo, "echo",
                                                   "pulled-and-ran")
    assert code == 0, (out, err)
    assert f"Unable to find image '{repo}:latest' locally" in err
    assert "pulled-and-ran" in out
    assert f"Status: Downloaded newer image for {repo}:latest" in out + err
    assert (await client.get(f"/v1.23/images/{repo}:latest/json")).json()["Id"] == image_id
    code, out, err = await trio.to_thread.run_sync(cli, "pull", repo)
    assert code == 0, err
    assert f"Status: Image is up to date for {repo}:latest" in out
    assert out.splitlines()[-1] == f"{repo}:latest"  # the CLI prints the reference last


async def test_docker_cli_login_and_pull(client: httpx.AsyncClient, daemon: Daemon,
                                         basic_registry: Registry) -> None:
    repo = f"{basic_registry.domain}/{unique('cli')}"
    image_id = await load_image(client, random_layers(200_000, 3_000_000), f"{repo}:v2")
    digest = await _push(client, repo, "v2",
                         encode_auth_header(AuthConfig(username=USER, password=PASSWORD)))
    await _remove(client, image_id)

    def cli(*args: str) -> tuple[int, str, str]:
        out = docker_cli(daemon.url, *args, timeout=120)
        return out.returncode, out.stdout, out.stderr

    code, out, err = await trio.to_thread.run_sync(
        cli, "login", "-u", USER, "-p", PASSWORD, basic_registry.domain)
    assert code == 0, err
    code, out, err = await trio.to_thread.run_sync(cli, "pull", f"{repo}:v2")
    assert code == 0, (out, err)
    assert "v2: Pulling from " in out
    assert out.count(": Pull complete") == 2, out
    assert f"Digest: {digest}" in out
    assert f"Status: Downloaded newer image for {repo}:v2" in out
    code, out, err = await trio.to_thread.run_sync(cli, "pull", f"{repo}:nope")
    assert code != 0 and "not found" in err, (out, err)
    code, out, err = await trio.to_thread.run_sync(
        cli, "images", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}", repo)
    assert out.split() == [repo, "v2", digest]


SDK7 = """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
c.login(username=sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
        dockercfg_path="/nonexistent/config.json")
image = c.images.pull(sys.argv[5], tag="v1")
streamed = list(c.api.pull(sys.argv[5], tag="v1", stream=True, decode=True))
every = c.images.pull(sys.argv[5], all_tags=True)
print(json.dumps({"id": image.id, "tags": image.tags, "streamed": streamed,
                  "every": sorted(t for i in every for t in i.tags)}))
"""

DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
c.login(sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
        dockercfg_path="/nonexistent/config.json")
text = c.pull(sys.argv[5], tag="v1")
every = c.pull(sys.argv[5])
print(json.dumps({"text": text, "every": every,
                  "inspect": c.inspect_image(sys.argv[5] + ":v2")["Id"]}))
"""


async def test_sdk_pulls(client: httpx.AsyncClient, daemon: Daemon,
                         token_registry: Registry) -> None:
    alice = encode_auth_header(AuthConfig(username=USER, password=PASSWORD))
    repo7 = f"{token_registry.domain}/{unique('sdk7')}"
    repo1 = f"{token_registry.domain}/{unique('dockerpy')}"
    ids = {}
    for repo in (repo7, repo1):
        for tag in ("v1", "v2"):
            ids[repo, tag] = await load_image(client, random_layers(40_000, 5_000),
                                              f"{repo}:{tag}")
            await _push(client, repo, tag, alice)
            await _remove(client, ids[repo, tag])

    def sdk(name: str, script: str, repo: str) -> str:
        return run_sdk(name, script, daemon.url, token_registry.domain, USER, PASSWORD, repo,
                       timeout=120)

    out7 = json.loads(await trio.to_thread.run_sync(sdk, "sdk7", SDK7, repo7))
    assert out7["id"] == ids[repo7, "v1"] and out7["tags"] == [f"{repo7}:v1"]
    assert out7["streamed"][-1] == {"status": f"Status: Image is up to date for {repo7}:v1"}
    assert out7["every"] == [f"{repo7}:v1", f"{repo7}:v2"]

    out1 = json.loads(await trio.to_thread.run_sync(sdk, "dockerpy1", DOCKERPY1, repo1))
    first = messages(out1["text"])
    assert first[-1] == {"status": f"Status: Downloaded newer image for {repo1}:v1"}
    assert [m["id"] for m in messages(out1["every"])
            if str(m.get("status")).startswith("Pulling from")] == ["v1", "v2"]
    assert out1["inspect"] == ids[repo1, "v2"]
    # without credentials the token server grants nothing: a 401, as from dockerd
    r = await pull(client, repo7, "v1")
    assert r.status_code == 401 and "unauthorized: authentication required" in r.text
