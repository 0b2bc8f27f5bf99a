"""POST /images/load: images from a ``docker save`` tarball, in either layout.

* manifest layout (engines since 1.10): ``manifest.json`` names each image's config and its
  ``layer.tar`` files; the config's ``rootfs.diff_ids`` must match the layers' digests.
* legacy layout: per-layer ``<id>/json`` with ``parent`` links and a ``repositories`` file;
  every layer becomes an image whose parent is the image below it, as dockerd does.

Layers are unpacked while the archive streams in (no copy of the archive is kept); nothing is
committed until the whole archive has been read and checked, so a bad archive leaves the
store unchanged.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import trio

from svc.engine.images import config as imageconfig
from svc.engine.images.service import Image, ImageService
from svc.engine.streams import reading
from svc.errors import InvalidParameter
from svc.models.imageconfig import ImageConfig
from svc.storage.compression import open_chunks
from svc.storage.layers import LayerStore, StagedLayer
from svc.storage.outertar import OuterTar
from svc.wire import reference

MAX_META = 16 << 20  # json files larger than this are not image metadata
MAX_META_TOTAL = 64 << 20  # all metadata of one archive together
META_NAMES = ("manifest.json", "repositories")
DRAIN_READ = 1 << 20  # (a load given up reads the rest of its body in reads of this size)


@dataclass
class Archive:
    files: dict[str, bytes] = field(default_factory=dict)
    layers: dict[str, StagedLayer] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    meta_bytes: int = 0

    def layer(self, path: str) -> StagedLayer:
        seen = set()
        while path in self.links and path not in seen:
            seen.add(path)
            path = self.links[path]
        if path not in self.layers:
            raise InvalidParameter(f"invalid image archive: layer {path} is missing")
        return self.layers[path]

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.files[name])
        except KeyError:
            raise InvalidParameter(f"invalid image archive: {name} is missing") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidParameter(f"invalid image archive: {name} is not JSON ({exc})") from None


def _clean(name: str) -> str:
    """An archive member name as a key (names are only looked up, never written to disk)."""
    name = posixpath.normpath(name)
    if name.startswith(("/", "../")) or name == "..":
        raise InvalidParameter(f"invalid image archive: entry {name!r} escapes the archive")
    return name


def _drain(reader: BinaryIO) -> None:
    """Read the client's request to its end (the answer comes after it)."""
    while reader.read(DRAIN_READ):
        pass


def read_archive(source: BinaryIO, layers: LayerStore) -> Archive:
    """Stream the outer tar: unpack each layer.tar into a staged layer, keep small metadata."""
    arc = Archive()
    try:
        # docker load accepts compressed archives too: sniffed, never trusted from headers
        for m, body in OuterTar(open_chunks(source)).members():
            name = _clean(m.name)
            if name.endswith("layer.tar") or name.endswith(".tar.gz"):
                if m.isfile():
                    arc.layers[name] = layers.stage(body)  # type: ignore[arg-type,unused-ignore]
                elif m.issym():
                    arc.links[name] = _clean(posixpath.join(posixpath.dirname(name),
                                                            m.linkname))
                elif m.islnk():
                    arc.links[name] = _clean(m.linkname)
            elif m.isfile() and m.size <= MAX_META and (
                    name in META_NAMES or name.endswith((".json", "/json"))):
                arc.meta_bytes += m.size
                if arc.meta_bytes > MAX_META_TOTAL:
                    raise InvalidParameter("invalid image archive: more than 64 MiB of "
                                           "metadata")
                arc.files[name] = body.readall()
    except (tarfile.TarError, ValueError, UnicodeDecodeError) as exc:
        discard(arc, layers)
        raise InvalidParameter(f"invalid image archive: {exc}") from None
    except BaseException:
        discard(arc, layers)
        raise
    return arc


def discard(arc: Archive, layers: LayerStore) -> None:
    for staged in arc.layers.values():
        layers.discard(staged)
    arc.layers.clear()


@dataclass
class PlannedImage:
    config: bytes
    layer_paths: list[str]
    tags: list[reference.Reference]
    parent_index: int | None = None  # legacy: index of the parent in the plan


def plan_manifest(arc: Archive) -> list[PlannedImage]:
    manifest = arc.json("manifest.json")
    if not isinstance(manifest, list) or not manifest:
        raise InvalidParameter("invalid image archive: manifest.json must list images")
    plan = []
    for entry in manifest:
        if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str):
            raise InvalidParameter("invalid image archive: a manifest entry has no Config")
        config = arc.files.get(_clean(entry["Config"]))
        if config is None:
            raise InvalidParameter(f"invalid image archive: {entry['Config']} is missing")
        diff_ids = _parse_config(config).check_rootfs()
        layers = entry.get("Layers") or []
        tags = entry.get("RepoTags") or []
        if not isinstance(layers, list) or not all(isinstance(p, str) for p in layers) \
                or not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidParameter("invalid image archive: manifest Layers and RepoTags must "
                                   "be lists of strings")
        paths = [_clean(p) for p in layers]
        if len(paths) != len(diff_ids):
            raise InvalidParameter(f"invalid image archive: {entry['Config']} names "
                                   f"{len(diff_ids)} layers but the manifest lists {len(paths)}")
        for i, (path, want) in enumerate(zip(paths, diff_ids, strict=True)):
            got = arc.layer(path).diff_id
            if got != want:
                raise InvalidParameter(f"invalid image archive: layer {i} ({path}) has diff "
                                       f"id {got}, the config expects {want}")
        plan.append(PlannedImage(config, paths, [_tag_ref(t) for t in tags]))
    return plan


