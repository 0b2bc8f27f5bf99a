"""Manifests: push and pull every format through distribution 2.8, platform selection,
digest checks, schema 1."""

from __future__ import annotations

import hashlib
import json

import pytest

from svc.registry import blobs, manifests, schema1, uploads
from svc.registry.client import RegistryClient
from svc.registry.errors import InvalidManifest, NotFound, RegistryError
from tests.registry.conftest import unique
from tests.registry.content import digest, index_document, push_image, random_image
from tests.registry.registryd import Registry
from tests.registry.schema1docs import history_docs, payload_of, signed, v1_id


@pytest.mark.parametrize("oci", [False, True])
async def test_push_and_pull_image_manifest(open_registry: Registry, oci: bool) -> None:
    name = unique()
    image = random_image(1000, 2000, oci=oci)
    async with RegistryClient(open_registry.domain, push=True) as client:
        pushed = await push_image(client, name, image, "v1")
        assert pushed == image.digest
        for ref in ("v1", image.digest):
            top, chosen = await manifests.resolve(client, name, ref)
            assert top is chosen and top.digest == image.digest and top.raw == image.manifest
            assert top.media_type == image.media_type
            doc = top.doc
            assert isinstance(doc, manifests.ImageManifest)
            assert [layer.digest for layer in doc.layers] == [digest(x) for x in image.layers]
            assert await blobs.read(client, name, doc.config.digest) == image.config
        with pytest.raises(NotFound, match="manifest unknown"):
            await manifests.get(client, name, "nope")
        with pytest.raises(NotFound):
            await manifests.get(client, name, "sha256:" + "0" * 64)


async def test_manifest_needs_its_blobs(open_registry: Registry) -> None:
    image = random_image(10)
    async with RegistryClient(open_registry.domain, push=True) as client:
        with pytest.raises(RegistryError) as err:
            await manifests.put(client, unique(), "v1", image.manifest, image.media_type)
    assert err.value.code == "MANIFEST_BLOB_UNKNOWN" and err.value.status == 400


@pytest.mark.parametrize("oci", [False, True])
async def test_list_and_index_select_linux_amd64(open_registry: Registry, oci: bool) -> None:
    name = unique()
    arm = random_image(50, arch="arm64", oci=oci)
    amd = random_image(60, oci=oci)
    attestation = random_image(5, arch="unknown", os="unknown", oci=oci)
    async with RegistryClient(open_registry.domain, push=True) as client:
        for image in (arm, amd, attestation):
            await push_image(client, name, image, None)
        entries = [attestation.descriptor(architecture="unknown", os="unknown"),
                   arm.descriptor(architecture="arm64", os="linux", variant="v8"),
                   amd.descriptor(architecture="amd64", os="linux")]
        raw = index_document(entries, oci=oci)
        media = manifests.OCI_INDEX if oci else manifests.MANIFEST_LIST
        listed = await manifests.put(client, name, "multi", raw, media)
        top, chosen = await manifests.resolve(client, name, "multi")
        assert top.digest == listed == digest(raw) and top.media_type == media
        assert chosen.digest == amd.digest
        _, arm_chosen = await manifests.resolve(client, name, listed, architecture="arm64",
                                                variant="v8")
        assert arm_chosen.digest == arm.digest
        with pytest.raises(InvalidManifest, match="no matching manifest for linux/s390x"):
            await manifests.resolve(client, name, "multi", architecture="s390x")


def test_select_skips_annotated_attestations_and_prefers_labels() -> None:
    def entry(n: int, **kw: object) -> dict[str, object]:
        return {"mediaType": manifests.OCI_MANIFEST, "size": 1,
                "digest": "sha256:" + str(n) * 64, **kw}

    index = manifests.ManifestIndex.model_validate_json(index_document([
        entry(1, platform={"architecture": "amd64", "os": "linux"},
              annotations={"vnd.docker.reference.type": "attestation-manifest"}),
        entry(2),
        entry(3, platform={"architecture": "amd64", "os": "linux", "variant": "v3"}),
    ], oci=True))
    assert manifests.select(index).digest.endswith("3" * 64)
    only_unlabeled = manifests.ManifestIndex.model_validate_json(
        index_document([entry(2)], oci=True))
    assert manifests.select(only_unlabeled).digest.endswith("2" * 64)


def test_media_type_guessing_and_bad_documents() -> None:
    image = random_image(1)
    assert manifests.media_type_of(image.manifest, "application/json") == manifests.SCHEMA2
    bare = json.dumps({"schemaVersion": 2, "config": {"digest": digest(b""), "size": 0},
                       "layers": []}).encode()
    assert manifests.parse(bare, "text/plain").media_type == manifests.OCI_MANIFEST
    bad = json.dumps({"schemaVersion": 2, "mediaType": manifests.SCHEMA2,
                      "config": {"digest": "sha256:../../etc", "size": 1},
                      "layers": []}).encode()
    with pytest.raises(InvalidManifest, match="invalid digest"):
        manifests.parse(bad)
    with pytest.raises(InvalidManifest):
        manifests.parse(b"[1]")
    with pytest.raises(InvalidManifest):
        manifests.parse(b'{"schemaVersion": 2}', manifests.SCHEMA2)


# -- schema 1 -----------------------------------------------------------------------------

