"""The trash: trees that svc no longer knows, waiting to be deleted in the background.

Deleting an image's ~15,000 files took seconds on the request's path. Instead a tree is
*thrown*: renamed into ``<root>/trash/<unique>`` (the same file system as the data, so the
rename is one metadata operation) and the rename made durable by fsyncing both parent
directories. From then on no restart can find the object under its old name, and a new object
may take that name at once (a layer pulled again right after ``rmi``): the unique name keeps
the two apart. The engine's trash emptier (``svc.engine.trash``) deletes what is here, paced,
and after a crash the next start finds the entries again and finishes them.

Nothing else is recorded: an entry is its own record. Bytes a thrower knows an entry holds
(a layer's size) are kept in memory for the figure ``pending``; entries found at start count
with 0 bytes known.

Everything blocks; call it from worker threads. ``throw`` may run in several threads at once.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from svc.storage.atomic import DirSyncs
from svc.storage.fsutil import remove_tree

log = logging.getLogger("svc.storage.trash")

_counter = itertools.count()


@dataclass(frozen=True)
class Pending:
    """What the trash holds: entries not yet deleted, and the bytes known to be in them."""

    entries: int
    bytes_known: int


class Trash:
    """The trash directory ``path`` (``<root>/trash``); must be on the file system of every
    tree thrown into it (a tree on another one is deleted on the spot, see ``throw``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}  # entry name -> bytes known (0: not known)
        # Called (in the throwing thread) after each throw; the engine sets it to wake its
        # emptier. Must not block.
        self.notify: Callable[[], None] = lambda: None

    def prepare(self) -> Pending:
        """Create the directory and take note of what a previous run left in it."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        names = self.entries()
        with self._lock:
            for name in names:
                self._sizes.setdefault(name, 0)
        return self.pending()

    def entries(self) -> list[str]:
        """The entries still in the trash, oldest first (names sort by time)."""
        return sorted(os.listdir(self.path))

    def pending(self) -> Pending:
        with self._lock:
            return Pending(len(self._sizes), sum(self._sizes.values()))

    def throw(self, trees: Sequence[Path], sizes: Sequence[int] = (), *,
              durable: bool = True, syncs: DirSyncs | None = None) -> list[str]:
        """Move ``trees`` into the trash, durably; returns their names there.

        Each tree is renamed to a unique name; then the trash directory and each tree's old
        parent are fsynced once (one fsync per directory however many trees: an image's ten
        layers cost two). ``durable=False`` skips the fsyncs, for a tree that something
        else already made unreachable durably (a container's directory, once its record is
        gone: a directory without a record is swept at start). A tree that does not exist
        is skipped; one on another file system (``EXDEV``) is deleted on the spot, as before
        the trash existed. ``sizes``: bytes known to be in each tree (for ``pending``;
        missing ones count 0). With ``syncs`` the fsyncs are left to ``syncs.flush()``.

        Cancellation: blocking. A crash before the fsyncs leaves each tree under its old name
        or in the trash, never both and never half-renamed.
        """
        thrown: dict[str, int] = {}
        parents: set[Path] = set()
        for tree, size in itertools.zip_longest(trees, sizes[:len(trees)], fillvalue=0):
            assert isinstance(tree, Path)
            name = f"{time.time_ns():020d}-{next(_counter)}-{secrets.token_hex(4)}"
            try:
                os.rename(tree, self.path / name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                log.warning("%s is not on the trash's file system: deleted on the spot", tree)
                remove_tree(tree, ignore_errors=True)
                continue
            thrown[name] = size
            parents.add(tree.parent)
        if not thrown:
            return []
        if durable:  # (fsynced at once: ``DirSyncs``, this call's own without ``syncs``)
            deferred = syncs if syncs is not None else DirSyncs()
            for directory in (self.path, *parents):
                deferred.add(directory)
            if syncs is None:
                deferred.flush()
        with self._lock:
            self._sizes.update(thrown)
        self.notify()
        return list(thrown)

    def empty(self, name: str, pace: Callable[[], None] | None = None) -> bool:
        """Delete the entry ``name``; ``pace`` is called after each file or directory removed
        (it may sleep, to bound the I/O, or raise to stop). True when the entry is gone; False
        when something in it could not be deleted (logged; it stays, and the next start tries
        again: a file system mounted below it is never walked into).

        Cancellation: whatever ``pace`` raises stops the deletion part-way; the rest of the
        entry stays in the trash for a later call.
        """
        path = self.path / name
        remove_tree(path, ignore_errors=True, pace=pace)  # all it can, around what it cannot
        if os.path.lexists(path):
            log.error("cannot delete all of %s from the trash (left for the next start)", path)
            return False
        with self._lock:
            self._sizes.pop(name, None)
        return True
