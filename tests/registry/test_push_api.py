"""``POST /images/{name}/push`` over the API: progress as dockerd writes it, what lands in
the registry, deterministic re-pushes ("Layer already exists", same digest), mounts across
repositories, RepoDigests and events, and the errors that come before the stream."""

from __future__ import annotations

import json
import time

import httpx
import trio

from svc.registry import manifests
from svc.registry.client import RegistryClient
from svc.wire.authconfig import AuthConfig, encode_auth_header
from tests.conftest import http_client
from tests.registry.conftest import PASSWORD, USER, unique
from tests.registry.pushing import load_image, messages, random_layers, short, statuses
from tests.registry.registryd import Registry, free_port
from tests.support import images as timg

ALICE = encode_auth_header(AuthConfig(username=USER, password=PASSWORD))


async def _push(client: httpx.AsyncClient, name: str, tag: str | None = "latest",
                auth: str = "e30=") -> httpx.Response:
    params = {"tag": tag} if tag is not None else {}
    return await client.post(f"/v1.23/images/{name}/push", params=params,
                             headers={"X-Registry-Auth": auth}, timeout=120)


async def test_push_progress_manifest_and_repush(client: httpx.AsyncClient,
                                                 open_registry: Registry) -> None:
    layers = random_layers(300_000, 1_000, 2_000_000)
    diff_ids = [timg.diff_id(x) for x in layers]
    repo = f"{open_registry.domain}/{unique('push')}"
    image_id = await load_image(client, layers, f"{repo}:latest")
    since = time.time()
    r = await _push(client, repo)
    assert r.status_code == 200, r.text
    msgs = messages(r.text)
    assert msgs[0] == {"status": f"The push refers to a repository [{repo}]"}
    for d in diff_ids:
        seen = statuses(msgs, short(d))
        assert seen[0] == "Preparing" and seen[-1] == "Pushed", seen
        assert "Pushing" in seen
    pushing = [m for m in msgs if m.get("status") == "Pushing"]
    assert all(m["progressDetail"]["total"] > 0 and m["progress"].startswith("[")
               for m in pushing)
    assert msgs[-1]["aux"]["Tag"] == "latest"
    digest, size = msgs[-1]["aux"]["Digest"], msgs[-1]["aux"]["Size"]
    assert msgs[-2] == {"status": f"latest: digest: {digest} size: {size}"}
    assert not any("error" in m for m in msgs)

    async with RegistryClient(open_registry.domain) as reg:
        got = await manifests.get(reg, repo.split("/", 1)[1], "latest")
    assert got.digest == digest and got.media_type == manifests.SCHEMA2 and len(got.raw) == size
    doc = json.loads(got.raw)
    assert doc["config"]["digest"] == image_id
    assert len(doc["layers"]) == 3

    inspect = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert inspect["RepoDigests"] == [f"{repo}@{digest}"]
    events = (await client.get("/v1.23/events", params={
        "since": str(since), "until": str(time.time() + 1),
        "filters": json.dumps({"type": ["image"]})})).text
    pushed = [json.loads(x) for x in events.splitlines() if '"push"' in x]
    assert [(e["id"], e["Actor"]["Attributes"]["name"]) for e in pushed] == [
        (f"{repo}:latest", repo)]

    again = messages((await _push(client, repo)).text)
    for d in diff_ids:
        assert statuses(again, short(d)) == ["Preparing", "Layer already exists"]
    assert again[-1]["aux"] == {"Tag": "latest", "Digest": digest, "Size": size}


async def test_push_mounts_into_a_second_repository(client: httpx.AsyncClient,
                                                    token_registry: Registry) -> None:
    layers = random_layers(200_000, 50_000)
    first = unique("first")
    second = unique("second")
    await load_image(client, layers, f"{token_registry.domain}/{first}:v1",
                     f"{token_registry.domain}/{second}:v1")
    r = await _push(client, f"{token_registry.domain}/{first}", "v1", ALICE)
    assert r.status_code == 200 and '"error"' not in r.text, r.text
    digest = messages(r.text)[-1]["aux"]["Digest"]
    r = await _push(client, f"{token_registry.domain}/{second}", "v1", ALICE)
    msgs = messages(r.text)
    for layer in layers:
        assert statuses(msgs, short(timg.diff_id(layer))) == [
            "Preparing", f"Mounted from {first}"], msgs
    assert msgs[-1]["aux"]["Digest"] == digest  # the same manifest, byte for byte