def test_schema1_layers_history_and_config() -> None:
    blobs_ = [digest(b"top"), digest(b"top"), digest(b"mid"), digest(b"base")]
    docs = history_docs(3)
    # the newest entry repeated, as old pushes did: the duplicate is dropped
    docs.insert(0, docs[0])
    mid = json.loads(docs[2])
    mid["throwaway"] = True
    mid["author"] = "Ann <ann@example.com>"
    docs[2] = json.dumps(mid)
    raw = signed("lib/x", "v1", blobs_, docs)
    assert schema1.canonical_payload(raw) == payload_of(raw)
    assert schema1.digest(raw) == digest(payload_of(raw))
    parsed = manifests.parse(raw, manifests.SCHEMA1_SIGNED)
    assert isinstance(parsed.doc, schema1.Schema1Manifest)
    layers = schema1.layers(parsed.doc)
    assert [x.v1["id"] for x in layers] == [v1_id(2), v1_id(1), v1_id(0)]  # base first
    assert [x.blob_sum for x in layers] == [digest(b"base"), digest(b"mid"), digest(b"top")]
    assert [x.throwaway for x in layers] == [False, True, False]
    assert schema1.history(layers)[1] == {
        "created": "2016-06-02T10:00:00.5Z", "author": "Ann <ann@example.com>",
        "created_by": "/bin/sh -c step 1", "empty_layer": True}
    diff_ids = [digest(b"d0"), digest(b"d2")]
    config = schema1.image_config(layers, diff_ids)
    doc = json.loads(config)
    assert set(doc) == {"created", "container_config", "history", "rootfs"}
    assert doc["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    assert config.startswith(b'{"container_config":{"Cmd":["/bin/sh","-c","step 0"]},'
                             b'"created":"2016-06-01T10:00:00.5Z","history":[')
    assert b"\\u003cann@example.com\\u003e" in config  # Go escapes HTML characters
    with pytest.raises(InvalidManifest):
        schema1.image_config(layers, diff_ids[:1])


def test_schema1_config_keeps_raw_spelling() -> None:
    v1 = ('{ "id" : "' + v1_id(0) + '", "b" : 1.50, "a" : "caf\\u00e9 <&>", '
          '"c" : [ 1 , {"x" : null} ] , "Size": 12, "throwaway": false, "a2": "x" }')
    raw = signed("x", "y", [digest(b"z")], [v1])
    layers = schema1.layers(schema1.parse(raw))
    config = schema1.image_config(layers, [digest(b"d")])
    assert config.startswith(b'{"a":"caf\\u00e9 \\u003c\\u0026\\u003e","a2":"x","b":1.50,'
                             b'"c":[1,{"x":null}],"history":[{"created":"0001-01-01T00:00:00Z"}]'
                             b',"rootfs":{"type":"layers","diff_ids":["sha256:')


@pytest.mark.parametrize("change,message", [
    (lambda d: d.reverse(), "Invalid parent ID in the base layer"),
    (lambda d: d.__setitem__(0, d[2]), "appears multiple times"),
    (lambda d: d.__setitem__(1, json.dumps({"id": v1_id(1)})), "Invalid parent ID"),
    (lambda d: d.__setitem__(1, json.dumps({"id": "short"})), "invalid v1 id"),
    (lambda d: d.__setitem__(1, "[]"), "not a JSON object"),
])
def test_schema1_refuses_broken_chains(change: object, message: str) -> None:
    docs = history_docs(3)
    change(docs)  # type: ignore[operator]
    raw = signed("x", "y", [digest(b"1"), digest(b"2"), digest(b"3")], docs)
    with pytest.raises(InvalidManifest, match=message):
        schema1.layers(schema1.parse(raw))


def test_schema1_signature_tampering() -> None:
    raw = signed("x", "y", [digest(b"1")], history_docs(1))
    doc = json.loads(raw)
    doc["signatures"][0]["protected"] = "e30"  # {} : no formatLength
    with pytest.raises(InvalidManifest, match="signature"):
        schema1.canonical_payload(json.dumps(doc).encode())
    unsigned = payload_of(raw)
    assert schema1.canonical_payload(unsigned) == unsigned


async def test_schema1_push_and_pull(open_registry: Registry) -> None:
    """distribution 2.8 takes signed schema 1 pushes with compatibility.schema1.enabled."""
    name = unique()
    layer_blobs = [b"layer-top", b"layer-base"]
    raw = signed(name, "old", [digest(x) for x in layer_blobs], history_docs(2))
    async with RegistryClient(open_registry.domain, push=True) as client:
        for blob in layer_blobs:
            await uploads.push(client, name, digest(blob), len(blob), blob)
        pushed = await manifests.put(client, name, "old", raw, manifests.SCHEMA1_SIGNED)
        assert pushed == digest(payload_of(raw))
        got = await manifests.get(client, name, "old")
        assert got.media_type == manifests.SCHEMA1_SIGNED and got.digest == pushed
        assert isinstance(got.doc, schema1.Schema1Manifest)
        assert (await manifests.get(client, name, pushed)).digest == pushed
        layers = schema1.layers(got.doc)
        assert [x.blob_sum for x in layers] == [digest(b"layer-base"), digest(b"layer-top")]
        config = schema1.image_config(layers, [digest(b"d1"), digest(b"d2")])
        assert hashlib.sha256(config).hexdigest()  # an image id can be made
