"""Blob downloads for pulls: shared between requests, resumable, cancelled with their last user.

A pull asks for a layer blob with :meth:`DownloadManager.use`; while one download of that
digest runs, every other request that asks for it joins it instead of starting another, so
concurrent pulls of images that share layers fetch each blob once. The transfer runs in the
manager's own nursery, at most ``CONCURRENCY`` at a time; its users follow its progress
(``current``/``total``) and wait for the verified file. When the last user leaves before it
is complete (its client went away), the transfer is cancelled at once; while another user
still waits for it, it goes on.

Partial files live in ``<root>/downloads/<algorithm>-<hex>.partial`` and keep every byte
received so far (``blobs.fetch`` flushes them when cancelled): the next download of the digest
continues with ``Range``, as does the same transfer after a network error, a 5xx or a 429
(tried again after 1, 2, 4 and 8 seconds, ``Retrying in N seconds``). The transfer uses the
registry client of its first user; when that fails or the user leaves, it goes on with the
next user's. A verified file is removed when its
last user is done with it (the layer is in the store by then). Partial files older than
``MAX_AGE`` are removed, and the oldest ones go first when together they take more than
``BUDGET`` bytes; a per-digest lock keeps a new transfer from writing to a file an ending
one still finishes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

from svc.errors import SvcError
from svc.registry import blobs
from svc.registry.client import RegistryClient
from svc.registry.errors import (
    Denied,
    DigestMismatch,
    InvalidManifest,
    NotFound,
    RegistryError,
    Unauthorized,
    Unreachable,
)
from svc.registry.transport import RegistryConfig
from svc.storage.atomic import atomic_write

log = logging.getLogger("svc.images.downloads")
_OWNERS_LOCK = threading.Lock()  # the owners lists are read, merged and written in threads

CONCURRENCY = 3  # transfers at once, as dockerd's max-concurrent-downloads
MAX_AGE = 24 * 3600.0  # seconds a partial file is kept
BUDGET = 8 << 30  # bytes of partial files kept at most
SWEEP_INTERVAL = 3600.0
SUFFIX = ".partial"
OWNERS = ".owners"  # beside a partial file: the references it was pulled for
RETRY_DELAYS = (1, 2, 4, 8)  # seconds before each new attempt: five attempts in all


@dataclass(frozen=True, eq=False)
class Source:
    """Where a blob comes from: a pull request's registry client (its endpoint, credentials
    and tokens, shared by all its downloads) and a repository path on it."""

    client: RegistryClient
    path: str
    owner: str = ""  # the reference pulled (``repo:tag``), named on a partial file left


class DownloadCancelled(SvcError):
    """The transfer stopped because nobody waited for it any more."""


@dataclass(eq=False)
class Download:
    """One transfer of a blob and what its users see of it."""

    digest: str
    size: int | None
    partial: Path
    current: int = 0
    total: int | None = None
    resumed_from: int = 0
    retry_in: int | None = None  # seconds before the next attempt, while waiting for it
    users: int = 0
    started: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    version: int = 0  # counts changes (progress, retry countdown, end)
    _pulse: trio.Event = field(default_factory=trio.Event)
    path: Path | None = None
    error: BaseException | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    sources: list[Source] = field(default_factory=list)  # of the users, in joining order
    active: Source | None = None  # the source of the running attempt
    attempt: trio.CancelScope | None = None
    owners: set[str] = field(default_factory=set)  # references its users pull

    def progress(self, current: int, total: int | None) -> None:
        self.current, self.total = current, total
        self.notify()

    def notify(self) -> None:
        """Wake every user waiting in :meth:`wait_changed`. The producer replaces the
        event it sets, so a user never waits on one nobody will set."""
        self.version += 1
        pulse, self._pulse = self._pulse, trio.Event()
        pulse.set()

    async def wait_changed(self, seen: int) -> int:
        """Wait until something changed after version ``seen``; the version now."""
        if self.version == seen:
            await self._pulse.wait()
        return self.version

    async def wait(self) -> Path:
        """The verified file, once the transfer ended; its error otherwise."""
        await self.done.wait()
        if self.path is None:
            raise self.error or DownloadCancelled(f"download of {self.digest} was cancelled")
        return self.path


class DownloadManager:
    """Downloads blobs into ``<root>/downloads``; :meth:`run` hosts the transfers."""

    def __init__(self, root: Path, config: RegistryConfig, *, budget: int = BUDGET) -> None:
        self.dir = root / "downloads"
        self.config = config
        self.budget = budget
        self._active: dict[str, Download] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._limiter = trio.CapacityLimiter(CONCURRENCY)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host transfers and sweep old partial files until cancelled."""
        await trio.to_thread.run_sync(lambda: self.dir.mkdir(parents=True, exist_ok=True))
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                try:
                    await self.sweep()
                except OSError as exc:  # no descriptor, a full disk: the next sweep tries
                    log.warning("sweeping partial downloads failed: %s", exc)
                await trio.sleep(SWEEP_INTERVAL)

    def partial_path(self, digest: str) -> Path:
        algorithm, _, hexa = digest.partition(":")
        return self.dir / f"{algorithm}-{hexa}{SUFFIX}"

    @contextlib.asynccontextmanager
    async def use(self, source: Source, digest: str, size: int | None
                  ) -> AsyncIterator[Download]:
        """Join the download of ``digest`` (starting it if none runs) for the ``with`` block.

        Leaving the block as its last user cancels an unfinished transfer (its partial file
        stays, to be resumed) and removes a finished file.
        """
        assert self._nursery is not None, "the manager is not running"
        download = self._active.get(digest)
        if download is None:
            download = Download(digest, size, self.partial_path(digest))
            self._active[digest] = download
            self._nursery.start_soon(self._transfer, download)
        download.users += 1
        download.sources.append(source)
        if source.owner:
            download.owners.add(source.owner)
        try:
            yield download
        finally:
            download.users -= 1
            if source in download.sources:  # not when it failed already
                download.sources.remove(source)
            if download.users == 0:
                self._leave(download)
            elif download.active is source and source not in download.sources \
                    and download.attempt is not None:
                download.attempt.cancel()  # its client is going: resume with the next one

    def _leave(self, download: Download) -> None:
        if self._active.get(download.digest) is download:
            del self._active[download.digest]
        if not download.done.is_set():
            download.scope.cancel()
        elif download.path is not None:
            with contextlib.suppress(OSError):
                download.path.unlink()

    async def _transfer(self, download: Download) -> None:
        """Fetch into the partial file under the digest's lock and a transfer slot."""
        lock = self._locks.setdefault(download.digest, trio.Lock())
        try:
            with download.scope:
                async with lock, self._limiter:
                    download.started.set()
                    fetched = await self._from_sources(download)
                    download.resumed_from = fetched.resumed_from
                    download.path = fetched.path
        except (RegistryError, SvcError, OSError) as exc:
            download.error = exc
        except Exception as exc:  # a task of the manager's nursery must not take it down
            log.exception("download of %s failed", download.digest)
            download.error = exc
        finally:
            download.done.set()
            download.notify()
            if download.path is None and self._active.get(download.digest) is download:
                del self._active[download.digest]
            if download.users == 0 and download.path is not None:
                with contextlib.suppress(OSError):
                    download.path.unlink()
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(download.digest, None)
            if download.path is None and self._nursery is not None:
                self._nursery.start_soon(self._keep_owners, download)

    async def _from_sources(self, download: Download) -> blobs.Fetched:
        """Fetch with the first user's source; when that fails, or its user leaves, go on
        (resuming the partial file) with the next user's, so one user's refusal or network
        does not fail the others. The last failure when every source failed."""
        failure: BaseException | None = None
        while download.sources:
            source = download.active = download.sources[0]
            with trio.CancelScope() as attempt:
                download.attempt = attempt
                try:
                    return await self._fetch(source, download)
                except (RegistryError, SvcError) as exc:
                    if isinstance(exc, DigestMismatch):
                        raise  # the bytes are wrong whoever asks
                    failure = exc
                    log.info("download of %s from %s failed: %s", download.digest,
                             source.client.domain, exc)
                finally:
                    download.attempt = download.active = None
            if attempt.cancelled_caught:
                continue  # its user left (and took its source along)
            download.sources[:] = [s for s in download.sources if s is not source]
        raise failure or DownloadCancelled(f"download of {download.digest} was cancelled")

    @staticmethod
    async def _fetch(source: Source, download: Download) -> blobs.Fetched:
        """``blobs.fetch``, tried again (from where it stopped) after a network error, a
        5xx or a 429, up to ``len(RETRY_DELAYS) + 1`` attempts, counting down ``retry_in``
        for the users to show. Refusals (401, 403), a 404 and local errors (ENOSPC) are
        never retried."""
        for delay in (*RETRY_DELAYS, None):
            try:
                return await blobs.fetch(source.client, source.path, download.digest,
                                         download.partial, size=download.size,
                                         progress=download.progress)
            except RegistryError as exc:
                if delay is None or not retryable(exc):
                    raise
                log.info("download of %s failed (%s): retrying in %d s", download.digest,
                         exc, delay)
            for left in range(delay, 0, -1):
                download.retry_in = left
                download.notify()
                await trio.sleep(1)
            download.retry_in = None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _keep_owners(self, download: Download) -> None:
        """A partial file was kept: name the references it was for beside it (to drop it
        when they are removed or pulled in full), then mind the budget."""
        partial, owners = download.partial, download.owners
        try:
            await trio.to_thread.run_sync(_add_owners, partial, owners)
            await self.sweep()
        except OSError as exc:  # a task of the engine's nursery: never take the daemon down
            log.warning("keeping partial download %s: %s", partial, exc)

    async def forget_owner(self, owner: str) -> None:
        """``owner`` (a ``repo:tag``) was pulled in full: the partial files kept for it alone
        go, unless a transfer uses them."""
        await trio.to_thread.run_sync(self.owner_gone(owner))

    def owner_gone(self, owner: str) -> Callable[[], None]:
        """The disk work of ``forget_owner`` (``owner`` was removed), for a worker thread:
        the image service runs it in the thread that saves the names."""
        def busy(path: Path) -> bool:
            return any(d.partial == path for d in list(self._active.values()))

        return functools.partial(_drop_owner, self.dir, owner, busy)

    async def sweep(self) -> list[Path]:
        """Remove partial files older than ``MAX_AGE``, then the oldest ones beyond the
        budget; files of running transfers are left alone. Returns those removed."""
        def busy(path: Path) -> bool:  # read from the thread, as late as possible
            return any(d.partial == path for d in list(self._active.values()))

        return await trio.to_thread.run_sync(_sweep, self.dir, busy, self.budget, time.time())

    def blobs_gone(self, digests: list[str]) -> Callable[[], None]:
        """The disk work that removes the partial files of these blobs unless a transfer uses
        them (an image that no longer needs them was removed), for a worker thread."""
        paths = [self.partial_path(d) for d in digests if d not in self._active]

        def remove() -> None:
            for p in paths:
                for f in (p, _owners_path(p)):
                    with contextlib.suppress(OSError):
                        f.unlink()

        return remove


