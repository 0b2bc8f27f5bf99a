"""A local copy of one prefix of the cluster store, kept current by a watch.

Every daemon keeps such copies of what it needs to know about the others (the nodes, later
the networks and their endpoints): a read serves from memory, and a change reaches every
daemon in one watch round trip. ``run`` reads the prefix, then follows the changes from the
revision after that read; a watch that finds its revision compacted reads afresh. While the
store is unreachable the copy stays as it was last known (``current`` says whether it is
following), and it catches up from where it stopped when the store is back.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import trio

from svc.cluster.etcd import Compacted, Etcd, EtcdError, Unavailable

log = logging.getLogger("svc.cluster")

Listener = Callable[[str, Any | None], None]  # (key under the prefix, value or None if gone)


class Mirror:
    def __init__(self, etcd: Etcd, prefix: str) -> None:
        self.etcd = etcd
        self.prefix = prefix
        self.items: dict[str, Any] = {}  # key (after the prefix) -> decoded JSON value
        self.revision = 0  # the store revision the copy reflects
        self.current = False
        self.listeners: list[Listener] = []
        self._changed = trio.Event()
        self._scope = trio.CancelScope()

    def reconnect(self) -> None:
        """Drop the watch's stream and open a new one (the session found the store
        unreachable: a stream cut by a partition may hang rather than fail)."""
        self._scope.cancel()

    async def changed(self) -> None:
        """Wait for the next change of the copy."""
        await self._changed.wait()

    def _set(self, key: str, value: Any | None) -> None:
        if value is None:
            if self.items.pop(key, None) is None:
                return
        else:
            if self.items.get(key) == value:
                return
            self.items[key] = value
        for listener in list(self.listeners):
            try:
                listener(key, value)
            except (KeyError, TypeError, ValueError) as exc:  # a record of another shape
                log.warning("cluster store: %s%s not understood: %r", self.prefix, key, exc)
        self._changed.set()
        self._changed = trio.Event()

    async def _load(self) -> None:
        kvs, revision = await self.etcd.range(self.prefix)
        fresh = {}
        for kv in kvs:
            with _skip_bad(kv.key):
                fresh[kv.key.removeprefix(self.prefix)] = kv.json()
        for key in list(self.items.keys() - fresh.keys()):
            self._set(key, None)
        for key, value in fresh.items():
            self._set(key, value)
        self.revision = revision

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Keep the copy current until cancelled (started once the first read is in, or
        at once if the store cannot be read yet). Cancellation leaves the copy as it was."""
        started = False
        delay = 0.1
        while True:
            try:
                await self._load()
                self.current = True
                if not started:
                    task_status.started()
                    started = True
                with trio.CancelScope() as self._scope:
                    async for event in self.etcd.watch(self.prefix, self.revision + 1,
                                                       patient=False):
                        with _skip_bad(event.kv.key):
                            key = event.kv.key.removeprefix(self.prefix)
                            self._set(key, None if event.kind == "delete"
                                      else event.kv.json())
                        self.revision = event.revision
                        delay = 0.1
            except Compacted:
                continue  # read afresh
            except (Unavailable, EtcdError, ValueError) as exc:
                if self.current:
                    log.warning("cluster store: %s no longer followed: %s", self.prefix, exc)
                self.current = False
            if not started:
                task_status.started()
                started = True
            await trio.sleep(delay)
            delay = min(delay * 2, 2.0)


@contextlib.contextmanager
def _skip_bad(key: str) -> Iterator[None]:
    """A record that is not JSON is logged and left out, never the end of the copy."""
    try:
        yield
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("cluster store: %s is not a JSON record: %s", key, exc)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
