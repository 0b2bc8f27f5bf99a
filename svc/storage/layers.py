"""The layer store: unpacked image layers on disk, laid out like docker's overlay2 driver.

``<root>/<chain hex>/`` holds one layer: ``diff/`` (the unpacked tree, an overlay lower dir),
``skeleton`` (see ``tarlayer``: rebuilds the exact layer tar), ``stale/`` (when its archive held
a path twice: the earlier payloads, which the rebuild reads), ``link`` (its short name) and
``layer.json``, written last with ``atomic_write``: a layer *is* committed exactly when that file
exists. ``<root>/l/<LINK>`` is a symlink to ``../<chain hex>/diff``, so overlay's ``lowerdir=``
stays short enough for the page-size limit even with 60+ layers (mount with ``cwd=<root>``).

Layers are unpacked into ``<root>/tmp-<random>/`` and renamed into place; a crash leaves only
``tmp-*`` directories and directories without ``layer.json``, which ``prepare`` discards.
A deleted layer's directory is thrown into the daemon's trash (``svc.storage.trash``: a durable
rename, the files deleted later in the background), so that ``rmi`` does not wait for its
files; its chain id may be committed again at once. A layer
laid out in place (``stage_tree``) gets its short link at once, pointing into its temp dir, so
that an overlay can mount it before its diff id is known (a build's next step runs on it while
it is hashed); its commit re-points that link and keeps the name.
File data is not fsynced (moby does not either): after a power loss, as opposed to a crash of the
daemon, a layer committed in the last seconds may hold incomplete files.

Everything blocks: the engine calls it from worker threads. ``register``/``stage`` may run in
several threads at once; commits and deletes are serialized by a lock.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from svc.errors import Conflict, InvalidParameter, NotFound
from svc.storage.atomic import DirSyncs, atomic_remove, atomic_write, fsync_dir
from svc.storage.compression import open_chunks
from svc.storage.layerinfo import LINK_DIR as LINK_DIR  # re-exported, as the rest below
from svc.storage.layerinfo import STALE as STALE
from svc.storage.layerinfo import TEMP_PREFIX as TEMP_PREFIX
from svc.storage.layerinfo import LayerInfo as LayerInfo
from svc.storage.layerinfo import chain_id_of as chain_id_of
from svc.storage.layerinfo import hex_of, remove_tree_quietly
from svc.storage.layerproduce import describe_layer
from svc.storage.layerscan import scan
from svc.storage.tarlayer import apply_layer, write_layer_from_skeleton
from svc.storage.trash import Trash

log = logging.getLogger("svc.storage.layers")

GONE_LINK = ".link-removed"  # a removed layer's short link, in its directory in the trash


@dataclass
class StagedLayer:
    """A layer unpacked into a temp dir, not yet in the store: ``commit`` or ``discard`` it."""

    path: Path  # <root>/tmp-<random>
    diff_id: str  # "" until ``describe`` (a tree laid out by ``stage_tree``)
    size: int
    tar_size: int
    committed_as: str | None = None  # chain id once ``commit`` moved the directory
    link: str = ""  # its short name already (``stage_tree``): <root>/l/<link> -> its diff

    @property
    def lower_dir(self) -> str:
        """The staged tree as an overlay lower dir (relative to the store's root), valid
        before and after its commit: the short link follows the directory."""
        assert self.link, "only a tree staged by stage_tree has a short link"
        return f"{LINK_DIR}/{self.link}"


class LayerStore:
    """Layers under ``root`` (``<svc --root>/overlay2``). Deleted and discarded trees go to
    ``trash`` (on the same file system); without one they are deleted on the spot."""

    def __init__(self, root: Path, trash: Trash | None = None) -> None:
        self.root = root
        self.trash = trash
        self._layers: dict[str, LayerInfo] = {}
        self._lock = threading.Lock()

    # -- startup ----------------------------------------------------------------------------

    def prepare(self) -> list[str]:
        """Create the directories, remove what a crash left, load the committed layers
        (``layerscan.scan``); returns the paths discarded."""
        found, discarded = scan(self.root, self._discard)
        with self._lock:
            self._layers = found
        return discarded

    # -- queries ----------------------------------------------------------------------------

    def get(self, chain_id: str) -> LayerInfo | None:
        with self._lock:
            return self._layers.get(chain_id)

    def list(self) -> list[LayerInfo]:
        """Every committed layer, children before their parents (safe order for deletes)."""
        with self._lock:
            layers = dict(self._layers)
        depth = {c: len(_chain(c, layers)) for c in layers}
        return sorted(layers.values(), key=lambda i: (-depth[i.chain_id], i.chain_id))

    def _require(self, chain_id: str) -> LayerInfo:
        info = self.get(chain_id)
        if info is None:
            raise NotFound(f"no such layer: {chain_id}")
        return info

    def diff_dir(self, chain_id: str) -> Path:
        return self.root / hex_of(self._require(chain_id).chain_id) / "diff"

    def tar_size(self, chain_id: str) -> int:
        """Length of the tar ``write_tar`` writes for this layer."""
        return self._require(chain_id).tar_size

    def lower_dirs(self, chain_id: str) -> builtins.list[str]:
        """``["l/LINK", "l/PARENTLINK", ...]``, top first, relative to ``root``."""
        with self._lock:
            layers = dict(self._layers)
        return [f"{LINK_DIR}/{info.link}" for info in _chain(chain_id, layers)]

    def write_tar(self, chain_id: str, out: BinaryIO) -> None:
        """Write the layer's tar, byte for byte as it was registered (its diff id verifies).

        Cancellation: blocking; on an error ``out`` holds a truncated tar.
        """
        layer_dir = self.root / hex_of(self._require(chain_id).chain_id)
        with open(layer_dir / "skeleton", "rb") as skeleton:
            write_layer_from_skeleton(skeleton, layer_dir / "diff", out, layer_dir / STALE)

    # -- registering ------------------------------------------------------------------------

    def register(self, stream: BinaryIO, parent: str | None) -> LayerInfo:
        """Unpack a layer blob (plain, gzip, bzip2 or xz: sniffed) on top of ``parent``.

        Returns:
          The committed layer; if that chain id already existed, the existing one (the new
          copy is dropped).

        Raises:
          InvalidParameter: ``parent`` does not exist, or the archive is bad.

        Cancellation: blocking. An interruption leaves a ``tmp-*`` directory, removed here on
        error and by ``prepare`` after a crash; the store itself is unchanged.
        """
        if parent is not None and self.get(parent) is None:
            raise InvalidParameter(f"parent layer {parent} does not exist")
        staged = self.stage(stream)
        try:
            return self.commit(staged, parent)
        finally:
            self.discard(staged)

    def stage(self, stream: BinaryIO) -> StagedLayer:
        """Unpack a layer blob into a temp dir without committing it (its parent may not be
        known yet, as in ``docker load``). Raises InvalidParameter for a bad archive."""
        path = self.root / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        (path / "diff").mkdir(parents=True, mode=0o700)
        os.chmod(path / "diff", 0o755)
        try:
            with open(path / "skeleton", "wb") as skeleton:
                result = apply_layer(open_chunks(stream), path / "diff", skeleton,
                                     path / STALE)
                skeleton.flush()
                os.fsync(skeleton.fileno())
        except BaseException:
            remove_tree_quietly(path)
            raise
        return StagedLayer(path, result.diff_id, result.size, result.tar_size)

    def stage_tree(self, fill: Callable[[Path], None]) -> StagedLayer:
        """A layer built in place: ``fill(diff)`` lays out its tree in a new temp dir, in the
        store's format (no ``.wh.`` files), which gets its short link at once
        (``StagedLayer.lower_dir``: an overlay may mount it from now on). No tar is ever
        written or unpacked; ``describe`` then gives it its diff id. ``fill`` raising removes
        the temp dir."""
        path = self.root / f"{TEMP_PREFIX}{secrets.token_hex(8)}"
        (path / "diff").mkdir(parents=True, mode=0o700)
        os.chmod(path / "diff", 0o755)
        try:
            fill(path / "diff")
            link = self._new_link()
            os.symlink(f"../{path.name}/diff", self.root / LINK_DIR / link)
        except BaseException:
            remove_tree_quietly(path)
            raise
        return StagedLayer(path, "", 0, 0, link=link)

    def describe(self, staged: StagedLayer) -> None:
        """The diff id, sizes and skeleton of a tree ``stage_tree`` laid out: one read of
        its files for the hash (the slow part: 50 MB take 35 ms of sha256). The tree must
        not change meanwhile (an overlay reading it is fine)."""
        with open(staged.path / "skeleton", "wb") as skeleton:
            diff_id, size, tar_size = describe_layer(staged.path / "diff", skeleton)
            skeleton.flush()
            os.fsync(skeleton.fileno())
        staged.diff_id, staged.size, staged.tar_size = diff_id, size, tar_size

    def discard(self, staged: StagedLayer) -> None:
        """Remove a staged layer's temp dir and short link, unless ``commit`` moved it into
        the store."""
        if staged.committed_as is None:
            if staged.link:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.root / LINK_DIR / staged.link)
            remove_tree_quietly(staged.path)

    def commit(self, staged: StagedLayer, parent: str | None) -> LayerInfo:
        """Put a staged layer into the store on top of ``parent``; returns the layer.

        A staged layer may be committed again on another parent (an identical layer.tar at two
        places of a ``docker load`` archive): the second time its content is copied. If the
        layer is in the store already, that one is returned and the staged one stays where it
        is (a mount may be using it) until ``discard``.

        Raises:
          InvalidParameter: ``parent`` does not exist.
        """
        chain_id = chain_id_of(parent, staged.diff_id)
        with self._lock:
            if parent is not None and parent not in self._layers:
                raise InvalidParameter(f"parent layer {parent} does not exist")
            existing = self._layers.get(chain_id)
            if existing is not None:
                return existing
            if staged.committed_as is None:
                info = self._move_in(staged, chain_id, parent)
                staged.committed_as = chain_id
                return info
            source = staged.committed_as
        copy = self._copy(source)
        try:
            return self.commit(copy, parent)
        finally:
            self.discard(copy)

    def _copy(self, chain_id: str) -> StagedLayer:
        """Stage a copy of a committed layer, through its exact tar."""
        spool = self.root / f"{TEMP_PREFIX}{secrets.token_hex(8)}.tar"
        try:
            with open(spool, "w+b") as tmp:
                self.write_tar(chain_id, tmp)
                tmp.seek(0)
                return self.stage(tmp)
        finally:
            spool.unlink(missing_ok=True)

    def _move_in(self, staged: StagedLayer, chain_id: str, parent: str | None) -> LayerInfo:
        """Rename the temp dir into place, link it, then write layer.json (the commit point).

        Called with the lock held."""
        final = self.root / hex_of(chain_id)
        if final.exists():  # an uncommitted leftover (the lock rules out a live commit)
            remove_tree_quietly(final)
        os.rename(staged.path, final)
        fsync_dir(self.root)
        link = staged.link or self._new_link()
        _point_link(self.root / LINK_DIR / link, f"../{hex_of(chain_id)}/diff")
        (final / "link").write_text(link)
        info = LayerInfo(chain_id, staged.diff_id, parent, staged.size, link, staged.tar_size)
        record: dict[str, Any] = {"chain_id": chain_id, "diff_id": info.diff_id,
                                  "parent": parent, "size": info.size, "link": link,
                                  "tar_size": info.tar_size}
        atomic_write(final / "layer.json", json.dumps(record, sort_keys=True).encode(),
                     mode=0o644)
        self._layers[chain_id] = info
        return info

    def _new_link(self) -> str:
        while True:
            link = base64.b32encode(os.urandom(20)).decode()[:26]
            if not os.path.lexists(self.root / LINK_DIR / link):
                return link

    # -- deleting ---------------------------------------------------------------------------

    def delete(self, *chain_ids: str, syncs: DirSyncs | None = None) -> None:
        """Remove layers (an image's unused ones at once: one durable step for all).

        With a trash, each layer's directory is renamed into it and the renames made durable
        together (with ``syncs``: when it is flushed); the store forgets the layers at once
        and their files are deleted in the background. Without one, layer.json goes first (a
        crash part-way leaves an uncommitted directory that ``prepare`` removes), then the
        files.

        Raises:
          NotFound: no such layer. Conflict: a layer not deleted with it has it as parent.
          Nothing is deleted then.
        """
        doomed = set(chain_ids)
        with self._lock:
            infos = []
            for chain_id in chain_ids:
                info = self._layers.get(chain_id)
                if info is None:
                    raise NotFound(f"no such layer: {chain_id}")
                if any(other.parent == chain_id and other.chain_id not in doomed
                       for other in self._layers.values()):
                    raise Conflict(f"layer {chain_id} is the parent of another layer")
                infos.append(info)
            dirs = [self.root / hex_of(info.chain_id) for info in infos]
            if self.trash is None:
                for layer_dir in dirs:
                    atomic_remove(layer_dir / "layer.json")
            for info, layer_dir in zip(infos, dirs, strict=True):
                del self._layers[info.chain_id]
                self._drop_link(info.link, layer_dir if self.trash is not None else None)
            if self.trash is not None:
                self.trash.throw(dirs, [info.size for info in infos], syncs=syncs)
                return
            doomed_dirs = [self.root / f"{TEMP_PREFIX}deleted-{secrets.token_hex(8)}"
                           for _ in dirs]
            for layer_dir, doomed_dir in zip(dirs, doomed_dirs, strict=True):
                os.rename(layer_dir, doomed_dir)
        for doomed_dir in doomed_dirs:
            remove_tree_quietly(doomed_dir)

    def _drop_link(self, link: str, into: Path | None) -> None:
        """Remove a layer's short link; with ``into`` (its directory, about to go to the
        trash) by a rename into it, so that the link is deleted with it in the background.

        Why: unlinking an image's ten links on the request's path took 17-40 ms under two CPU
        burners (1 ms of it on the CPU); the renames take under 1 ms. A link left by a crash
        is swept at the next start, as before."""
        path = self.root / LINK_DIR / link
        if into is not None:
            with contextlib.suppress(FileNotFoundError):  # a link or a directory missing
                os.rename(path, into / GONE_LINK)
                return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _discard(self, path: Path) -> None:
        """A tree that is no committed layer (what a crash left), gone."""
        if self.trash is not None:
            self.trash.throw([path])
        else:
            remove_tree_quietly(path)


def _point_link(link: Path, target: str) -> None:
    """``link`` -> ``target``, replacing what it pointed to in one step (a mount resolving
    it meanwhile sees the old target or the new one, never nothing)."""
    temp = link.with_name(f"{link.name}.{secrets.token_hex(4)}")
    os.symlink(target, temp)
    try:
        os.rename(temp, link)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _chain(chain_id: str, layers: dict[str, LayerInfo]) -> list[LayerInfo]:
    """The layer and its ancestors, top first."""
    out = []
    cur: str | None = chain_id
    while cur is not None:
        info = layers.get(cur)
        if info is None:
            raise NotFound(f"no such layer: {cur}")
        out.append(info)
        cur = info.parent
    return out
