"""This daemon's membership of the cluster: the store connection, its node record under a
lease, and what it knows of the other nodes.

The daemon registers ``<prefix>/nodes/<advertise address>`` under a lease whose TTL is
``discovery.ttl`` and renews it every ``discovery.heartbeat``: a daemon that dies (or loses
the store) drops out of every other daemon's list once the TTL has passed, and a daemon that
stops revokes its lease so it drops out at once. The store may be unreachable at start or go
away later: the daemon goes on serving everything local, says so in ``/info``, keeps trying,
and registers again (with a new lease) when the store answers.

Cancellation: ``run`` ends with the engine's nursery; ``leave`` (shielded, bounded) revokes the
lease so that the node is gone before the daemon exits.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from svc.cluster.etcd import Etcd, EtcdError
from svc.engine.cluster.mirror import Mirror, dumps
from svc.engine.cluster.settings import (
    ClusterConfigError,
    ClusterOptions,
    StoreURL,
    parse_options,
    parse_store_url,
    resolve_advertise,
)
from svc.errors import SvcError
from svc.version import SVC_VERSION

log = logging.getLogger("svc.cluster")
LEAVE_TIMEOUT = 3.0


@dataclass(frozen=True)
class ClusterFlags:
    """The cluster flags as the user gave them."""

    store: str = ""
    advertise: str = ""
    opts: tuple[tuple[str, str], ...] = ()


@dataclass
class ClusterStatus:
    store: str
    advertise: str
    reachable: bool
    error: str
    nodes: list[str] = field(default_factory=list)


class ClusterSession:
    def __init__(self, flags: ClusterFlags, *, lookup: Callable[[str], str | None],
                 daemon_id: Callable[[], str]) -> None:
        self.flags = flags
        self.daemon_id = daemon_id
        self.url: StoreURL | None = None
        self.options = ClusterOptions()
        self.advertise = ""
        self.error = ""  # why the daemon is not (or no longer) in the cluster
        self.etcd: Etcd | None = None
        self.reachable = False
        self.lease = 0
        self.nodes: Mirror | None = None
        # run after each registration (a new lease): what this host holds in the store is
        # put again under it
        self.on_join: list[Callable[[], Awaitable[None]]] = []
        self.followers: list[Mirror] = []  # other mirrors on this client (the overlays')
        self.scope = trio.CancelScope()  # the session's own tasks
        self.stoppers: list[trio.CancelScope] = []  # tasks of others that use the client
        try:
            self._configure(flags, lookup)
        except ClusterConfigError as exc:
            self.url, self.error = None, str(exc)
            log.error("cluster: %s; this daemon runs on its own", exc)

    def _configure(self, flags: ClusterFlags, lookup: Callable[[str], str | None]) -> None:
        if not flags.store:
            if flags.advertise:
                raise ClusterConfigError("--cluster-advertise must be accompanied by "
                                         "--cluster-store")
            if flags.opts:
                raise ClusterConfigError("--cluster-store-opt needs --cluster-store")
            return
        self.url = parse_store_url(flags.store)
        self.options = parse_options(dict(flags.opts))
        if flags.advertise:
            self.advertise = resolve_advertise(flags.advertise, lookup)
        else:
            log.warning("cluster: no --cluster-advertise: this daemon reads the cluster "
                        "store but does not register as a node")
        self.etcd = Etcd(self.url.endpoints, tls=self.options.tls())
        self.error = "not reached yet"
        self.nodes = Mirror(self.etcd, self.key("nodes") + "/")

    @property
    def enabled(self) -> bool:
        return self.etcd is not None

    def key(self, *parts: str) -> str:
        assert self.url is not None
        return "/" + "/".join((self.url.prefix, *parts))

    def status(self) -> ClusterStatus:
        """What /info shows. The node list is the store's, as last watched, plus this node
        once its registration was written: the watch may not have brought that write back
        yet, and the node knows it is registered."""
        nodes = set(self.nodes.items) if self.nodes is not None else set()
        if self.reachable and self.lease and self.advertise:
            nodes.add(self.advertise)
        return ClusterStatus(self.flags.store, self.advertise or self.flags.advertise,
                             self.reachable, self.error, sorted(nodes))

    # -- running -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Stay in the cluster until cancelled or ``leave`` (returns at once without a
        store)."""
        if self.etcd is None or self.nodes is None:
            task_status.started()
            return
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._membership)
                nursery.start_soon(self.nodes.run)
                task_status.started()

    def _lost(self, why: str) -> None:
        if self.reachable or self.error == "not reached yet":
            log.warning("cluster store %s unreachable: %s; local work goes on, retrying",
                        self.flags.store, why)
        self.reachable, self.error = False, why
        for mirror in self.mirrors:  # a stream cut by a partition may hang, not fail
            mirror.current = False
            mirror.reconnect()

    @property
    def mirrors(self) -> list[Mirror]:
        return [*([self.nodes] if self.nodes is not None else []), *self.followers]

    async def _membership(self) -> None:
        """Register, renew, and register again once the lease is gone, for ever. A failed
        renewal is retried on the same lease: only etcd saying it no longer has the lease
        makes a new one (the records held by the old one would go with it)."""
        assert self.etcd is not None
        delay, alive = 0.2, False
        while True:
            try:
                if not alive:
                    await self._register()
                    alive = True
                    await self._run_hooks()
                else:
                    await trio.sleep(self.options.heartbeat)
                    if not self.lease:
                        await self.etcd.get(self.key("nodes"))  # only reachable or not
                    elif await self.etcd.keepalive(self.lease) == 0:
                        log.warning("cluster: this node's lease expired; registering again")
                        alive = False
                        continue
                    if not self.reachable:
                        log.info("cluster store %s reached again", self.flags.store)
                        self.reachable, self.error = True, ""
                        await self._run_hooks()
                delay = 0.2
            except (EtcdError, SvcError) as exc:
                self._lost(str(exc))
                await trio.sleep(delay)
                delay = min(delay * 2, max(self.options.heartbeat, 1.0))

    async def _run_hooks(self) -> None:
        for hook in list(self.on_join):
            try:
                await hook()
            except (EtcdError, SvcError, ValueError) as exc:
                log.warning("cluster: after joining: %s", exc)

    async def _register(self) -> None:
        assert self.etcd is not None
        ttl = max(1, round(self.options.ttl))
        if self.advertise:
            self.lease = await self.etcd.grant(ttl)
            await self.etcd.put(self.key("nodes", self.advertise), dumps(self.record()),
                                lease=self.lease)
        else:
            await self.etcd.get(self.key("nodes"))  # reachable, nothing to register
        if not self.reachable:
            log.info("cluster store %s reached%s", self.flags.store,
                     f"; registered as {self.advertise}" if self.advertise else "")
        self.reachable, self.error = True, ""

    def record(self) -> dict[str, Any]:
        return {"Addr": self.advertise, "ID": self.daemon_id(), "Name": socket.gethostname(),
                "Version": SVC_VERSION, "Registered": int(time.time())}

    async def leave(self) -> None:
        """Stop following the store, revoke the node's lease (it drops out at once) and
        close the connection."""
        if self.etcd is None:
            return
        for scope in (*self.stoppers, self.scope):  # nothing uses the client after this
            scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(LEAVE_TIMEOUT):
            if self.lease and self.reachable:
                try:
                    await self.etcd.revoke(self.lease)
                except EtcdError as exc:
                    log.warning("cluster: could not leave cleanly: %s", exc)
            await self.etcd.aclose()