def retryable(exc: RegistryError) -> bool:
    """A failure that may pass: no answer, a server error, or too many requests."""
    if isinstance(exc, Unreachable):
        return True
    if isinstance(exc, Unauthorized | Denied | NotFound | DigestMismatch | InvalidManifest):
        return False
    return exc.status >= 500 or exc.status == 429


def _sweep(directory: Path, busy: Callable[[Path], bool], budget: int,
           now: float) -> list[Path]:
    try:
        entries = [(p, p.stat()) for p in directory.iterdir() if p.name.endswith(SUFFIX)]
    except FileNotFoundError:
        return []
    removed: list[Path] = []
    kept = []
    for path, st in sorted(entries, key=lambda e: e[1].st_mtime):
        if busy(path):
            continue
        if now - st.st_mtime > MAX_AGE:
            removed.append(path)
        else:
            kept.append((path, st.st_size))
    total = sum(size for _, size in kept)
    for path, size in kept:  # oldest first
        if total <= budget:
            break
        removed.append(path)
        total -= size
    removed = [p for p in removed if not busy(p)]
    for path in removed:
        with contextlib.suppress(OSError):
            os.unlink(path)
            log.info("removed partial download %s", path.name)
    for sidecar in directory.glob(f"*{SUFFIX}{OWNERS}"):  # of partial files gone
        if not sidecar.with_name(sidecar.name.removesuffix(OWNERS)).exists():
            with contextlib.suppress(OSError):
                sidecar.unlink()
    return removed


