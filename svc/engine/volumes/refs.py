"""Reference counts of plugin volume mounts, kept durably, and the Unmounts they owe.

A plugin counts the mounts of a volume by the ``ID`` it is given (the container's id): one
``Mount`` per container start, one ``Unmount`` per container stop. svc writes the container's
id into the volume's record *before* it sends ``Mount`` and takes it out only once the plugin
has answered ``Unmount``, so whatever happens in between (the plugin hangs, dies mid-call, the
daemon is killed) the record names every mount the plugin may still count:

- a Mount the plugin refused, or never received (refused connection, no such plugin), is
  taken out of the record at once;
- a Mount whose outcome is unknown (no answer in time, the connection broke, an answer that
  makes no sense, the caller went away) leaves an Unmount *owed*;
- at daemon start every recorded mount is owed: no container runs then (restore tears every
  one down), so the mounts a crash left are undone;
- an Unmount that fails without the plugin's answer stays owed.

Owed Unmounts are sent by ``run`` in the background, each in a task of its own, again after
pauses of 1 s doubling to 60 s while they fail; a container that mounts the volume again first
sends its own owed Unmount itself, so the plugin never sees two Mounts of one ID uncounted.
A plugin's refusal to unmount is its answer: logged, and the reference dropped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

import trio

from svc.engine.events import EventBus
from svc.engine.volumes.base import KeyedLock, Volume
from svc.engine.volumes.remote import PluginVolumes
from svc.errors import SvcError
from svc.plugins.client import PluginBadAnswer, PluginCallError, PluginGone, PluginUnreachable
from svc.plugins.discovery import BadSpec, PluginNotFound
from svc.plugins.manager import NotImplementing

log = logging.getLogger("svc.volumes")

RETRY_FIRST, RETRY_MAX = 1.0, 60.0


def never_reached(exc: BaseException) -> bool:
    """Whether a failed Mount certainly left the plugin as it was: the plugin refused it,
    or it was never sent."""
    if isinstance(exc, PluginGone):
        return False
    return isinstance(exc, PluginCallError | PluginUnreachable | PluginNotFound | BadSpec
                      | NotImplementing)


def answered(exc: BaseException) -> bool:
    """Whether a failed Unmount was answered by the plugin (a refusal, or nonsense)."""
    return isinstance(exc, PluginCallError | PluginBadAnswer) and \
        not isinstance(exc, PluginGone)


class MountRefs:
    """Mount and Unmount of plugin volumes per container, durably counted."""

    def __init__(self, drivers: PluginVolumes, events: EventBus,
                 save: Callable[[Volume], Awaitable[None]],
                 volumes: Callable[[], Iterable[Volume]]) -> None:
        self.drivers = drivers
        self.events = events
        self._save = save  # the volume's record, written under its name's lock
        self._volumes = volumes
        self._keys = KeyedLock()  # (volume, container): a mount, an unmount, an owed one
        self._wake = trio.Event()
        self._retry: dict[tuple[str, str], tuple[float, float]] = {}  # -> (when, pause)
        self._running: set[tuple[str, str]] = set()

    def owe(self, v: Volume, cid: str) -> None:
        v.users.discard(cid)
        v.owed.add(cid)
        self._wake.set()

    async def mount(self, v: Volume, cid: str) -> tuple[str, bool]:
        """``VolumeDriver.Mount`` of ``v`` for container ``cid`` (once per container until
        its unmount); the path the plugin gave, and whether it was mounted now.

        Cancellation: the record is written shielded; a Mount cut short is owed an Unmount.
        """
        async with self._keys.hold((v.name, cid)):
            if cid in v.owed:
                await self._settle(v, cid)  # its Unmount first (raises if it cannot be sent)
            if cid in v.users:
                return v.mountpoint, False
            d = await self.drivers.driver(v.driver)
            v.users.add(cid)
            try:
                await self._save(v)
            except BaseException:
                v.users.discard(cid)
                raise
            try:
                point = await d.mount(v.name, cid)
            except BaseException as exc:
                if never_reached(exc):
                    v.users.discard(cid)
                    with trio.CancelScope(shield=True), contextlib.suppress(SvcError, OSError):
                        await self._save(v)
                else:
                    self.owe(v, cid)
                raise
            v.mountpoint = point
            return point, True

    async def unmount(self, v: Volume, cid: str) -> None:
        """``VolumeDriver.Unmount`` of ``v`` for ``cid`` if it is mounted for it; one that
        cannot be sent now is owed. Never raises for the plugin's sake: a container's
        teardown goes on."""
        if cid in v.owed:
            self._wake.set()
            return
        async with self._keys.hold((v.name, cid)):
            if cid not in v.users:
                return
            try:
                d = await self.drivers.driver(v.driver)
                await d.unmount(v.name, cid)
            except BaseException as exc:
                if not answered(exc):
                    self.owe(v, cid)
                    if isinstance(exc, SvcError):
                        log.warning("volume %s: %s; the Unmount for %s is sent again later",
                                    v.name, exc, cid[:12])
                        return
                    raise
                log.warning("volume %s: %s (for container %s)", v.name, exc, cid[:12])
            v.users.discard(cid)
            with trio.CancelScope(shield=True), contextlib.suppress(SvcError, OSError):
                await self._save(v)
        self.events.publish("volume", "unmount", v.name, {"container": cid,
                                                          "driver": v.driver})

    async def settle(self, v: Volume, cid: str) -> None:
        """Send the Unmount owed for ``cid`` now (``volume rm`` needs it done first).

        Raises:
            SvcError: it could not be sent (it stays owed).
        """
        async with self._keys.hold((v.name, cid)):
            if cid in v.owed:
                await self._settle(v, cid)

    async def _settle(self, v: Volume, cid: str) -> None:
        try:
            d = await self.drivers.driver(v.driver)
            await d.unmount(v.name, cid)
        except SvcError as exc:
            if not answered(exc):
                raise
            log.warning("volume %s: %s (an Unmount owed for %s)", v.name, exc, cid[:12])
        v.owed.discard(cid)
        self._retry.pop((v.name, cid), None)
        with trio.CancelScope(shield=True), contextlib.suppress(SvcError, OSError):
            await self._save(v)
        log.info("volume %s: unmounted for container %s, as owed", v.name, cid[:12])
        self.events.publish("volume", "unmount", v.name, {"container": cid,
                                                          "driver": v.driver})

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Send the owed Unmounts, each in its own task, until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._wake = trio.Event()
                now = trio.current_time()
                later = now + 3600.0
                volumes = list(self._volumes())
                owed = {(v.name, cid) for v in volumes for cid in v.owed}
                for gone in self._retry.keys() - owed:  # (settled, or its volume removed)
                    del self._retry[gone]
                for v in volumes:
                    for cid in list(v.owed):
                        key = (v.name, cid)
                        when = self._retry.get(key, (now, 0.0))[0]
                        if key in self._running:
                            continue
                        if when > now:
                            later = min(later, when)
                            continue
                        self._running.add(key)
                        nursery.start_soon(self._send_owed, v, cid)
                with trio.move_on_at(later):
                    await self._wake.wait()

    async def _send_owed(self, v: Volume, cid: str) -> None:
        key = (v.name, cid)
        try:
            await self.settle(v, cid)
        except SvcError as exc:
            pause = min(max(self._retry.get(key, (0.0, 0.0))[1] * 2, RETRY_FIRST), RETRY_MAX)
            self._retry[key] = (trio.current_time() + pause, pause)
            log.warning("volume %s: the Unmount owed for container %s failed: %s; trying "
                        "again in %.0f s", v.name, cid[:12], exc, pause)
        finally:
            self._running.discard(key)
            self._wake.set()