def plan_legacy(arc: Archive) -> list[PlannedImage]:
    ids = sorted(n[: -len("/json")] for n in arc.files if n.endswith("/json"))
    if not ids:
        raise InvalidParameter("invalid image archive: no manifest.json and no layer json "
                               "files: this is not a docker save tarball")
    docs: dict[str, dict[str, Any]] = {}
    for i in ids:
        doc = arc.json(f"{i}/json")
        if not isinstance(doc, dict) or not isinstance(doc.get("parent") or "", str):
            raise InvalidParameter(f"invalid image archive: {i}/json is not a layer description")
        docs[i] = doc
    parents = {i: d.get("parent") or None for i, d in docs.items()}
    index: dict[str, int] = {}
    plan: list[PlannedImage] = []
    for top in ids:
        lineage = _lineage(top, parents)
        for depth, layer_id in enumerate(lineage):
            if layer_id in index:
                continue
            pidx = index[lineage[depth - 1]] if depth else None
            chain = [f"{x}/layer.tar" for x in lineage[: depth + 1]]
            diff_ids = [arc.layer(p).diff_id for p in chain]
            config = imageconfig.legacy_config([docs[x] for x in lineage[: depth + 1]], diff_ids)
            plan.append(PlannedImage(config, chain, [], pidx))
            index[layer_id] = len(plan) - 1
    if "repositories" in arc.files:
        repos = arc.json("repositories")
        if not isinstance(repos, dict) or not all(isinstance(t, dict) for t in repos.values()):
            raise InvalidParameter("invalid image archive: repositories must map each "
                                   "repository to an object of tags")
        for repo, tags in repos.items():
            for tag, layer_id in tags.items():
                if not isinstance(layer_id, str) or layer_id not in index:
                    raise InvalidParameter(f"invalid image archive: {repo}:{tag} names "
                                           f"missing layer {layer_id}")
                plan[index[layer_id]].tags.append(_tag_ref(f"{repo}:{tag}"))
    return plan


def _lineage(layer_id: str, parents: dict[str, str | None]) -> list[str]:
    """The layer and its ancestors, bottom first; a missing parent or a loop is a 400."""
    out = [layer_id]
    seen = {layer_id}
    while (parent := parents.get(out[-1])) is not None:
        if parent not in parents or parent in seen:
            raise InvalidParameter(f"invalid image archive: the parent {parent} of "
                                   f"{out[-1]} is missing or the parents form a loop")
        seen.add(parent)
        out.append(parent)
    return list(reversed(out))


def _parse_config(config: bytes) -> ImageConfig:
    try:
        return ImageConfig.parse(config)
    except InvalidParameter as exc:
        raise InvalidParameter(f"invalid image archive: {exc}") from None


def _tag_ref(name: str) -> reference.Reference:
    ref = reference.parse(name)
    if ref.digest is not None:
        raise InvalidParameter(f"invalid image archive: {name} is not a tag")
    return ref.with_default_tag()


async def load_images(svc: ImageService, body: AsyncIterator[bytes]) -> list[str]:
    """Load every image of the archive; returns the "Loaded image..." lines."""

    def read(reader: BinaryIO) -> Archive:
        try:
            arc = read_archive(reader, svc.layers)
        except BaseException:
            # (a body that cannot be read on, badly framed, say: the first error stands)
            with contextlib.suppress(InvalidParameter):
                _drain(reader)
            raise
        try:
            _drain(reader)
        except BaseException:  # (what follows the archive is broken: nothing is loaded)
            discard(arc, svc.layers)
            raise
        return arc

    # A request body the thread can read from the socket itself (``ThreadReadable``) is:
    # no trip through the event loop per chunk.
    async with reading(body) as reader:
        arc = await trio.to_thread.run_sync(read, reader)
    pinned: list[str] = []
    try:
        plan = plan_manifest(arc) if "manifest.json" in arc.files else plan_legacy(arc)
        images: list[Image] = []
        for item in plan:
            chain = await _commit_layers(svc, arc, item.layer_paths, pinned)
            parent = images[item.parent_index].id if item.parent_index is not None else None
            async with svc.lock:
                images.append(await svc.commit_image(item.config, chain, parent))
        lines = []
        async with svc.lock:
            for item, image in zip(plan, images, strict=True):
                for ref in item.tags:
                    await svc.add_ref(image, ref, force=True)
                    lines.append(f"Loaded image: {ref.familiar_string()}")
        tagged = {i for i, item in enumerate(plan) if item.tags}
        shown = [i for i in range(len(plan)) if i not in tagged
                 and i not in {p.parent_index for p in plan}]
        lines += [f"Loaded image ID: {images[i].id}" for i in shown]
        return lines
    finally:
        await trio.to_thread.run_sync(discard, arc, svc.layers)
        await svc.release_layers(pinned)


async def _commit_layers(svc: ImageService, arc: Archive, paths: list[str],
                         pinned: list[str]) -> list[str]:
    chain: list[str] = []
    for path in paths:
        staged = arc.layer(path)
        parent = chain[-1] if chain else None
        info = await svc.commit_layer(staged, parent)
        pinned.append(info.chain_id)
        chain.append(info.chain_id)
    return chain
