"""``POST /images/{name}/push``: an image's layers, config and schema2 manifest to a registry.

:meth:`Pusher.prepare` does what can fail before the response starts: the name must be a
repository the image is tagged into (``tag`` given, or every tag of it), and the registry
must answer; those failures are HTTP errors (404, 503). Refused credentials come first in the
stream, as dockerd reports them: the CLI answers an HTTP 401 on a push by prompting for a
login, which never returns when its stdin is not a terminal.

:meth:`Pusher.run` then pushes tag after tag and reports progress as dockerd does (``The push
refers to a repository [...]``; per layer, by the first 12 hex of its diffID: ``Preparing``,
``Waiting``, ``Pushing`` with progress, then ``Pushed``, ``Layer already exists`` or
``Mounted from <repo>``; ``<tag>: digest: sha256:... size: N`` and an ``aux`` message); its
failures go into the stream.

Each layer is handled once per tag, at most ``CONCURRENCY`` at a time: a blob the
:class:`DistributionMap` knows for the layer and the repository has (``HEAD``) is not sent
again; one that another repository of the same registry holds is mounted; otherwise the layer
is compressed (deterministically, see ``compress``) while it is uploaded. Every blob a
registry confirmed is recorded in the map, the pushed manifest's digest becomes a RepoDigest
of the image, and an image ``push`` event is published.

Cancellation (the client went away): every transfer stops at once; the registry may keep an
unfinished upload session (it expires there), and nothing is recorded that a registry did not
confirm. The image's layers are pinned while they are read and released however it ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import trio

from svc.engine.images.compress import GzipSink, Piece, compress_layer
from svc.engine.images.distribution import DistributionMap
from svc.engine.images.service import Image, ImageService
from svc.errors import InvalidParameter, NotFound
from svc.registry import blobs, manifests, uploads
from svc.registry.auth import repository_scope
from svc.registry.client import RegistryClient
from svc.registry.transport import RegistryConfig
from svc.wire import reference
from svc.wire.authconfig import AuthConfig
from svc.wire.progress import bar

CONCURRENCY = 3  # layers in flight: compression is CPU-bound, more would only queue
PROGRESS_INTERVAL = 0.25  # seconds between two "Pushing" updates of one layer
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MAX_HEADS = 4  # known blobs of a layer checked in the target repository

Message = dict[str, object]


@dataclass(frozen=True)
class PushJob:
    """What to push: the repository (no tag) and (tag, image) pairs, in order."""

    repository: reference.Reference
    tags: list[tuple[str, Image]]
    credentials: AuthConfig


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int


class Pusher:
    """Pushes images of ``images`` to registries, remembering blobs in ``distribution``."""

    def __init__(self, images: ImageService, distribution: DistributionMap,
                 config: RegistryConfig) -> None:
        self.images = images
        self.distribution = distribution
        self.config = config

    def client(self, job: PushJob) -> RegistryClient:
        return RegistryClient(job.repository.domain, config=self.config,
                              credentials=job.credentials, push=True)

    async def prepare(self, name: str, tag: str | None, credentials: AuthConfig) -> PushJob:
        """Check the name, the tags and the registry's answer before the stream starts.

        Raises:
            InvalidParameter: a malformed name, a digest, or a tag both in the name and the
                parameter.
            NotFound: no such tag in the repository, or the repository has none.
            Unreachable: the registry is not there.
        """
        ref = self.images.tag_reference(name, tag or None, default_tag=False)
        if ref.digest is not None:
            raise InvalidParameter(f"cannot push a digest reference: {ref.familiar_string()}")
        repo = ref.name_only()
        if ref.tag is not None:
            _, image_id = self.images.lookup_ref(ref.familiar_string())
            if image_id is None:
                raise NotFound(f"tag does not exist: {ref.familiar_string()}")
            tags = [(ref.tag, self.images.images[image_id])]
        else:
            refs = self.images.repos.get(repo.familiar_name, {})
            tags = sorted((r.rpartition(":")[2], self.images.images[i])
                          for r, i in refs.items() if "@" not in r)
            if not tags:
                raise NotFound("An image does not exist locally with the tag: "
                               f"{repo.familiar_name}")
        job = PushJob(repo, tags, credentials)
        async with self.client(job) as client:
            await client.ping()
        return job

    async def run(self, job: PushJob, send: trio.MemorySendChannel[Message]) -> None:
        """Push every tag of ``job``, reporting into ``send``; errors propagate."""
        await send.send({"status": f"The push refers to a repository [{job.repository.name}]"})
        async with self.client(job) as client:
            # A push needs pull and push rights; a refusal ends the stream with the
            # registry's reason, as with dockerd (an HTTP 401 would make the CLI prompt for
            # a login, and wait for ever when its stdin is not a terminal).
            await client.request("GET", f"/v2/{job.repository.path}/tags/list", ok=(200, 404),
                                 scopes=(repository_scope(job.repository.path, "pull",
                                                          "push"),),
                                 what=f"repository {job.repository.path}")
            for tag, image in job.tags:
                chain = list(image.chain)
                self.images.pin(chain)
                try:
                    await _TagPush(self, client, job.repository, image, send).run(tag)
                finally:
                    with trio.CancelScope(shield=True):
                        await self.images.release_layers(chain)


class _TagPush:
    """One tag: layers (top first in the progress, as dockerd lists them), config, manifest."""

    def __init__(self, pusher: Pusher, client: RegistryClient, repo: reference.Reference,
                 image: Image, send: trio.MemorySendChannel[Message]) -> None:
        self.p = pusher
        self.client = client
        self.repo = repo
        self.image = image
        self.send = send
        self.diff_ids: list[str] = image.config.diff_ids
        self.limiter = trio.CapacityLimiter(CONCURRENCY)
        self.blobs: dict[str, Blob] = {}

    async def status(self, diff_id: str, text: str) -> None:
        await self.send.send({"status": text, "progressDetail": {}, "id": _short(diff_id)})

    async def run(self, tag: str) -> None:
        order: list[tuple[str, str]] = []  # (diff_id, chain_id), top first, each once
        for diff_id, chain_id in reversed(list(zip(self.diff_ids, self.image.chain,
                                                   strict=True))):
            if diff_id not in {d for d, _ in order}:
                order.append((diff_id, chain_id))
        for diff_id, _ in order:
            await self.status(diff_id, "Preparing")
        async with trio.open_nursery() as nursery:
            for diff_id, chain_id in order:
                nursery.start_soon(self.layer, diff_id, chain_id)
        config = await trio.to_thread.run_sync(self.p.images.config_bytes, self.image.id)
        config_blob = Blob(self.image.id, len(config))
        if await blobs.exists(self.client, self.repo.path, config_blob.digest) is None:
            await uploads.push(self.client, self.repo.path, config_blob.digest,
                               config_blob.size, config)
        raw = manifest_bytes(config_blob, [self.blobs[d] for d in self.diff_ids])
        digest = await manifests.put(self.client, self.repo.path, tag, raw, manifests.SCHEMA2)
        await self.send.send({"status": f"{tag}: digest: {digest} size: {len(raw)}"})
        await self.send.send({"progressDetail": {},
                              "aux": {"Tag": tag, "Digest": digest, "Size": len(raw)}})
        with trio.CancelScope(shield=True):  # the registry has it: record it whatever comes
            async with self.p.images.lock:
                if self.image.id in self.p.images.images:
                    await self.p.images.add_ref(self.image, replace(self.repo, digest=digest),
                                                force=True, event=False)
        tagged = replace(self.repo, tag=tag)
        self.p.images.events.publish("image", "push", tagged.familiar_string(),
                                     {"name": tagged.familiar_name})

    async def layer(self, diff_id: str, chain_id: str) -> None:
        if self.limiter.available_tokens == 0:
            await self.status(diff_id, "Waiting")
        async with self.limiter:
            blob = await self.existing(diff_id)
            if blob is not None:
                await self.status(diff_id, "Layer already exists")
            else:
                blob = await self.mounted(diff_id)
                if blob is None:
                    blob = await self.upload(diff_id, chain_id)
                    await self.status(diff_id, "Pushed")
            self.blobs[diff_id] = blob
            await self.p.distribution.record(diff_id, blob.digest, self.repo.name,
                                             size=blob.size)

    async def existing(self, diff_id: str) -> Blob | None:
        """A blob known for the layer that the target repository already holds."""
        seen: list[str] = []
        for digest, repo in self.p.distribution.lookup(diff_id):
            if digest in seen or len(seen) >= MAX_HEADS:
                continue
            seen.append(digest)
            size = await blobs.exists(self.client, self.repo.path, digest)
            if size is not None:
                return Blob(digest, size or self.p.distribution.size(digest) or 0)
            if repo == self.repo.name:  # the map was wrong about this repository
                await self.p.distribution.forget(diff_id, digest, repo)
        return None

    async def mounted(self, diff_id: str) -> Blob | None:
        """The layer mounted from another repository of the same registry, if one has it."""
        for digest, repo in self.p.distribution.lookup(diff_id):
            source = reference.parse(repo)
            if source.domain != self.repo.domain or source.path == self.repo.path:
                continue
            if await uploads.mount(self.client, self.repo.path, digest, source.path):
                size = self.p.distribution.size(digest)
                if size is None:
                    size = await blobs.exists(self.client, self.repo.path, digest) or 0
                await self.status(diff_id, f"Mounted from {source.path}")
                return Blob(digest, size)
        return None

    async def upload(self, diff_id: str, chain_id: str) -> Blob:
        """Compress the layer while it is sent (one streamed PATCH), with progress."""
        total = self.p.images.layers.tar_size(chain_id)
        send, recv = trio.open_memory_channel[Piece](4)
        sink = GzipSink(send)
        ident = _short(diff_id)
        start = trio.current_time()
        last = -PROGRESS_INTERVAL

        async def produce() -> None:
            async with send:
                await trio.to_thread.run_sync(compress_layer, self.p.images.layers, chain_id,
                                              sink)

        async def body() -> AsyncIterator[bytes]:
            nonlocal last
            async for piece, consumed in recv:
                now = trio.current_time()
                if now - last >= PROGRESS_INTERVAL:
                    last = now
                    await self.send.send({
                        "status": "Pushing", "id": ident,
                        "progressDetail": {"current": consumed, "total": total},
                        "progress": bar(consumed, total, _wall(start))})
                yield piece

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            digest = await uploads.push_streamed(self.client, self.repo.path, body,
                                                 lambda: sink.digest)
        return Blob(digest, sink.size)


def manifest_bytes(config: Blob, layers: list[Blob]) -> bytes:
    """The schema2 manifest, laid out as docker writes it (three-space indents)."""
    doc = {"schemaVersion": 2, "mediaType": manifests.SCHEMA2,
           "config": {"mediaType": CONFIG_TYPE, "size": config.size, "digest": config.digest},
           "layers": [{"mediaType": LAYER_TYPE, "size": b.size, "digest": b.digest}
                      for b in layers]}
    return json.dumps(doc, indent=3).encode()


def _short(diff_id: str) -> str:
    return diff_id.removeprefix("sha256:")[:12]


def _wall(start: float) -> float:
    """Unix time of a ``trio.current_time`` instant (the progress bar's ETA wants it)."""
    return time.time() - (trio.current_time() - start)
