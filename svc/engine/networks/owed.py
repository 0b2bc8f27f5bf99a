"""The undoing a plugin is owed for endpoints that are gone: ``Leave``, ``DeleteEndpoint``,
``ReleaseAddress`` (and ``RevokeExternalConnectivity``), sent until the plugin answers.

A network's record names, per endpoint id, what its plugins may hold (``held.Held``), written
before each call that creates something. An entry whose endpoint is not live is owed:

- at daemon start every entry is owed (no container runs then: restore tore each one down),
  so what a crash (SIGKILL included) left is undone, in the order libnetwork undid it;
- a container's teardown undoes its own at once; a step whose outcome is unknown (no answer
  in time, no plugin, the connection broke) leaves the rest owed.

Owed entries are undone by ``run`` in the background, each in a task of its own, again after
pauses of 1 s doubling to 60 s while they fail. A container that joins the network again
first settles its own owed entries (so that a static address it held is free again), and a
network's removal settles all of its own. A step the plugin refuses (or answers with
nonsense) is its answer: logged, and counted as done.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator

import trio
import trio.lowlevel

from svc.engine.networks import remote_api
from svc.engine.networks.drivers import NetworkPlugins
from svc.engine.networks.held import Held
from svc.engine.networks.ipam import Network
from svc.engine.networks.pools import release_address
from svc.errors import SvcError
from svc.plugins.client import PluginBadAnswer, PluginCallError, PluginGone

log = logging.getLogger("svc.networks")
RETRY_FIRST, RETRY_MAX = 1.0, 60.0
STEPS = (("external", "RevokeExternalConnectivity"), ("joined", "Leave"),
         ("created", "DeleteEndpoint"))  # then ReleaseAddress


def answered(exc: BaseException) -> bool:
    """Whether a failed step was answered by the plugin (a refusal, or nonsense)."""
    return isinstance(exc, PluginCallError | PluginBadAnswer) and \
        not isinstance(exc, PluginGone)


class Owed:
    """Undoes what plugins hold for gone endpoints, durably."""

    def __init__(self, drivers: NetworkPlugins, networks: Callable[[], Iterable[Network]],
                 save: Callable[[Network], Awaitable[None]]) -> None:
        self.drivers = drivers
        self._networks = networks
        self._save = save  # the network's record, under its own lock
        self._busy: dict[str, trio.Event] = {}  # endpoint id -> set when its undoing ends
        self._retry: dict[str, tuple[float, float]] = {}  # -> (when, pause)
        self._wake = trio.Event()
        self._starting: set[str] = set()
        # containers running on under conmon since before the start (live restore): their
        # entries are not owed until they end (``spare_no_more``)
        self.spared: set[str] = set()

    def owed(self, net: Network) -> list[str]:
        """The endpoint ids of ``net`` whose entries are owed (not live, nor being set up,
        nor a spared container's)."""
        live = {i.endpoint_id for i in net.endpoints.values()} | self._starting
        return [eid for eid, held in net.held.items()
                if eid not in live and held.container not in self.spared]

    def spare_no_more(self, cid: str) -> None:
        """Container ``cid`` has ended: what its plugins hold is owed now."""
        if cid in self.spared:
            self.spared.discard(cid)
            self.wake()

    @contextlib.contextmanager
    def setting_up(self, eid: str) -> Iterator[None]:
        """``eid`` is not owed while its endpoint is being made (recorded, not yet live)."""
        self._starting.add(eid)
        try:
            yield
        finally:
            self._starting.discard(eid)

    def wake(self) -> None:
        self._wake.set()

    async def undo(self, net: Network, eid: str) -> bool:
        """Undo the entry ``eid`` of ``net``; whether all of it is done. The record is
        saved with what is left (the entry gone once nothing is).

        Cancellation: shielded; each call is bounded by the plugin timeout.
        """
        held = net.held.get(eid)
        if held is None:
            return True
        done = self._busy.get(eid)
        if done is not None:  # another task is at it: its outcome is this one's
            await done.wait()
            return eid not in net.held
        done = self._busy[eid] = trio.Event()
        try:
            with trio.CancelScope(shield=True):
                complete = await self._steps(net, eid, held)
                if complete:
                    net.held.pop(eid, None)
                    self._retry.pop(eid, None)
                await self._save(net)
        finally:
            del self._busy[eid]
            done.set()
        return complete

    async def _steps(self, net: Network, eid: str, held: Held) -> bool:
        """Each step that may be owed, in libnetwork's order; False at the first whose
        outcome is unknown (the rest stays owed)."""
        try:
            if held.external or held.joined or held.created:
                driver = await self.drivers.driver(net.driver, wait=False)
                body = remote_api.endpoint_only(net.id, eid)
                for flag, method in STEPS:
                    if getattr(held, flag):
                        await self._step(net, method, held, driver.call(
                            method, body, optional=method == "RevokeExternalConnectivity",
                            wait=False))
                        setattr(held, flag, False)
            if held.addresses:
                ipam = await self.drivers.ipam(net.ipam_driver, wait=False)
                for pool_id, address in list(held.addresses):
                    await self._step(net, "ReleaseAddress", held,
                                     release_address(ipam, pool_id, address, wait=False))
                    held.addresses.remove((pool_id, address))
        except SvcError as exc:
            log.warning("network %s: %s of the endpoint of container %s stays owed: %s",
                        net.name, _next_step(held), held.container[:12], exc)
            return False
        held.reserved = []
        return True

    async def _step(self, net: Network, method: str, held: Held,
                    call: Awaitable[object]) -> None:
        try:
            await call
        except SvcError as exc:
            if not answered(exc):
                raise
            log.warning("network %s: %s for container %s: %s (taken as done)", net.name,
                        method, held.container[:12], exc)

    async def settle(self, net: Network, cid: str | None = None) -> list[str]:
        """Undo the owed entries of ``net`` (of container ``cid`` only, if given) now, once
        each; the endpoint ids still owed after that."""
        left = []
        for eid in self.owed(net):
            held = net.held.get(eid)
            if held is None or (cid is not None and held.container != cid):
                continue
            if not await self.undo(net, eid):
                left.append(eid)
        if left:
            self.wake()
        return left

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Undo owed entries in the background until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                now = trio.current_time()
                soonest = math.inf
                for net in list(self._networks()):
                    for eid in self.owed(net):
                        when = self._retry.get(eid, (0.0, 0.0))[0]
                        if eid in self._busy:
                            continue
                        if when <= now:
                            nursery.start_soon(self._background, net, eid)
                        else:
                            soonest = min(soonest, when)
                with trio.move_on_at(soonest):
                    await self._wake.wait()
                self._wake = trio.Event()
                await trio.lowlevel.checkpoint()  # the tasks just started mark themselves busy

    async def _background(self, net: Network, eid: str) -> None:
        if eid in self._busy:
            return
        _, pause = self._retry.get(eid, (0.0, RETRY_FIRST / 2))
        pause = min(pause * 2, RETRY_MAX)
        self._retry[eid] = (trio.current_time() + pause, pause)  # (undo drops it if done)
        with contextlib.suppress(SvcError):
            await self.undo(net, eid)
        self.wake()


def _next_step(held: Held) -> str:
    for flag, method in STEPS:
        if getattr(held, flag):
            return method
    return "ReleaseAddress"