def _owners_path(partial: Path) -> Path:
    return partial.with_name(partial.name + OWNERS)


def _read_owners(partial: Path) -> set[str]:
    try:
        return set(_owners_path(partial).read_text().split())
    except OSError:
        return set()


def _write_owners(partial: Path, owners: set[str]) -> None:
    """Atomically (the store's atomic write: a temp file of its own, fsync'd, renamed)."""
    data = "".join(f"{o}\n" for o in sorted(owners)).encode()
    atomic_write(_owners_path(partial), data, mode=0o644)


def _add_owners(partial: Path, owners: set[str]) -> None:
    with _OWNERS_LOCK:  # read, merge, write: one updater of the lists at a time
        if owners and partial.exists():
            _write_owners(partial, _read_owners(partial) | owners)


def _drop_owner(directory: Path, owner: str, busy: Callable[[Path], bool]) -> None:
    with _OWNERS_LOCK:
        _drop_owner_locked(directory, owner, busy)


def _drop_owner_locked(directory: Path, owner: str, busy: Callable[[Path], bool]) -> None:
    for sidecar in directory.glob(f"*{SUFFIX}{OWNERS}"):
        partial = sidecar.with_name(sidecar.name.removesuffix(OWNERS))
        owners = _read_owners(partial)
        if owner not in owners or busy(partial):
            continue
        if owners - {owner}:
            _write_owners(partial, owners - {owner})
            continue
        for f in (partial, sidecar):
            with contextlib.suppress(OSError):
                f.unlink()
        log.info("removed partial download %s (%s is gone)", partial.name, owner)
