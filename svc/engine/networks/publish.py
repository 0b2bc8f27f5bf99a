"""A container's published ports: the userland proxy bound for each binding (all or none) and,
as dockerd, DNAT rules for ports bound on a non-loopback address; both go with ``release``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from svc.engine.networks.ipam import EndpointInfo, Network
from svc.errors import Conflict, SystemError_
from svc.network import netrules
from svc.network.firewall import Firewall, FirewallError, Rule
from svc.network.proxy import Binding, PortInUse, PortProxy

log = logging.getLogger("svc.networks")


class PortPublisher:
    """Given the daemon's firewall (a getter: it is made once the daemon's owner is known)."""

    def __init__(self, firewall: Callable[[], Firewall]) -> None:
        self.firewall = firewall
        # live restore: the rules carry loopback traffic too (no proxy while the daemon is
        # away), as dockerd's --userland-proxy=false
        self.loopback_rules = False
        self.proxies: dict[str, tuple[PortProxy, trio.CancelScope]] = {}
        self.proxy_nets: dict[str, tuple[Network, EndpointInfo]] = {}

    async def publish(self, cid: str, bindings: list[Binding], nursery: trio.Nursery,
                      net: Network) -> None:
        """Bind the container's published ports and forward them to its address on ``net``,
        in ``nursery`` until ``release``. A port that cannot be bound is a 409 and nothing
        stays bound."""
        info = net.endpoints[cid]
        try:
            proxy = await PortProxy.bind(bindings)
        except PortInUse as exc:
            raise Conflict(f"driver failed programming external connectivity on endpoint "
                           f"{info.container.lstrip('/')}: {exc}") from None
        if ":" not in info.endpoint.address and not net.internal:
            rules_scope = ports_scope(cid)
            try:
                if self.loopback_rules:
                    await trio.to_thread.run_sync(netrules.route_localnet, net.bridge)
                await trio.to_thread.run_sync(self.firewall().apply, rules_scope,
                                              self._dnat(net, info, proxy))
            except FirewallError as exc:
                proxy.close()
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.firewall().apply, rules_scope, [])
                raise SystemError_(str(exc)) from exc
        scope = trio.CancelScope()
        self.proxies[cid] = (proxy, scope)
        self.proxy_nets[cid] = (net, info)

        async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                        ) -> None:
            with scope:
                await proxy.serve(info.endpoint.address, task_status=task_status)

        await nursery.start(serve)

    def _dnat(self, net: Network, info: EndpointInfo, proxy: PortProxy) -> list[Rule]:
        return [rule for b in proxy.bindings if ":" not in b.host_ip
                for rule in netrules.dnat_rules(net.bridge, b.proto, b.host_ip, b.host_port,
                                                info.endpoint.address, b.port,
                                                loopback=self.loopback_rules)]

    async def forget_others(self, keep: set[str]) -> None:
        """After a live restore: the rules of the published ports of containers not taken
        back go (ids in ``keep`` were); all were kept at the start (``hostbridges.setup``)."""
        scopes = {ports_scope(cid) for cid in keep}
        try:
            await trio.to_thread.run_sync(self.firewall().drop,
                                          lambda s: is_ports_scope(s) and s not in scopes)
        except FirewallError as exc:
            log.error("removing the port rules of containers gone: %s", exc)

    def published(self, cid: str) -> list[Binding] | None:
        found = self.proxies.get(cid)
        return None if found is None else found[0].bindings

    async def release(self, cid: str) -> None:
        """Stop the container's proxy and remove its port rules (idempotent; shielded)."""
        proxied = self.proxies.pop(cid, None)
        if proxied is None:
            return
        proxied[1].cancel()
        if self.proxy_nets.pop(cid, None) is not None:
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(self.firewall().apply, ports_scope(cid), [])
                except FirewallError as exc:
                    log.error("removing the port rules of %s: %s", cid[:12], exc)
        proxied[0].close()


def ports_scope(cid: str) -> str:
    return f"ports-{cid[:12]}"


def is_ports_scope(scope: str) -> bool:
    return scope.startswith("ports-")
