"""Pulls of hand-made images PUT into the test registry: a signed schema 1 manifest (the
config and id engines derive from it), a Docker manifest list and an OCI index (linux/amd64
chosen, the list's digest recorded), an unsigned schema 1 manifest from a fake registry, and
a registry serving a corrupted blob (refused in the stream; nothing left in the store)."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path

import httpx
import pytest
import trio

from svc.registry import manifests, schema1, uploads
from svc.registry.client import RegistryClient
from tests.registry.conftest import unique
from tests.registry.content import digest, index_document, push_image, random_image
from tests.registry.netfakes import Answer, FakeRegistry
from tests.registry.pulling import assert_pulled, gz_layers, layer_statuses, pull, short, tar_image
from tests.registry.pushing import messages
from tests.registry.registryd import Registry
from tests.registry.schema1docs import history_docs, signed
from tests.support import images as timg
from tests.support.daemon import Daemon


async def test_schema1_signed(client: httpx.AsyncClient, open_registry: Registry) -> None:
    path = unique("s1")
    base, top = gz_layers(40_000, 70_000)
    raw = signed(path, "old", [digest(top), digest(base)], history_docs(2))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        for blob in (base, top):
            await uploads.push(reg, path, digest(blob), len(blob), blob)
        pushed = await manifests.put(reg, path, "old", raw, manifests.SCHEMA1_SIGNED)
    repo = f"{open_registry.domain}/{path}"
    r = await pull(client, repo, "old")
    msgs = messages(r.text)
    for blob in (base, top):
        assert_pulled(layer_statuses(msgs, short(digest(blob))))
    assert msgs[-2:] == [{"status": f"Digest: {pushed}"},
                         {"status": f"Status: Downloaded newer image for {repo}:old"}]
    diff_ids = [timg.diff_id(x) for x in (base, top)]
    config = schema1.image_config(schema1.layers(schema1.parse(raw)), diff_ids)
    got = (await client.get(f"/v1.23/images/{repo}:old/json")).json()
    assert got["Id"] == "sha256:" + hashlib.sha256(config).hexdigest()
    assert got["RootFS"]["Layers"] == diff_ids
    assert got["Config"]["Cmd"] is None or isinstance(got["Config"]["Cmd"], list)
    assert got["RepoDigests"] == [f"{repo}@{pushed}"]
    history = (await client.get(f"/v1.23/images/{repo}:old/history")).json()
    assert [h["CreatedBy"] for h in history] == ["/bin/sh -c step 0", "/bin/sh -c step 1"]
    # the second pull knows the blobs' layers (from the first): nothing is downloaded
    again = messages((await pull(client, repo, "old")).text)
    assert [m["status"] for m in again if m.get("id") and len(m["id"]) == 12] == \
        ["Already exists"] * 2
    assert again[-1] == {"status": f"Status: Image is up to date for {repo}:old"}


@pytest.mark.parametrize("oci", [False, True])
async def test_list_and_index(client: httpx.AsyncClient, open_registry: Registry,
                              oci: bool) -> None:
    path = unique("multi")
    amd = tar_image(gz_layers(30_000, 20_000), oci=oci)
    arm = random_image(50, arch="arm64", oci=oci)
    attestation = random_image(5, arch="unknown", os="unknown", oci=oci)
    async with RegistryClient(open_registry.domain, push=True) as reg:
        for image in (arm, amd, attestation):
            await push_image(reg, path, image, None)
        raw = index_document([attestation.descriptor(architecture="unknown", os="unknown"),
                              arm.descriptor(architecture="arm64", os="linux"),
                              amd.descriptor(architecture="amd64", os="linux")], oci=oci)
        listed = await manifests.put(reg, path, "v1", raw,
                                     manifests.OCI_INDEX if oci else manifests.MANIFEST_LIST)
    repo = f"{open_registry.domain}/{path}"
    msgs = messages((await pull(client, repo, "v1")).text)
    for blob in amd.layers:
        assert_pulled(layer_statuses(msgs, short(digest(blob))))
    assert msgs[-2] == {"status": f"Digest: {listed}"}
    got = (await client.get(f"/v1.23/images/{repo}:v1/json")).json()
    assert got["Id"] == digest(amd.config)
    assert got["Architecture"] == "amd64"
    assert got["RepoDigests"] == [f"{repo}@{listed}"]


async def test_a_corrupted_blob_is_refused(client: httpx.AsyncClient, daemon: Daemon,
                                           open_registry: Registry) -> None:
    path = unique("bad")
    image = tar_image(gz_layers(100_000, 200_000))
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    stored = open_registry.blob_path(digest(image.layers[1]))
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    store = Path(daemon.root) / "overlay2"
    layers_before = sorted(p.name for p in store.iterdir())
    repo = f"{open_registry.domain}/{path}"
    r = await pull(client, repo)
    assert r.status_code == 200
    last = messages(r.text)[-1]
    assert "error" in last and digest(image.layers[1]) in last["error"], r.text
    assert "digest" in last["error"]
    assert (await client.get(f"/v1.23/images/{repo}:latest/json")).status_code == 404
    assert (await client.get(f"/v1.23/images/{digest(image.config)}/json")).status_code == 404
    # nothing added: a sibling layer's unpack, stopped by the failure, removes its temp
    # directory in its worker thread, which may finish just after the answer
    deadline = time.monotonic() + 10
    while not set(p.name for p in store.iterdir()) <= set(layers_before):
        assert time.monotonic() < deadline, sorted(p.name for p in store.iterdir())
        await trio.sleep(0.05)
    bad = digest(image.layers[1]).partition(":")[2]
    assert not (Path(daemon.root) / "downloads" / f"sha256-{bad}.partial").exists()


async def test_wrong_diff_id_is_refused(client: httpx.AsyncClient,
                                        open_registry: Registry) -> None:
    """A config naming other diffIDs than the layers hold: verified before any commit."""
    path = unique("lie")
    image = tar_image(gz_layers(10_000))
    config = json.loads(image.config)
    config["rootfs"]["diff_ids"] = [digest(b"something else")]
    image.config = json.dumps(config).encode()
    doc = json.loads(image.manifest)
    doc["config"].update(size=len(image.config), digest=digest(image.config))
    image.manifest = json.dumps(doc).encode()
    async with RegistryClient(open_registry.domain, push=True) as reg:
        await push_image(reg, path, image, "latest")
    r = await pull(client, f"{open_registry.domain}/{path}")
    last = messages(r.text)[-1]
    assert "filesystem layer verification failed" in last.get("error", ""), r.text
    assert gzip.decompress(image.layers[0])  # the blob itself was fine


async def test_schema1_unsigned_from_a_registry_that_serves_it(
        client: httpx.AsyncClient) -> None:
    """distribution refuses unsigned schema 1 pushes, older registries served them."""
    base, top = gz_layers(20_000, 30_000)
    doc = {"schemaVersion": 1, "name": "x", "tag": "latest", "architecture": "amd64",
           "fsLayers": [{"blobSum": digest(top)}, {"blobSum": digest(base)}],
           "history": [{"v1Compatibility": h} for h in history_docs(2)]}
    raw = json.dumps(doc, indent=3).encode()
    blobs = {digest(x): x for x in (base, top)}

    async def route(method: str, target: str, headers: dict[str, str]) -> Answer:
        if target.endswith("/manifests/latest"):
            return 200, {"Content-Type": manifests.SCHEMA1, "Content-Length": str(len(raw))}, raw
        blob = blobs[target.rpartition("/")[2]]
        return 200, {"Content-Length": str(len(blob))}, blob

    async with trio.open_nursery() as nursery:
        fake = await FakeRegistry(route).start(nursery)
        repo = f"{fake.domain}/{unique('unsigned')}"
        r = await pull(client, repo)
        nursery.cancel_scope.cancel()
    msgs = messages(r.text)
    assert msgs[-2:] == [{"status": f"Digest: {digest(raw)}"},
                         {"status": f"Status: Downloaded newer image for {repo}:latest"}], msgs
    config = schema1.image_config(schema1.layers(schema1.parse(raw)),
                                  [timg.diff_id(x) for x in (base, top)])
    got = (await client.get(f"/v1.23/images/{repo}:latest/json")).json()
    assert got["Id"] == "sha256:" + hashlib.sha256(config).hexdigest()
