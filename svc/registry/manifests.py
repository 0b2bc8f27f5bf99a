"""Manifests: fetch by tag or digest, parse every format, pick a platform, push.

Formats (``media type`` -> model): Docker schema 2 and OCI image manifests ->
:class:`ImageManifest`; Docker manifest lists and OCI indexes -> :class:`ManifestIndex`;
schema 1, signed or not -> :class:`~svc.registry.schema1.Schema1Manifest`. A fetch asks for
all of them, newest first, and reads the type from ``Content-Type`` (from the document itself
when a server sends a generic one).

A manifest fetched by digest is checked against it; one fetched by tag is checked against
the ``Docker-Content-Digest`` the registry sent, if any. Either mismatch raises
:class:`DigestMismatch`. Lists pick ``linux/amd64`` by default and never an attestation
(``unknown/unknown``). Cancellation leaves nothing behind: a manifest is read whole into
memory (at most 4 MiB) before anything is returned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from svc.registry import digests, schema1
from svc.registry.auth import repository_scope
from svc.registry.client import RegistryClient
from svc.registry.errors import DigestMismatch, InvalidManifest
from svc.registry.schema1 import Schema1Manifest

SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
SCHEMA1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"
SCHEMA1 = "application/vnd.docker.distribution.manifest.v1+json"
ACCEPT = ", ".join((OCI_INDEX, MANIFEST_LIST, OCI_MANIFEST, SCHEMA2, SCHEMA1_SIGNED, SCHEMA1))
IMAGE_TYPES = (SCHEMA2, OCI_MANIFEST)
INDEX_TYPES = (MANIFEST_LIST, OCI_INDEX)
SCHEMA1_TYPES = (SCHEMA1_SIGNED, SCHEMA1)
ATTESTATION = "attestation-manifest"


class Platform(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    architecture: str = ""
    os: str = ""
    variant: str = ""
    os_version: str = Field("", alias="os.version")
    os_features: list[str] = Field(default_factory=list, alias="os.features")


class Descriptor(BaseModel):
    """A content descriptor: a blob or manifest named by digest, with its size."""

    model_config = ConfigDict(populate_by_name=True)
    media_type: str = Field("", alias="mediaType")
    digest: str
    size: int = Field(ge=0)
    urls: list[str] = Field(default_factory=list)
    annotations: dict[str, str] = Field(default_factory=dict)
    platform: Platform | None = None


class ImageManifest(BaseModel):
    """Docker schema 2 or OCI image manifest: a config blob and layers, base first."""

    model_config = ConfigDict(populate_by_name=True)
    schema_version: int = Field(alias="schemaVersion")
    media_type: str = Field("", alias="mediaType")
    config: Descriptor
    layers: list[Descriptor]


class ManifestIndex(BaseModel):
    """Docker manifest list or OCI index: one manifest per platform."""

    model_config = ConfigDict(populate_by_name=True)
    schema_version: int = Field(alias="schemaVersion")
    media_type: str = Field("", alias="mediaType")
    manifests: list[Descriptor]


@dataclass(frozen=True)
class Manifest:
    """A manifest as served: its media type, digest, exact bytes and parsed document."""

    media_type: str
    digest: str
    raw: bytes
    doc: ImageManifest | ManifestIndex | Schema1Manifest


def media_type_of(raw: bytes, content_type: str = "") -> str:
    """The manifest's media type: ``Content-Type`` if it is a manifest type, else guessed
    from the document (``mediaType``, then its shape)."""
    declared = content_type.split(";", 1)[0].strip().lower()
    if declared in IMAGE_TYPES + INDEX_TYPES + SCHEMA1_TYPES:
        return declared
    try:
        doc = json.loads(raw)
    except ValueError:
        raise InvalidManifest("manifest is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidManifest("manifest is not a JSON object")
    inner = doc.get("mediaType")
    if isinstance(inner, str) and inner in IMAGE_TYPES + INDEX_TYPES + SCHEMA1_TYPES:
        return inner
    if doc.get("schemaVersion") == 1:
        return SCHEMA1_SIGNED if doc.get("signatures") else SCHEMA1
    if "manifests" in doc:
        return OCI_INDEX
    if "config" in doc:
        return OCI_MANIFEST
    raise InvalidManifest(f"unsupported manifest media type {declared or 'none'}")


def parse(raw: bytes, content_type: str = "") -> Manifest:
    """Parse manifest bytes of any supported type.

    Raises:
        InvalidManifest: unknown type, not the type's shape, or a malformed digest in it.
    """
    media_type = media_type_of(raw, content_type)
    if media_type in SCHEMA1_TYPES:
        return Manifest(media_type, schema1.digest(raw), raw, schema1.parse(raw))
    model: type[ImageManifest] | type[ManifestIndex]
    model = ImageManifest if media_type in IMAGE_TYPES else ManifestIndex
    try:
        doc = model.model_validate_json(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise InvalidManifest(f"invalid {media_type} manifest: {where}: {error['msg']}") \
            from None
    if doc.schema_version != 2:
        raise InvalidManifest(f"unsupported schemaVersion {doc.schema_version}")
    for descriptor in doc.manifests if isinstance(doc, ManifestIndex) \
            else [doc.config, *doc.layers]:
        digests.check(descriptor.digest)
    return Manifest(media_type, digests.of(raw), raw, doc)


def select(index: ManifestIndex, os: str = "linux", architecture: str = "amd64",
           variant: str = "") -> Descriptor:
    """The entry of a list or index for a platform.

    Attestations (``unknown/unknown`` or annotated ``attestation-manifest``) never match.
    With ``variant`` an exact variant wins over an entry without one; entries without a
    platform are taken only when nothing else matches (the config's os/arch tells later).

    Raises:
        InvalidManifest: no entry matches (the message names the platform).
    """
    exact: list[Descriptor] = []
    loose: list[Descriptor] = []
    unlabeled: list[Descriptor] = []
    for entry in index.manifests:
        if entry.annotations.get("vnd.docker.reference.type") == ATTESTATION:
            continue
        p = entry.platform
        if p is None:
            unlabeled.append(entry)
        elif p.os == os and p.architecture == architecture:
            (exact if p.variant == variant else loose).append(entry)
    found = exact or loose or unlabeled
    if not found:
        wanted = "/".join(x for x in (os, architecture, variant) if x)
        raise InvalidManifest(f"no matching manifest for {wanted} in the manifest list "
                              "entries")
    return found[0]


async def get(client: RegistryClient, name: str, reference: str) -> Manifest:
    """``GET /v2/<name>/manifests/<tag or digest>``, parsed and verified.

    Raises:
        NotFound: no such repository or manifest.
        DigestMismatch: the bytes do not match the digest asked for or announced.
        InvalidManifest: see :func:`parse`.
    """
    if digests.is_digest(reference):
        digests.check(reference)
    answer = await client.request("GET", f"/v2/{name}/manifests/{reference}",
                                  scopes=(repository_scope(name, "pull"),),
                                  headers={"Accept": ACCEPT},
                                  what=f"manifest {name}:{reference}")
    manifest = parse(answer.body, answer.headers.get("content-type", ""))
    announced = answer.headers.get("docker-content-digest", "")
    expected = reference if digests.is_digest(reference) else announced
    if expected and not _matches(manifest, expected):
        raise DigestMismatch(f"manifest {name}@{expected}: content has digest "
                             f"{manifest.digest}", code="DIGEST_INVALID")
    return manifest


def _matches(manifest: Manifest, expected: str) -> bool:
    """True when ``expected`` (in its own algorithm) names the bytes or, for schema 1, the
    canonical payload registries hash instead."""
    try:
        if digests.matches(expected, manifest.raw):
            return True
    except InvalidManifest:  # an announced digest that is not one
        return False
    return manifest.media_type in SCHEMA1_TYPES and \
        digests.matches(expected, schema1.canonical_payload(manifest.raw))


async def resolve(client: RegistryClient, name: str, reference: str, *, os: str = "linux",
                  architecture: str = "amd64", variant: str = "") -> tuple[Manifest, Manifest]:
    """The manifest ``reference`` names and the image manifest to pull for the platform.

    For a list or index the second is the selected entry, fetched by its digest; otherwise
    both are the same. The first one's digest is the one a pull reports.
    """
    top = await get(client, name, reference)
    if not isinstance(top.doc, ManifestIndex):
        return top, top
    entry = select(top.doc, os, architecture, variant)
    image = await get(client, name, entry.digest)
    if isinstance(image.doc, ManifestIndex):
        raise InvalidManifest(f"manifest {entry.digest} in the list is itself a list")
    return top, image


async def put(client: RegistryClient, name: str, reference: str, raw: bytes,
              media_type: str) -> str:
    """``PUT`` a manifest under a tag (or its digest) and return its digest.

    Every blob it names must already be in the repository (``MANIFEST_BLOB_UNKNOWN``
    otherwise).

    Raises:
        RegistryError: the registry refused it (its code and message).
        DigestMismatch: the registry reports a digest other than the bytes' own.
    """
    answer = await client.request("PUT", f"/v2/{name}/manifests/{reference}", ok=(201, 200),
                                  scopes=(repository_scope(name, "pull", "push"),),
                                  headers={"Content-Type": media_type}, content=raw,
                                  what=f"manifest {name}:{reference}")
    ours = schema1.digest(raw) if media_type in SCHEMA1_TYPES else digests.of(raw)
    theirs = answer.headers.get("docker-content-digest", ours)
    if theirs != ours:
        raise DigestMismatch(f"manifest {name}:{reference}: the registry stored {theirs}, "
                             f"the bytes are {ours}")
    return ours


async def list_tags(client: RegistryClient, name: str, *, page: int = 1000,
                    max_pages: int = 100) -> list[str]:
    """Every tag of a repository (``GET /v2/<name>/tags/list``, following ``Link`` pages).

    Raises:
        NotFound: no such repository.
    """
    found: list[str] = []
    path: str | None = f"/v2/{name}/tags/list?n={page}"
    for _ in range(max_pages):
        if path is None:
            break
        answer = await client.request("GET", path, scopes=(repository_scope(name, "pull"),),
                                      what=f"tags of {name}")
        try:
            tags = json.loads(answer.body).get("tags") or []
        except (ValueError, AttributeError):
            raise InvalidManifest(f"tags of {name}: the answer is not a tag list") from None
        found += [t for t in tags if isinstance(t, str)]
        path = _next_page(answer.headers.get("link", ""))
    return found


def _next_page(link: str) -> str | None:
    """The target of a ``Link: </v2/...>; rel="next"`` header, if any."""
    for part in link.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") and target.strip().startswith("</v2/"):
            return target.strip()[1:-1]
    return None
