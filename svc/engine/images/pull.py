"""``POST /images/create?fromImage=``: an image (or every tag of a repository) from a registry.

:meth:`Puller.prepare` does what dockerd 1.11 did before its first byte: the reference is
normalised as engines do (``busybox`` = ``docker.io/library/busybox:latest``; a digest may
come in ``tag``; ``repo:tag`` together with ``tag`` is refused; a trailing ``:`` is dropped;
``scratch`` is reserved), the registry must answer, and the manifest (one reference) or the
tag list (every tag) is fetched. An unknown repository or tag is then an HTTP 404 carrying
the registry's message, refused credentials a 401 (the CLI asks for a login, the SDKs raise).
Anything else the registry does wrong (no ``linux/amd64`` in a list, a digest mismatch, a
5xx or 429) is reported in the stream, never as a 500.

:meth:`Puller.run` pulls each target and reports as dockerd does (``Pulling from <path>``,
the layers' lines of :mod:`pulllayers`, ``Digest: sha256:...``, ``Status: Downloaded newer
image for X`` or ``Status: Image is up to date for X``). An image is committed only after
every layer is in and verified: its id is the sha256 of its config bytes; the tag (or the
digest pulled by) and the manifest's digest become its RepoTags and RepoDigests; each layer's
diffID -> (blob digest, repository) is recorded so that a later push of it says "Layer already
exists". Every tag is resolved and pulled in turn while the stream runs; the first failure
ends it. One ``pull`` event per request names the image as given, as dockerd's.

Cancellation (the client went away): every transfer only this request waits for stops at
once; layers committed by this pull and not used by an image are deleted when their pins are
released; an image is committed and named in one shielded step, so it is either complete with
its names or absent.
"""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, replace

import trio

from svc.engine.images.distribution import DistributionMap
from svc.engine.images.downloads import DownloadManager, Source
from svc.engine.images.pulllayers import LayerPlan, LayerPuller
from svc.engine.images.service import Image, ImageService
from svc.errors import InvalidParameter, NotFound, unwrap
from svc.errors import Unauthorized as AuthRefused
from svc.models.imageconfig import ImageConfig
from svc.registry import blobs, digests, manifests, schema1
from svc.registry.client import RegistryClient
from svc.registry.errors import (
    Denied,
    DigestMismatch,
    InvalidManifest,
    RegistryError,
    Unauthorized,
    Unreachable,
)
from svc.registry.errors import NotFound as RegistryNotFound
from svc.registry.manifests import ImageManifest, Manifest, ManifestIndex
from svc.registry.schema1 import Schema1Manifest
from svc.registry.transport import Endpoint, RegistryConfig, endpoints
from svc.wire import reference
from svc.wire.authconfig import AuthConfig

Message = dict[str, object]

log = logging.getLogger("svc.images.pull")


def pull_reference(from_image: str, tag: str | None) -> reference.Reference:
    """What to pull: ``fromImage`` plus ``tag`` (a tag or a digest). Neither a tag nor a
    digest in the result means every tag of the repository.

    A trailing ``:`` on ``fromImage`` is dropped, as dockerd does (``pull -a`` sent one).

    Raises:
        InvalidParameter: a malformed name, tag or digest, a tag both in ``fromImage``
            and in ``tag``, or ``scratch`` (a reserved name).
    """
    ref = reference.parse(from_image.removesuffix(":"))
    if ref.familiar_name == "scratch":
        raise InvalidParameter("'scratch' is a reserved name")
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
    """A pull that may start streaming: the references to pull in order (one, or every
    tag), the manifest of the first one when fetched before the stream, or the failure to
    report in it. ``client`` is the request's registry client, shared by its downloads;
    :meth:`Puller.run` closes it."""

    repository: reference.Reference
    refs: list[reference.Reference]
    credentials: AuthConfig
    all_tags: bool
    client: RegistryClient
    first: Manifest | None = None
    failed: RegistryError | None = None
    requested: reference.Reference | None = None  # as asked (for another endpoint)
    fallbacks: tuple[Endpoint, ...] = ()  # Hub endpoints left after a mirror

    async def aclose(self) -> None:
        """Close the client (:meth:`Puller.run` does; this is for a stream never started)."""
        await self.client.aclose()

    @property
    def given(self) -> str:
        """The name as the request gave it (the ``pull`` event's id)."""
        return self.repository.familiar_name if self.all_tags \
            else self.refs[0].familiar_string()


