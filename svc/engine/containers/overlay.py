"""A container's overlay root: mounted from its image's layers, its init layer and its upper
dir; a read-only view of its image for look-ups; unmounted when nothing holds it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from svc.engine.containers.container import Container
from svc.engine.containers.rootfs import make_init_layer, unmount_quietly
from svc.engine.images.service import ImageService
from svc.errors import InvalidParameter
from svc.runtime.mounts import mount_overlay


class Overlay:
    """Mounts and unmounts containers' overlay roots over the image store's layers."""

    def __init__(self, images: ImageService) -> None:
        self.images = images

    async def mount(self, c: Container) -> None:
        """Mount the overlay rootfs (image layers + the container's upper dir) if it is not."""
        image = self.images.images.get(c.image_id)
        if image is None:
            raise InvalidParameter(f"the image {c.image_id} of container {c.id} is gone")
        layers = self.images.layers
        async with c.mount_lock:
            lower = await trio.to_thread.run_sync(self._prepare_dirs, c, image.chain)
            if lower is not None:
                await mount_overlay(layers.root, lower, c.upper_dir, c.work_dir, c.rootfs)

    @asynccontextmanager
    async def view(self, c: Container) -> AsyncIterator[Path]:
        """``c``'s root as its image gives it (the init layer over the image's layers),
        mounted read-only at ``c.view_dir`` for the block: for look-ups in a container that
        never ran (a build's COPY: where its files go), with no upper dir, so that the
        unmount syncs no file system (an overlay with one syncs all of that dir's file system
        when unmounted: a build context just received, 50 MB, took 30 ms). A crash leaves the
        view to ``restore``. Cancellation: unmounted."""
        image = self.images.images.get(c.image_id)
        if image is None:
            raise InvalidParameter(f"the image {c.image_id} of container {c.id} is gone")
        target = c.view_dir
        lower = await trio.to_thread.run_sync(self._view_dirs, c, image.chain)
        await mount_overlay(self.images.layers.root, lower, None, None, target)
        try:
            yield target
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(unmount_quietly, target)

    def _view_dirs(self, c: Container, chain: list[str]) -> list[str]:
        """Blocking: the view's lower dirs (two at least, as a read-only overlay needs)."""
        c.view_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        lower = self._lower_dirs(c, chain)
        if len(lower) < 2:  # FROM scratch: an empty dir below the init layer
            empty = c.view_dir.with_name("view-empty")
            empty.mkdir(exist_ok=True, mode=0o755)
            lower.append(str(empty))
        return lower

    def _prepare_dirs(self, c: Container, chain: list[str]) -> list[str] | None:
        """Blocking: the overlay's dirs; None if the rootfs is mounted already."""
        if os.path.ismount(c.rootfs):
            return None
        for d in (c.upper_dir, c.work_dir, c.rootfs):
            d.mkdir(parents=True, exist_ok=True, mode=0o755)
        return self._lower_dirs(c, chain)

    def _lower_dirs(self, c: Container, chain: list[str]) -> list[str]:
        """Blocking: ``c``'s overlay lower dirs, top first: its init layer (made here if
        need be), a build's layers above the image (``build_lowers``), the image's."""
        make_init_layer(c.init_dir)
        lower = self.images.layers.lower_dirs(chain[-1]) if chain else []
        return [str(c.init_dir), *c.build_lowers, *lower]

    async def unmount(self, c: Container, *, unless_used: bool = False,
                      unless_read: bool = False) -> None:
        """Unmount the overlay; ``unless_read``: only if no archive reader (or starting run)
        holds it; ``unless_used``: nor a process. Decided under the mount lock, where a
        reader or a start takes its hold."""
        async with c.mount_lock:
            if (unless_read or unless_used) and c.fs_users:
                return
            if unless_used and c.live is not None:
                return
            await trio.to_thread.run_sync(unmount_quietly, c.rootfs)
