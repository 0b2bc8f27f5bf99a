"""The layers of one image pull: skipped, downloaded, unpacked and committed in order.

Layers whose chain is already in the store say ``Already exists`` and are pinned. The others
say ``Pulling fs layer``, then each one's blob is downloaded through the shared
:class:`DownloadManager` (``Waiting`` while no transfer slot is free, ``Downloading`` with
progress, ``Verifying Checksum``, ``Download complete``), unpacked into a staged layer as soon
as it is complete (``Extracting`` with progress; several at once), checked against the diffID
the config names, and committed on top of the layer below it once that one is in
(``Pull complete``): downloads and unpacking overlap, commits keep the image's order. Progress
of one layer is sent at most every ``PROGRESS_INTERVAL``.

Cancellation: transfers stop at once (the manager cancels the ones nobody else waits for); an
unpacking thread stops at its next read and removes its staged directory; committed layers stay
pinned until the caller releases them (``images.release_layers(pinned)``), which deletes those
that no image uses. Nothing is visible in the store before its blob and content are verified.
"""

from __future__ import annotations

import io
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import trio

from svc.engine.images.downloads import Download, DownloadManager, Source
from svc.engine.images.service import ImageService
from svc.registry.errors import DigestMismatch
from svc.storage.layers import StagedLayer, chain_id_of
from svc.wire.progress import bar

PROGRESS_INTERVAL = 0.25  # seconds between two progress messages of one layer
WAITING_AFTER = 0.05  # a transfer without a slot by then is reported as Waiting
UNPACKERS = 2  # layers unpacked at once (CPU-bound)

Message = dict[str, object]


@dataclass(frozen=True)
class LayerPlan:
    """One layer to pull: its blob, and its diffID when known before the download."""

    digest: str
    size: int | None
    diff_id: str | None = None


def short(digest: str) -> str:
    return digest.partition(":")[2][:12]


def expected_chains(plans: list[LayerPlan]) -> list[str | None]:
    """Each layer's chain id, where the config names its diffID and every one below it."""
    chains: list[str | None] = []
    parent: str | None = None
    for plan in plans:
        if plan.diff_id is None or (chains and parent is None):
            parent = None
        else:
            parent = chain_id_of(parent, plan.diff_id)
        chains.append(parent)
    return chains


class _Stopped(Exception):
    """Raised in an unpacking thread whose pull was cancelled."""


class _CountingReader(io.RawIOBase):
    """A file read through by the unpacker: counts bytes, and stops when told to."""

    def __init__(self, inner: BinaryIO, stop: threading.Event) -> None:
        self.inner = inner
        self.stop = stop
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.stop.is_set():
            raise _Stopped("the pull was cancelled")
        n = self.inner.readinto(buffer)  # type: ignore[attr-defined]
        self.count += n or 0
        return n or 0