async def test_push_every_tag(client: httpx.AsyncClient, open_registry: Registry) -> None:
    repo = f"{open_registry.domain}/{unique('tags')}"
    await load_image(client, random_layers(1000), f"{repo}:a")
    await load_image(client, random_layers(1000), f"{repo}:b")
    r = await _push(client, repo, None)
    aux = [m["aux"]["Tag"] for m in messages(r.text) if "aux" in m]
    assert aux == ["a", "b"], r.text


async def test_errors_before_the_stream(client: httpx.AsyncClient, basic_registry: Registry,
                                        token_registry: Registry) -> None:
    repo = f"{basic_registry.domain}/{unique('err')}"
    r = await _push(client, repo)
    assert r.status_code == 404
    assert r.text == f"tag does not exist: {repo}:latest\n"
    r = await _push(client, repo, None)
    assert r.status_code == 404
    assert r.text == f"An image does not exist locally with the tag: {repo}\n"
    await load_image(client, random_layers(1000), f"{repo}:latest")
    # refused credentials end the stream with the registry's reason, as with dockerd
    refused = {"error": "unauthorized: authentication required",
               "errorDetail": {"message": "unauthorized: authentication required"}}
    r = await _push(client, repo)
    assert r.status_code == 200
    assert messages(r.text) == [
        {"status": f"The push refers to a repository [{repo}]"}, refused]
    r = await _push(client, repo, auth=encode_auth_header(AuthConfig(username=USER,
                                                                     password="nope")))
    assert messages(r.text)[-1] == refused
    tok = f"{token_registry.domain}/{unique('err')}"
    await load_image(client, random_layers(1000), f"{tok}:latest")
    r = await _push(client, tok)  # anonymous: the token grants nothing
    assert messages(r.text)[-1] == refused
    gone = f"127.0.0.1:{free_port()}/x"
    await load_image(client, random_layers(1000), f"{gone}:latest")
    with trio.fail_after(15):
        r = await _push(client, gone)
    assert r.status_code == 503 and "not reachable" in r.text
    r = await _push(client, "UPPER")
    assert r.status_code == 400
    r = await _push(client, f"{repo}@sha256:{'a' * 64}", None)
    assert r.status_code == 400 and "digest" in r.text


async def test_the_map_survives_a_sigkill(spawn, open_registry: Registry) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    repo = f"{open_registry.domain}/{unique('durable')}"
    layers = random_layers(100_000)
    async with http_client(d.sock) as c:
        await load_image(c, layers, f"{repo}:latest")
        first = messages((await _push(c, repo)).text)
    assert statuses(first, short(timg.diff_id(layers[0])))[-1] == "Pushed"
    await trio.to_thread.run_sync(d.kill)
    await trio.to_thread.run_sync(d.start)
    async with http_client(d.sock) as c:
        again = messages((await _push(c, repo)).text)
    # the blob's digest was remembered: one HEAD, no compression, no upload
    assert statuses(again, short(timg.diff_id(layers[0]))) == ["Preparing",
                                                               "Layer already exists"]
    assert again[-1]["aux"] == first[-1]["aux"]


async def test_layers_beyond_the_concurrency_wait(client: httpx.AsyncClient,
                                                  open_registry: Registry) -> None:
    layers = random_layers(*[200_000] * 6)
    repo = f"{open_registry.domain}/{unique('wait')}"
    await load_image(client, layers, f"{repo}:latest")
    msgs = messages((await _push(client, repo)).text)
    seen = [statuses(msgs, short(timg.diff_id(x))) for x in layers]
    assert all(s[0] == "Preparing" and s[-1] == "Pushed" for s in seen), seen
    assert sum("Waiting" in s for s in seen) == 3, seen  # three at a time
    # every layer is announced (top first, as dockerd lists them) before any is pushed
    order = [m["id"] for m in msgs if m.get("status") == "Preparing"]
    assert order == [short(timg.diff_id(x)) for x in reversed(layers)]
    first_other = next(i for i, m in enumerate(msgs) if m.get("id") and
                       m.get("status") != "Preparing")
    assert first_other == 1 + len(layers)


async def test_compressed_again_gives_the_same_digests(client: httpx.AsyncClient,
                                                       open_registry: Registry,
                                                       basic_registry: Registry) -> None:
    layers = random_layers(400_000, 7_000)
    one = f"{open_registry.domain}/{unique('same')}"
    two = f"{basic_registry.domain}/{unique('same')}"
    await load_image(client, layers, f"{one}:latest", f"{two}:latest")
    first = messages((await _push(client, one)).text)
    second = messages((await _push(client, two, auth=ALICE)).text)
    for layer in layers:  # another registry: compressed and uploaded again...
        assert statuses(second, short(timg.diff_id(layer)))[-1] == "Pushed"
    assert second[-1]["aux"] == first[-1]["aux"]  # ...into the same blobs and manifest
