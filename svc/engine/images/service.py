"""ImageService: the local image store (names, configs, layers) and its queries and verbs.

State: ``images`` (id -> Image), ``repos`` (familiar repository -> {familiar ref -> id}). Durable
parts: the config blob (ConfigStore), the layers (LayerStore), the image record (ObjectStore
``images``, written last: a record marks an image committed) and the names (RefStore).
Mutations hold ``lock`` and run their disk work in worker threads; queries are in-memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from svc.engine.events import EventBus
from svc.errors import Conflict, InvalidParameter, NotFound
from svc.models.imageconfig import ImageConfig, parse_lenient
from svc.storage.atomic import DirSyncs
from svc.storage.imagestore import ConfigStore
from svc.storage.layers import LayerInfo, LayerStore, StagedLayer
from svc.storage.refs import RefStore
from svc.storage.store import ObjectStore
from svc.storage.trash import Trash
from svc.wire import reference
from svc.wire.timefmt import parse_timestamp_ns

log = logging.getLogger("svc.images")

NONE_TAG = "<none>:<none>"
NONE_DIGEST = "<none>@<none>"


def chain_ids(diff_ids: list[str]) -> list[str]:
    out: list[str] = []
    for d in diff_ids:
        if not out:
            out.append(d)
        else:
            out.append("sha256:" + hashlib.sha256(f"{out[-1]} {d}".encode()).hexdigest())
    return out


@dataclass
class Image:
    id: str
    config: ImageConfig
    parent: str | None
    chain: list[str]
    size: int
    loaded_ns: int = field(default_factory=time.time_ns)

    @property
    def short(self) -> str:
        return self.id.removeprefix("sha256:")[:12]

    @property
    def created_ns(self) -> int:
        try:
            return parse_timestamp_ns(self.config.created or "0")
        except ValueError:
            return 0

    def record(self) -> dict[str, Any]:
        return {"parent": self.parent, "chain": self.chain, "size": self.size,
                "loaded": self.loaded_ns}


class ImageService:
    def __init__(self, root: Path, store: ObjectStore, events: EventBus,
                 trash: Trash | None = None) -> None:
        self.root = root
        self.store = store
        self.events = events
        self.configs = ConfigStore(root)
        self.trash = trash  # deleted layers, records and configs: renamed into it
        self.layers = LayerStore(root / "overlay2", trash)
        self.refstore = RefStore(root)
        self.images: dict[str, Image] = {}
        self.repos: dict[str, dict[str, str]] = {}
        self._refs_version = 0  # of the last snapshot of ``repos`` handed to a writer
        self._graph: dict[str, dict[str, str]] = {}  # graph_data by image id
        self.lock = trio.Lock()  # names and image records
        # Layer creation and deletion. A registered layer is pinned until the image that uses
        # it is committed, so a concurrent delete never removes it in between.
        self.layer_lock = trio.Lock()
        self.pins: Counter[str] = Counter()
        # Set by the containers service: image id -> (a container using it, running?) or None.
        self.container_use: Callable[[str], tuple[str, bool] | None] = lambda image_id: None
        # Set by the engine: the disk work that cleans up after an image is deleted or a name
        # removed (partial blobs), run best effort in the worker thread that writes the
        # deletion (one trip to a thread per removal: each costs ~10 ms under CPU contention).
        self.on_delete: Callable[[Image], Callable[[], None]] | None = None
        self.on_untag: Callable[[str], Callable[[], None]] | None = None

    # -- loading ----------------------------------------------------------------------------

    def open(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Load images (blocking, before serving). Damaged or incomplete images are reported
        and skipped; layers no image uses (a crash between layer and image commit) are
        removed."""
        self.configs.prepare()
        for gone in self.layers.prepare():
            log.warning("discarded an incomplete layer: %s", gone)
        configs = self.configs.load_all()
        for hexid, rec in records.items():
            image_id = "sha256:" + hexid
            raw = configs.get(image_id)
            try:
                if raw is None:
                    raise ValueError("its config is missing")
                config, dropped = parse_lenient(raw)
                if dropped:
                    log.warning("image %s: config fields of unknown types left out: %s",
                                image_id, ", ".join(dropped))
                chain = [str(c) for c in rec["chain"]]
                missing = [c for c in chain if self.layers.get(c) is None]
                if missing:
                    raise ValueError(f"layer {missing[0]} is missing")
                self.images[image_id] = Image(image_id, config, rec.get("parent"), chain,
                                              int(rec.get("size", 0)), int(rec.get("loaded", 0)))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("skipping image %s: %s", image_id, exc)
        for image_id in configs.keys() - self.images.keys():
            log.warning("removing image config %s: no image record uses it", image_id)
            self.configs.delete(image_id)
        self.repos = {repo: {r: i for r, i in refs.items() if i in self.images}
                      for repo, refs in self.refstore.load().items()}
        self.repos = {k: v for k, v in self.repos.items() if v}
        used = {c for img in self.images.values() for c in img.chain}
        unused = [layer.chain_id for layer in self.layers.list() if layer.chain_id not in used]
        for chain_id in unused:
            log.warning("removing layer %s: no image uses it", chain_id)
        if unused:
            self.layers.delete(*unused)

    # -- names ------------------------------------------------------------------------------

    def refs_of(self, image_id: str) -> list[str]:
        return sorted(r for refs in self.repos.values() for r, i in refs.items() if i == image_id)

    def repo_tags(self, image_id: str) -> list[str]:
        return [r for r in self.refs_of(image_id) if "@" not in r]

    def repo_digests(self, image_id: str) -> list[str]:
        return [r for r in self.refs_of(image_id) if "@" in r]

    def children(self, image_id: str) -> list[Image]:
        return [i for i in self.images.values() if i.parent == image_id]

    def lookup_ref(self, name: str) -> tuple[reference.Reference, str | None]:
        ref = reference.parse(name).with_default_tag()
        return ref, self.repos.get(ref.familiar_name, {}).get(ref.familiar_string())

    @staticmethod
    def tag_reference(repo: str, tag: str | None, *, default_tag: bool = True
                      ) -> reference.Reference:
        """``repo`` (no tag or digest in it) plus ``tag``, checked as dockerd checks them."""
        ref = reference.parse(repo)
        if ref.tag is not None or ref.digest is not None:
            if tag:
                raise InvalidParameter("cannot use the repo:tag form and the tag parameter "
                                       "together")
            return ref
        if tag:
            ref = ref.with_tag(tag)
        return ref.with_default_tag() if default_tag else ref

    def resolve(self, name: str) -> Image:
        """Find an image by name[:tag], name@digest, full id, ``sha256:`` id or id prefix."""
        if not name:
            raise InvalidParameter("an image name is required")
        if reference.is_full_id(name):
            image_id = "sha256:" + name.removeprefix("sha256:")
            if image_id in self.images:
                return self.images[image_id]
            raise NotFound(f"No such image: {name}")
        try:
            ref, found = self.lookup_ref(name)
        except InvalidParameter:
            ref, found = None, None
            if not reference.is_id_prefix(name):
                raise
        if found:
            return self.images[found]
        if reference.is_id_prefix(name):
            prefix = "sha256:" + name.removeprefix("sha256:")
            matches = [i for i in self.images if i.startswith(prefix)]
            if len(matches) == 1:
                return self.images[matches[0]]
            if len(matches) > 1:
                raise NotFound(f"No such image: {name} (the id prefix is ambiguous)")
        shown = ref.familiar_string() if ref is not None else name
        raise NotFound(f"No such image: {shown}")

    # -- queries ----------------------------------------------------------------------------

    def _layer(self, chain_id: str) -> LayerInfo:
        info = self.layers.get(chain_id)
        if info is None:
            raise NotFound(f"layer {chain_id} does not exist")
        return info

    def layer_sizes(self, image: Image) -> list[int]:
        sizes = []
        for c in image.chain:
            info = self.layers.get(c)
            sizes.append(info.size if info else 0)
        return sizes

    def config_bytes(self, image_id: str) -> bytes:
        return self.configs.get(image_id)

    def graph_data(self, image: Image) -> dict[str, str]:
        """overlay2-style GraphDriver data: the image's layer directories (fixed by its id:
        kept, for up to 1024 images)."""
        if (data := self._graph.get(image.id)) is None:
            dirs = [str(self.layers.diff_dir(c)) for c in reversed(image.chain)]
            data = {"UpperDir": dirs[0]} if dirs else {}
            if len(dirs) > 1:
                data["LowerDir"] = ":".join(dirs[1:])
            self._graph = {**self._graph, image.id: data} if len(self._graph) < 1024 else {}
        return dict(data)

    # -- verbs ------------------------------------------------------------------------------

    async def add_ref(self, image: Image, ref: reference.Reference, *, force: bool,
                      event: bool = True) -> None:
        """Point ``ref`` at ``image`` (durably) and emit ``tag`` (unless ``event`` is False:
        a push records the RepoDigest it made without one)."""
        name, key = ref.familiar_name, ref.familiar_string()
        current = self.repos.get(name, {}).get(key)
        if current is not None and current != image.id and not force:
            raise Conflict(f"Conflict: Tag {key} is already set to image "
                           f"{current.removeprefix('sha256:')[:12]}, if you want to replace it, "
                           "please use the force option")
        self.repos.setdefault(name, {})[key] = image.id
        await self._save_refs()
        if event:
            self.events.publish("image", "tag", image.id, {"name": key})

    def forget_ref(self, key: str) -> None:
        """Take the name ``key`` out of memory; ``remove`` makes that durable (hold ``lock``
        from one to the other)."""
        name = key.split("@", 1)[0] if "@" in key else key.rsplit(":", 1)[0]
        refs = self.repos.get(name, {})
        refs.pop(key, None)
        if not refs:
            self.repos.pop(name, None)

    def _refs_snapshot(self) -> tuple[dict[str, dict[str, str]], int]:
        self._refs_version += 1
        return {k: dict(v) for k, v in self.repos.items()}, self._refs_version

    async def _save_refs(self, then: Callable[[], None] | None = None) -> None:
        """Write the names durably; then run ``then`` (best effort) in the same thread."""
        snapshot, version = self._refs_snapshot()

        def write() -> None:
            self.refstore.save(snapshot, version)
            if then is not None:
                _best_effort(then)

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(write)

    async def commit_image(self, config_bytes: bytes, chain: list[str],
                           parent: str | None = None) -> Image:
        """Record a new image whose layers are already registered (idempotent)."""
        image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        if image_id in self.images:
            return self.images[image_id]
        config = ImageConfig.parse(config_bytes)
        image = Image(image_id, config, parent, chain,
                      sum(self._layer(c).size for c in chain))
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.configs.put, config_bytes)
            await trio.to_thread.run_sync(self.store.put, "images",
                                          image_id.removeprefix("sha256:"), image.record())
        self.images[image_id] = image
        return image

    async def commit_layer(self, staged: StagedLayer, parent: str | None) -> LayerInfo:
        """Commit a staged layer (a rename; a copy if it was committed elsewhere already) and
        pin it until the image using it is committed. Uploads stage outside this lock."""
        async with self.layer_lock:
            info = await trio.to_thread.run_sync(self.layers.commit, staged, parent)
            self.pins[info.chain_id] += 1
        return info

    def pin(self, chain: list[str]) -> None:
        """Keep layers on disk while they are read (save), even if their image is removed."""
        for c in chain:
            self.pins[c] += 1

    async def release_layers(self, chain: list[str]) -> list[str]:
        """Unpin layers; delete those no image uses any more. Returns the deleted ones."""
        for c in chain:
            self.pins[c] -= 1
            if self.pins[c] <= 0:
                del self.pins[c]
        return await self._delete_unused(list(reversed(chain)))

    async def _delete_unused(self, candidates: list[str]) -> list[str]:
        """Delete the ``candidates`` (children before parents) no image uses or pins, in one
        step (their files go to the trash: two fsyncs at once, not a walk)."""
        with trio.CancelScope(shield=True):
            async with self.layer_lock:
                gone = self._unused(candidates)
                if gone:
                    await trio.to_thread.run_sync(lambda: self.layers.delete(*gone))
        return gone

    def _unused(self, candidates: list[str]) -> list[str]:
        """Those of ``candidates`` no image uses or pins (hold ``layer_lock``)."""
        used = {c for i in self.images.values() for c in i.chain} | set(self.pins)
        gone: list[str] = []
        for chain_id in candidates:
            if chain_id not in used and chain_id not in gone \
                    and self.layers.get(chain_id) is not None:
                gone.append(chain_id)
        return gone

    async def delete_image(self, image: Image) -> list[dict[str, str]]:
        """Remove an image and the layers no other image uses; returns the report entries."""
        return await self.remove(image, (), delete=True)

    async def remove(self, image: Image, untagged: Sequence[str], *,
                     delete: bool) -> list[dict[str, str]]:
        """Make an ``rmi`` durable, in one trip to a worker thread: with ``delete`` the
        image's record, its config and the layers no other image uses; then the names without
        the ``untagged`` ones (already forgotten, ``forget_ref``). Then the events: ``untag``
        for each name, ``delete``. Returns the ``Deleted`` report entries.

        The directories' fsyncs wait for the end and run at once (``DirSyncs``): two waits
        for the disk (the names' temp file, then the directories), where one after each
        change made six, ~20 ms under CPU contention. A crash before the end may keep any of
        these changes or none; the next start skips an image whose config or layers are gone,
        drops names of missing images and deletes layers no image uses, so each outcome is a
        consistent store.
        """
        if delete:
            del self.images[image.id]
        names = self._refs_snapshot() if untagged else None
        hooks = [self.on_untag(k) for k in untagged] if self.on_untag is not None else []
        if delete and self.on_delete is not None:
            hooks.append(self.on_delete(image))
        gone: list[str] = []
        with trio.CancelScope(shield=True):
            # (an untag alone takes no layer lock: a layer's commit never holds it up)
            async with self.layer_lock if delete else contextlib.nullcontext():
                if delete:
                    gone = self._unused(list(reversed(image.chain)))

                def write() -> None:
                    syncs = DirSyncs()
                    if delete:
                        self.store.delete("images", image.id.removeprefix("sha256:"), syncs,
                                          self.trash)
                        self.configs.delete(image.id, syncs, self.trash)
                        if gone:
                            self.layers.delete(*gone, syncs=syncs)
                    if names is not None:  # (on a journaling file system, its temp
                        self.refstore.save(*names, syncs=syncs)  # file's fsync commits all)
                    syncs.flush()
                    for hook in hooks:
                        _best_effort(hook)

                await trio.to_thread.run_sync(write)
        for key in untagged:
            self.events.publish("image", "untag", image.id, {"name": key})
        if not delete:
            return []
        self.events.publish("image", "delete", image.id, {"name": image.id})
        return [{"Deleted": image.id}] + [{"Deleted": c} for c in gone]


def _best_effort(work: Callable[[], None]) -> None:
    """Clean-up that may fail without failing the request (it is logged)."""
    try:
        work()
    except OSError as exc:
        log.warning("clean-up after an image removal failed: %s", exc)
