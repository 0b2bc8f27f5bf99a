"""``POST /images/create?fromImage=`` over the API: an image pushed by svc, removed and pulled
back (progress as dockerd writes it, id, RepoTags, RepoDigests, the event, "Already exists"
and "Image is up to date" the second time), every tag of a repository, the reference rules,
the errors that come before the stream, and three blobs at a time with the others
``Waiting``."""

from __future__ import annotations

import json
import time

import httpx
import trio

from svc.registry.client import RegistryClient
from svc.wire.authconfig import AuthConfig, encode_auth_header
from tests.conftest import http_client
from tests.registry.conftest import PASSWORD, USER, unique
from tests.registry.content import digest, push_image
from tests.registry.netfakes import CountingProxy
from tests.registry.pulling import (
    assert_pulled,
    blob_digests,
    gz_layers,
    layer_statuses,
    pull,
    short,
    tar_image,
)
from tests.registry.pushing import load_image, messages, random_layers
from tests.registry.registryd import Registry, free_port

ALICE = encode_auth_header(AuthConfig(username=USER, password=PASSWORD))


async def _push_and_remove(client: httpx.AsyncClient, repo: str, layers: list[bytes],
                           tag: str = "latest", auth: str = "e30=") -> tuple[str, str]:
    """Load, push and remove an image; returns (image id, manifest digest)."""
    image_id = await load_image(client, layers, f"{repo}:{tag}")
    r = await client.post(f"/v1.23/images/{repo}/push", params={"tag": tag},
                          headers={"X-Registry-Auth": auth}, timeout=120)
    pushed = messages(r.text)
    assert "aux" in pushed[-1], r.text
    r = await client.delete(f"/v1.23/images/{image_id}", params={"force": "1"})
    assert r.status_code == 200, r.text
    return image_id, pushed[-1]["aux"]["Digest"]


async def test_pushed_removed_and_pulled_back(client: httpx.AsyncClient,
                                              open_registry: Registry) -> None:
    path = unique("back")
    repo = f"{open_registry.domain}/{path}"
    image_id, digest = await _push_and_remove(client, repo,
                                              random_layers(300_000, 1_000, 3_000_000))
    blobs = await blob_digests(open_registry.domain, path)
    since = time.time()
    r = await pull(client, repo)
    assert r.status_code == 200, r.text
    msgs = messages(r.text)
    assert msgs[0] == {"status": f"Pulling from {path}", "id": "latest"}
    for b in blobs:
        assert_pulled(layer_statuses(msgs, short(b)))
    downloading = [m for m in msgs if m.get("status") == "Downloading"]
    assert downloading and all(m["progressDetail"]["total"] > 0 and
                               m["progress"].startswith("[") for m in downloading)
    assert all(m.get("progressDetail") == {} for m in msgs
               if m.get("status") in ("Pulling fs layer", "Pull complete"))
    complete = [m["id"] for m in msgs if m.get("status") == "Pull complete"]
    assert complete == [short(b) for b in blobs]  # committed base first
    assert msgs[-2:] == [{"status": f"Digest: {digest}"},
                         {"status": f"Status: Downloaded newer image for {repo}:latest"}]
    inspect = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert inspect["Id"] == image_id
    assert inspect["RepoTags"] == [f"{repo}:latest"]
    assert inspect["RepoDigests"] == [f"{repo}@{digest}"]
    events = (await client.get("/v1.23/events", params={
        "since": str(since), "until": str(time.time() + 1),
        "filters": json.dumps({"type": ["image"]})})).text
    kinds = [(e["status"], e["id"]) for e in map(json.loads, events.splitlines())]
    assert kinds == [("pull", f"{repo}:latest")]

    again = messages((await pull(client, repo)).text)
    for b in blobs:
        assert layer_statuses(again, short(b)) == ["Already exists"]
    assert again[-1] == {"status": f"Status: Image is up to date for {repo}:latest"}

    by_digest = messages((await pull(client, repo, digest)).text)
    assert by_digest[0] == {"status": f"Pulling from {path}", "id": digest}
    assert by_digest[-1] == {"status": f"Status: Image is up to date for {repo}@{digest}"}


