"""``POST /images/create?fromImage=``: an image (or every tag of a repository) from a registry.

:meth:`Puller.prepare` does what can fail before the response starts: the reference is
normalised as engines do (``busybox`` = ``docker.io/library/busybox:latest``; a digest may
come in ``tag``; ``repo:tag`` together with ``tag`` is refused), the registry must answer, and
every manifest to pull is fetched and resolved (schema 1 signed or not, schema 2, manifest
list, OCI index and manifest; ``linux/amd64`` is picked from lists). An unknown repository or
tag is then an HTTP 404 carrying the registry's message. Refused credentials are reported in
the stream, as for a push.

:meth:`Puller.run` pulls each target and reports as dockerd does (``Pulling from <path>``,
the layers' lines of :mod:`pulllayers`, ``Digest: sha256:...``, ``Status: Downloaded newer
image for X`` or ``Status: Image is up to date for X``). An image is committed only after
every layer is in and verified: its id is the sha256 of its config bytes; the tag (or the
digest pulled by) and the manifest's digest become its RepoTags and RepoDigests; each layer's
diffID -> (blob digest, repository) is recorded so that a later push of it says "Layer already
exists"; a ``pull`` event is published.

Cancellation (the client went away): every transfer only this request waits for stops at
once; layers committed by this pull and not used by an image are deleted when their pins are
released; an image is committed and named in one shielded step, so it is either complete with
its names or absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import trio

from svc.engine.images.distribution import DistributionMap
from svc.engine.images.downloads import DownloadManager, Source
from svc.engine.images.pulllayers import LayerPlan, LayerPuller
from svc.engine.images.service import Image, ImageService
from svc.errors import InvalidParameter, NotFound
from svc.registry import blobs, digests, manifests, schema1
from svc.registry.client import RegistryClient
from svc.registry.errors import Denied, InvalidManifest, RegistryError, Unauthorized
from svc.registry.errors import NotFound as RegistryNotFound
from svc.registry.manifests import ImageManifest, Manifest
from svc.registry.schema1 import Schema1Manifest
from svc.registry.transport import RegistryConfig
from svc.wire import reference
from svc.wire.authconfig import AuthConfig

Message = dict[str, object]


def pull_reference(from_image: str, tag: str | None) -> reference.Reference:
    """What to pull: ``fromImage`` plus ``tag`` (a tag or a digest). Neither a tag nor a
    digest in the result means every tag of the repository.

    Raises:
        InvalidParameter: a malformed name, tag or digest, or a tag both in ``fromImage``
            and in ``tag``.
    """
    ref = reference.parse(from_image)
    if not tag:
        return ref
    if not ref.is_name_only:
        raise InvalidParameter("cannot use the repo:tag form and the tag parameter together")
    if ":" in tag:  # a digest, as the CLI sends it for name@sha256:...
        return reference.parse(f"{ref.name}@{tag}")
    return ref.with_tag(tag)


@dataclass(frozen=True)
class PullTarget:
    """One image to pull: its reference (tag or digest), the manifest the reference names
    and the image manifest chosen from it (the same one unless it is a list)."""

    ref: reference.Reference
    top: Manifest
    image: Manifest


@dataclass(frozen=True)
class PullJob:
    repository: reference.Reference
    targets: list[PullTarget]
    credentials: AuthConfig
    all_tags: bool
    refused: RegistryError | None = None


class Puller:
    """Pulls images into ``images`` through ``downloads``, recording blobs in
    ``distribution``."""

    def __init__(self, images: ImageService, distribution: DistributionMap,
                 downloads: DownloadManager, config: RegistryConfig) -> None:
        self.images = images
        self.distribution = distribution
        self.downloads = downloads
        self.config = config

    def client(self, domain: str, credentials: AuthConfig) -> RegistryClient:
        return RegistryClient(domain, config=self.config, credentials=credentials)

    async def prepare(self, from_image: str, tag: str | None,
                      credentials: AuthConfig) -> PullJob:
        """Normalise the reference and resolve every manifest to pull.

        Raises:
            InvalidParameter: see :func:`pull_reference`.
            NotFound: no such repository, tag or digest (the registry's message).
            Unreachable: the registry is not there.
        """
        ref = pull_reference(from_image, tag)
        repo = ref.name_only()
        all_tags = ref.is_name_only
        async with self.client(ref.domain, credentials) as client:
            try:
                names = [ref] if not all_tags else [
                    repo.with_tag(t)
                    for t in sorted(await manifests.list_tags(client, repo.path))]
                if not names:
                    raise NotFound(f"repository {repo.familiar_name} has no tags")
                targets = [await self.resolve(client, r) for r in names]
            except (Unauthorized, Denied) as exc:
                return PullJob(repo, [], credentials, all_tags, refused=exc)
            except RegistryNotFound as exc:
                shown = repo.familiar_name if all_tags else ref.familiar_string()
                what = "repository" if all_tags else "manifest for"
                raise NotFound(f"{what} {shown} not found: {exc}") from None
        return PullJob(repo, targets, credentials, all_tags)

    @staticmethod
    async def resolve(client: RegistryClient, ref: reference.Reference) -> PullTarget:
        top, image = await manifests.resolve(client, ref.path, ref.digest or ref.tag or "")
        return PullTarget(ref, top, image)

    async def run(self, job: PullJob, send: trio.MemorySendChannel[Message]) -> None:
        """Pull every target of ``job``, reporting into ``send``; errors propagate."""
        if job.refused is not None:
            raise job.refused
        updated = False
        async with self.client(job.repository.domain, job.credentials) as client:
            for target in job.targets:
                shown = target.ref.tag or target.ref.digest or ""
                await send.send({"status": f"Pulling from {job.repository.path}",
                                 "id": shown})
                changed = await self.pull(client, job, target, send)
                updated = updated or changed
                await send.send({"status": f"Digest: {target.top.digest}"})
                if not job.all_tags:
                    await send.send({"status": _final(updated, target.ref.familiar_string())})
        if job.all_tags:
            await send.send({"status": _final(updated, job.repository.familiar_name)})

    async def pull(self, client: RegistryClient, job: PullJob, target: PullTarget,
                   send: trio.MemorySendChannel[Message]) -> bool:
        """Pull one image and name it; True when a name now points to it that did not."""
        path = job.repository.path
        doc = target.image.doc
        source = Source(job.repository.domain, path, job.credentials)
        layers = LayerPuller(self.images, self.downloads, source, send)
        try:
            if isinstance(doc, Schema1Manifest):
                entries = schema1.layers(doc)
                plans = [LayerPlan(e.blob_sum, None, self.distribution.diff_id_of(e.blob_sum))
                         for e in entries if not e.throwaway]
                diff_ids, chain = await layers.run(plans)
                config = schema1.image_config(entries, diff_ids)
            elif isinstance(doc, ImageManifest):
                config = await blobs.read(client, path, doc.config.digest)
                plans = _plans(doc, config)
                diff_ids, chain = await layers.run(plans)
            else:
                raise InvalidManifest(f"manifest {target.image.digest} names no image")
            with trio.CancelScope(shield=True):  # all verified: commit and name it together
                async with self.images.lock:
                    image = await self.images.commit_image(config, chain)
                    changed = await self.name(image, target)
                await self.distribution.record_many(
                    [(d, p.digest, p.size) for d, p in zip(diff_ids, plans, strict=True)],
                    job.repository.name)
        finally:
            with trio.CancelScope(shield=True):
                await self.images.release_layers(layers.pinned)
        self.images.events.publish("image", "pull", target.ref.familiar_string(),
                                   {"name": target.ref.familiar_name})
        return changed

    async def name(self, image: Image, target: PullTarget) -> bool:
        """Point the tag (or the digest pulled by) and the manifest digest at ``image``;
        True when the reference pulled by pointed elsewhere (or nowhere) before.
        Called with ``images.lock`` held."""
        ref = target.ref
        by_digest = replace(ref, tag=None, digest=target.top.digest)
        pulled = by_digest if ref.digest is not None else ref
        known = self.images.repos.get(ref.familiar_name, {})
        changed = known.get(pulled.familiar_string()) != image.id
        for r in ([ref] if ref.digest is None else []) + [by_digest]:
            if known.get(r.familiar_string()) != image.id:
                await self.images.add_ref(image, r, force=True, event=False)
        return changed


def _plans(doc: ImageManifest, config: bytes) -> list[LayerPlan]:
    """The layers of a schema 2 / OCI manifest, each with the diffID its config names."""
    try:
        parsed = json.loads(config)
        diff_ids = parsed["rootfs"]["diff_ids"]
        if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InvalidManifest(f"image config {doc.config.digest} has no rootfs diff_ids") \
            from None
    if len(diff_ids) != len(doc.layers):
        raise InvalidManifest(f"image config {doc.config.digest} names {len(diff_ids)} "
                              f"layers, the manifest {len(doc.layers)}")
    for d in diff_ids:
        digests.check(d)
    return [LayerPlan(layer.digest, layer.size, d)
            for layer, d in zip(doc.layers, diff_ids, strict=True)]


def _final(updated: bool, shown: str) -> str:
    return f"Status: Downloaded newer image for {shown}" if updated \
        else f"Status: Image is up to date for {shown}"