class Puller:
    """Pulls images into ``images`` through ``downloads``, recording blobs in
    ``distribution``."""

    def __init__(self, images: ImageService, distribution: DistributionMap,
                 downloads: DownloadManager, config: RegistryConfig) -> None:
        self.images = images
        self.distribution = distribution
        self.downloads = downloads
        self.config = config

    def client(self, domain: str, credentials: AuthConfig,
               endpoint: Endpoint | None = None) -> RegistryClient:
        return RegistryClient(domain, config=self.config, credentials=credentials,
                              endpoint=endpoint)

    async def prepare(self, from_image: str, tag: str | None,
                      credentials: AuthConfig) -> PullJob:
        """Normalise the reference and fetch what dockerd fetches before it answers: the
        tag list (every tag), or the manifest (one reference).

        Raises:
            InvalidParameter: see :func:`pull_reference`.
            Unauthorized: the registry refused the credentials (dockerd answers 401, so the
                CLI asks for a login and the SDKs raise).
            NotFound: no such repository, tag or digest (the registry's message).
            Unreachable: the registry is not there.
        """
        ref = pull_reference(from_image, tag)
        choices = await endpoints(ref.domain, self.config)
        if not any(e.mirror for e in choices):
            return await self._prepare_on(ref, credentials, None)
        return await self._prepare_among(ref, credentials, tuple(choices))

    async def _prepare_among(self, ref: reference.Reference, credentials: AuthConfig,
                             choices: tuple[Endpoint, ...]) -> PullJob:
        """Prepare on the first of Hub's mirrors (then Hub) that has the image, as dockerd
        falls back from one endpoint to the next; the last one's failure."""
        for i, endpoint in enumerate(choices):
            rest = choices[i + 1:]
            try:
                job = await self._prepare_on(ref, credentials, endpoint)
            except (NotFound, AuthRefused, Unreachable) as exc:
                if not rest:
                    raise
                log.info("pull of %s from %s: %s; trying the next", ref, endpoint.url, exc)
                continue
            if job.failed is not None and rest:
                await job.client.aclose()
                continue
            return replace(job, fallbacks=rest)
        raise AssertionError("no endpoint")  # pragma: no cover: endpoints() names Hub

    async def _prepare_on(self, ref: reference.Reference, credentials: AuthConfig,
                          endpoint: Endpoint | None) -> PullJob:
        repo = ref.name_only()
        all_tags = ref.is_name_only
        client = self.client(ref.domain, credentials, endpoint)
        try:
            return replace(await self._fetch_first(client, ref, credentials), requested=ref)
        except (Unauthorized, Denied) as exc:
            await client.aclose()
            raise AuthRefused(str(exc)) from None
        except RegistryNotFound as exc:
            await client.aclose()
            shown = repo.familiar_name if all_tags else ref.familiar_string()
            what = "repository" if all_tags else "manifest for"
            raise NotFound(f"{what} {shown} not found: {exc}") from None
        except Unreachable:
            await client.aclose()
            raise
        except RegistryError as exc:  # 5xx, 429...: dockerd reports them, never a 500
            return PullJob(repo, [ref], credentials, all_tags, client, failed=exc,
                           requested=ref)
        except BaseException:
            await client.aclose()
            raise

    @staticmethod
    async def _fetch_first(client: RegistryClient, ref: reference.Reference,
                           credentials: AuthConfig) -> PullJob:
        """The tag list (every tag) or the manifest: what comes before the stream."""
        repo = ref.name_only()
        if ref.is_name_only:
            tags = sorted(await manifests.list_tags(client, repo.path))
            if not tags:
                raise NotFound(f"repository {repo.familiar_name} has no tags")
            return PullJob(repo, [repo.with_tag(t) for t in tags], credentials, True, client)
        try:
            first = await manifests.get(client, ref.path, ref.digest or ref.tag or "")
        except (InvalidManifest, DigestMismatch) as exc:
            return PullJob(repo, [ref], credentials, False, client, failed=exc)
        return PullJob(repo, [ref], credentials, False, client, first=first)

    async def run(self, job: PullJob, send: trio.MemorySendChannel[Message]) -> None:
        """Pull every reference of ``job`` in turn, reporting into ``send``; the first
        failure ends the pull and propagates (after a mirror's failure, the pull starts
        again on the next endpoint, as dockerd's). One ``pull`` event, for the name as
        given, when all went well."""
        while True:
            try:
                await self._run_on(job, send)
                return
            except Exception as exc:
                cause = unwrap(exc)
                if not job.fallbacks or job.requested is None or _no_space(cause):
                    raise
                log.info("pull of %s from a mirror failed: %s; trying the next endpoint",
                         job.requested, cause)
            job = await self._prepare_among(job.requested, job.credentials, job.fallbacks)

    async def _run_on(self, job: PullJob, send: trio.MemorySendChannel[Message]) -> None:
        async with job.client as client:
            updated = False
            for i, ref in enumerate(job.refs):
                shown = ref.tag or ref.digest or ""
                pulling: Message = {"status": f"Pulling from {job.repository.path}", "id": shown}
                if i == 0 and job.failed is not None:
                    if isinstance(job.failed, InvalidManifest | DigestMismatch):
                        await send.send(pulling)  # dockerd had the manifest by then
                    raise job.failed
                top = job.first if i == 0 and job.first is not None \
                    else await manifests.get(client, ref.path, ref.digest or ref.tag or "")
                await send.send(pulling)
                target = PullTarget(ref, top, await _image_manifest(client, ref.path, top))
                changed = await self.pull(client, job, target, send)
                await self.downloads.forget_owner(ref.familiar_string())  # pulled in full
                updated = updated or changed
                await send.send({"status": f"Digest: {top.digest}"})
                if not job.all_tags:
                    await send.send({"status": _final(updated, ref.familiar_string())})
        if job.all_tags:
            await send.send({"status": _final(updated, job.repository.familiar_name)})
        self.images.events.publish("image", "pull", job.given,
                                   {"name": job.repository.familiar_name})

    async def pull(self, client: RegistryClient, job: PullJob, target: PullTarget,
                   send: trio.MemorySendChannel[Message]) -> bool:
        """Pull one image and name it; True when a name now points to it that did not."""
        path = job.repository.path
        doc = target.image.doc
        source = Source(client, path, target.ref.familiar_string())
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