async def test_every_tag_and_digest_forms(client: httpx.AsyncClient,
                                          basic_registry: Registry) -> None:
    path = unique("tags")
    repo = f"{basic_registry.domain}/{path}"
    a, _ = await _push_and_remove(client, repo, random_layers(20_000), "a", ALICE)
    b, digest_b = await _push_and_remove(client, repo, random_layers(30_000), "b", ALICE)
    since = time.time()
    msgs = messages((await pull(client, repo + ":", None, auth=ALICE)).text)  # as pull -a
    assert [m["id"] for m in msgs if str(m.get("status")).startswith("Pulling from")] == \
        ["a", "b"]
    assert msgs[-1] == {"status": f"Status: Downloaded newer image for {repo}"}
    events = (await client.get("/v1.23/events", params={
        "since": str(since), "until": str(time.time() + 1),
        "filters": json.dumps({"type": ["image"]})})).text
    assert [(e["status"], e["id"]) for e in map(json.loads, events.splitlines())] == \
        [("pull", repo)]  # one per request, the name as given
    for tag, image_id in (("a", a), ("b", b)):
        got = (await client.get(f"/v1.23/images/{repo}:{tag}/json")).json()
        assert got["Id"] == image_id
    await client.delete(f"/v1.23/images/{b}", params={"force": "1"})
    msgs = messages((await pull(client, f"{repo}@{digest_b}", None, auth=ALICE)).text)
    assert msgs[-1] == {"status": f"Status: Downloaded newer image for {repo}@{digest_b}"}
    got = (await client.get(f"/v1.23/images/{b}/json")).json()
    assert got["RepoTags"] == [] and got["RepoDigests"] == [f"{repo}@{digest_b}"]


async def test_errors_before_the_stream(client: httpx.AsyncClient, open_registry: Registry,
                                        basic_registry: Registry) -> None:
    repo = f"{open_registry.domain}/{unique('none')}"
    r = await pull(client, repo)
    assert r.status_code == 404
    assert r.text.startswith(f"manifest for {repo}:latest not found: ") and \
        "manifest unknown" in r.text, r.text
    await _push_and_remove(client, repo, random_layers(1000))
    r = await pull(client, repo, "nope")
    assert r.status_code == 404 and "manifest unknown" in r.text, r.text
    r = await pull(client, f"{repo}:latest", "latest")
    assert r.status_code == 400
    assert r.text == "cannot use the repo:tag form and the tag parameter together\n"
    r = await pull(client, "UPPER/case")
    assert r.status_code == 400 and "lowercase" in r.text
    r = await pull(client, repo, "sha256:abc")
    assert r.status_code == 400
    with trio.fail_after(15):
        r = await pull(client, f"127.0.0.1:{free_port()}/x")
    assert r.status_code == 503 and "not reachable" in r.text
    # refused credentials: a 401 before the stream, as dockerd answers (the CLI then asks
    # for a login, the SDKs raise APIError 401)
    for auth in (None, "e30=", "%%%", encode_auth_header(AuthConfig(username=USER,
                                                                    password="nope"))):
        r = await pull(client, f"{basic_registry.domain}/{unique('x')}", auth=auth)
        assert r.status_code == 401, r.text
        assert r.text == "unauthorized: authentication required\n"
        r = await pull(client, f"{basic_registry.domain}/{unique('x')}", None, auth=auth)
        assert r.status_code == 401, r.text


async def test_pulled_layers_are_known_to_push(spawn, open_registry: Registry,  # type: ignore[no-untyped-def]
                                               client: httpx.AsyncClient) -> None:
    """A daemon that only pulled an image pushes it back as "Layer already exists"."""
    repo = f"{open_registry.domain}/{unique('known')}"
    await _push_and_remove(client, repo, random_layers(50_000, 60_000))
    d = spawn()
    async with http_client(d.sock) as c:
        assert (await pull(c, repo)).status_code == 200
        r = await c.post(f"/v1.23/images/{repo}/push", params={"tag": "latest"},
                         headers={"X-Registry-Auth": "e30="}, timeout=60)
    pushed = messages(r.text)
    assert [m["status"] for m in pushed if m.get("id") and m["status"] != "Preparing"] == \
        ["Layer already exists"] * 2, r.text


async def test_three_blobs_at_a_time_the_others_wait(client: httpx.AsyncClient,
                                                     open_registry: Registry) -> None:
    path = unique("wait")
    image = tar_image(gz_layers(*[600_000] * 5))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    async with trio.open_nursery() as nursery:
        proxy = await CountingProxy(open_registry.port, delay=0.01).start(nursery)
        r = await pull(client, f"127.0.0.1:{proxy.port}/{path}")
        nursery.cancel_scope.cancel()
    msgs = messages(r.text)
    seen = [layer_statuses(msgs, short(digest(x))) for x in image.layers]
    assert all(s[-1] == "Pull complete" for s in seen), seen
    assert sum("Waiting" in s for s in seen) == 2, seen
    # announced first, in the manifest's order, as dockerd does
    announced = [m["id"] for m in msgs if m.get("status") == "Pulling fs layer"]
    assert announced == [short(digest(x)) for x in image.layers]
    assert msgs.index(next(m for m in msgs if m.get("status") == "Pulling fs layer")) == 1