class LayerPuller:
    """Pulls the layers of one image into ``images`` from ``source``, reporting to ``send``.

    After :meth:`run` (however it ends) ``pinned`` holds the chain ids this pull pinned.
    """

    def __init__(self, images: ImageService, downloads: DownloadManager, source: Source,
                 send: trio.MemorySendChannel[Message]) -> None:
        self.images = images
        self.downloads = downloads
        self.source = source
        self.send = send
        self.pinned: list[str] = []
        self.unpackers = trio.CapacityLimiter(UNPACKERS)

    async def status(self, ident: str, text: str) -> None:
        await self.send.send({"status": text, "progressDetail": {}, "id": ident})

    async def progress(self, ident: str, text: str, current: int, total: int | None,
                       start: float) -> None:
        total = total or 0
        await self.send.send({"status": text, "id": ident,
                              "progressDetail": {"current": current, "total": total},
                              "progress": bar(current, total, start)})

    def existing_prefix(self, expected: list[str | None]) -> list[str]:
        """The chain ids of the leading layers the store already has (pinned), of the
        ``expected_chains`` of the plans."""
        chain: list[str] = []
        for expected_id in expected:
            if expected_id is None or not self.take_existing(expected_id):
                break
            chain.append(expected_id)
        return chain

    def take_existing(self, chain_id: str) -> bool:
        """Pin the layer ``chain_id`` if the store has it. Synchronous, so that no commit or
        delete of another task comes between the look and the pin."""
        if self.images.layers.get(chain_id) is None:
            return False
        self.images.pin([chain_id])
        self.pinned.append(chain_id)
        return True

    async def run(self, plans: list[LayerPlan]) -> tuple[list[str], list[str]]:
        """Pull the layers; returns their diffIDs and chain ids, base first.

        Raises:
            DigestMismatch: a blob, or a layer's content, is not what the manifest says.
            RegistryError: as the registry answers.
        """
        expected = expected_chains(plans)
        existing = self.existing_prefix(expected)
        announced: set[str] = set()
        for i, plan in enumerate(plans):
            ident = short(plan.digest)
            if ident not in announced:
                announced.add(ident)
                await self.status(ident, "Already exists" if i < len(existing)
                                  else "Pulling fs layer")
        diff_ids = [p.diff_id or "" for p in plans[:len(existing)]] + [""] * \
            (len(plans) - len(existing))
        chain = existing + [""] * (len(plans) - len(existing))
        committed = [trio.Event() for _ in plans]
        for i in range(len(existing)):
            committed[i].set()
        async with trio.open_nursery() as nursery:
            for i in range(len(existing), len(plans)):
                nursery.start_soon(self.layer, i, plans[i], expected[i], diff_ids, chain,
                                   committed)
        return diff_ids, chain

    async def layer(self, i: int, plan: LayerPlan, expected: str | None, diff_ids: list[str],
                    chain: list[str], committed: list[trio.Event]) -> None:
        """Pull layer ``i``, or take it from the store if a concurrent pull committed it since
        ``existing_prefix`` looked (``expected``: its chain id, when the config names every
        diffID up to it)."""
        ident = short(plan.digest)
        if expected is not None and self.take_existing(expected):
            diff_ids[i], chain[i] = plan.diff_id or "", expected
            committed[i].set()
            await self.status(ident, "Already exists")
            return
        # The download is held until the layer is committed: a pull that does not find the
        # layer in the store before then joins it, and never fetches the blob again.
        async with self.downloads.use(self.source, plan.digest, plan.size) as download:
            path = await self.watch_download(ident, download)
            staged = await self.unpack(ident, path)
            try:
                if plan.diff_id is not None and staged.diff_id != plan.diff_id:
                    raise DigestMismatch(f"filesystem layer verification failed for digest "
                                         f"{plan.digest}: its content is {staged.diff_id}, "
                                         f"the image config says {plan.diff_id}")
                if i > 0:
                    await committed[i - 1].wait()
                chain[i] = await self.commit(staged, chain[i - 1] if i else None)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.images.layers.discard, staged)
        diff_ids[i] = staged.diff_id
        committed[i].set()
        await self.status(ident, "Pull complete")

    async def commit(self, staged: StagedLayer, parent: str | None) -> str:
        """Commit a verified staged layer on ``parent`` (pinned); its chain id. Shielded:
        a layer in the store is always in ``pinned`` too, for the caller to release."""
        with trio.CancelScope(shield=True):
            info = await self.images.commit_layer(staged, parent)
            self.pinned.append(info.chain_id)
        return info.chain_id

    async def watch_download(self, ident: str, download: Download) -> Path:
        """Report the transfer's progress until it ends; the verified file."""
        with trio.move_on_after(WAITING_AFTER):
            await download.started.wait()
        if not download.started.is_set():
            await self.status(ident, "Waiting")
            await download.started.wait()
        start, sent, seen = time.time(), -1, 0
        while not download.done.is_set():
            seen = await download.wait_changed(seen)  # the first bytes are shown at once
            if download.retry_in is not None:
                await self.status(ident, f"Retrying in {download.retry_in} second"
                                  + ("s" if download.retry_in > 1 else ""))
            elif download.current != sent and download.current > 0 \
                    and not download.done.is_set():
                sent = download.current
                await self.progress(ident, "Downloading", sent, download.total, start)
            with trio.move_on_after(PROGRESS_INTERVAL):
                await download.done.wait()
        path = await download.wait()
        size = download.current or download.size or 0
        if sent not in (-1, size) and download.current > download.resumed_from:
            await self.progress(ident, "Downloading", size, download.total or size, start)
        await self.status(ident, "Verifying Checksum")
        await self.status(ident, "Download complete")
        return path

    async def unpack(self, ident: str, path: Path) -> StagedLayer:
        """Unpack a verified blob into a staged layer, reporting ``Extracting``."""
        total = (await trio.Path(path).stat()).st_size
        stop = threading.Event()
        result: list[StagedLayer] = []
        lock = threading.Lock()
        reader: list[_CountingReader] = []

        def work() -> None:
            with open(path, "rb") as f:
                counting = _CountingReader(f, stop)
                reader.append(counting)
                staged = self.images.layers.stage(
                    io.BufferedReader(counting, 1 << 20))
            with lock:
                if stop.is_set():
                    self.images.layers.discard(staged)
                    raise _Stopped("the pull was cancelled")
                result.append(staged)

        async with self.unpackers:
            start, sent = time.time(), -1
            done = trio.Event()

            async def run() -> None:
                try:
                    await trio.to_thread.run_sync(work, abandon_on_cancel=True)
                finally:
                    done.set()

            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run)
                    while not done.is_set():
                        with trio.move_on_after(PROGRESS_INTERVAL):
                            await done.wait()
                        current = reader[0].count if reader else 0
                        if current != sent and current > 0:
                            sent = current
                            await self.progress(ident, "Extracting", current, total, start)
            except BaseException:
                with lock:
                    stop.set()
                    leftover = list(result)
                for staged in leftover:  # finished just as the pull was cancelled
                    self.images.layers.discard(staged)
                raise
        if sent != total:
            await self.progress(ident, "Extracting", total, total, start)
        return result[0]