async def _image_manifest(client: RegistryClient, path: str, top: Manifest) -> Manifest:
    """The image manifest to pull: ``top`` itself, or the linux/amd64 entry of a list.

    Raises:
        InvalidManifest: the list has no entry for the platform, or names another list.
    """
    if not isinstance(top.doc, ManifestIndex):
        return top
    entry = manifests.select(top.doc)
    image = await manifests.get(client, path, entry.digest)
    if isinstance(image.doc, ManifestIndex):
        raise InvalidManifest(f"manifest {entry.digest} in the list is itself a list")
    return image


def _plans(doc: ImageManifest, config: bytes) -> list[LayerPlan]:
    """The layers of a schema 2 / OCI manifest, each with the diffID its config names."""
    try:
        parsed = ImageConfig.parse(config)
    except InvalidParameter as exc:
        raise InvalidManifest(f"image config {doc.config.digest}: {exc}") from None
    if parsed.rootfs is None or not parsed.rootfs.diff_ids:
        raise InvalidManifest(f"image config {doc.config.digest} has no rootfs diff_ids")
    diff_ids = parsed.diff_ids
    if len(diff_ids) != len(doc.layers):
        raise InvalidManifest(f"image config {doc.config.digest} names {len(diff_ids)} "
                              f"layers, the manifest {len(doc.layers)}")
    for d in diff_ids:
        digests.check(d)
    return [LayerPlan(layer.digest, layer.size, d)
            for layer, d in zip(doc.layers, diff_ids, strict=True)]


def _no_space(exc: BaseException) -> bool:
    """The disk is full: no other endpoint helps (dockerd does not fall back either)."""
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def _final(updated: bool, shown: str) -> str:
    return f"Status: Downloaded newer image for {shown}" if updated \
        else f"Status: Image is up to date for {shown}"
