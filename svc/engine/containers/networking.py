"""A container's networks from the containers service's side: its settings per network at
create (NetworkingConfig), live connect and disconnect, and which networks it joins (the
list's ``network`` filter). The wiring itself is ``networks.NetworkService``'s."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from svc.engine.containers.container import Container
from svc.engine.containers.links import parse_link
from svc.engine.containers.state import State
from svc.engine.networks import ports
from svc.engine.networks.endpoints import EndpointPlan
from svc.engine.networks.service import NetworkService
from svc.errors import Conflict, InvalidParameter, NotFound, SvcError
from svc.models.containers import CreateBody, EndpointConfigBody


class ContainerNetworking:
    """The containers service's network side: it needs the networks and a way to save a
    container's record."""

    def __init__(self, networks: NetworkService,
                 save: Callable[[Container], Awaitable[None]]) -> None:
        self.networks = networks
        self.save = save

    def net_config(self, mode: str, body: CreateBody) -> dict[str, EndpointPlan]:
        """The settings of the container's network (NetworkingConfig), by network id; a
        custom NetworkMode must name an existing network (404)."""
        nets = self.networks
        if mode in ("", "default", "bridge", "host", "none") or mode.startswith("container:"):
            primary = nets.default_bridge if mode in ("", "default", "bridge") else None
        else:
            primary = nets.resolve(mode)
        endpoints = (body.NetworkingConfig.EndpointsConfig or {}) if body.NetworkingConfig \
            else {}
        out: dict[str, EndpointPlan] = {}
        for ref, cfg in endpoints.items():
            net = nets.default_bridge if ref == "default" else nets.resolve(ref)
            if primary is None or net.id != primary.id:
                raise InvalidParameter(f"NetworkingConfig names {ref}, which is not the "
                                       "container's NetworkMode (connect it after the create)")
            out[net.id] = _endpoint_plan(cfg)
        return out

    async def connect(self, c: Container, ref: str, cfg: EndpointConfigBody | None) -> None:
        """Join network ``ref`` (live if running: a new ethN, no default route)."""
        nets = self.networks
        net = nets.resolve(ref)
        async with c.lock:
            mode = c.host_config.NetworkMode or "default"
            if mode in ("host", "none") or mode.startswith("container:"):
                raise InvalidParameter(f"container sharing network namespace with another "
                                       f"container or with host or none cannot be connected "
                                       f"to {net.name}")
            if net.name in ("host", "none"):
                raise InvalidParameter(f"container cannot be connected to the {net.name} "
                                       "network")
            if any(n.id == net.id for n, _ in nets.plan(mode, c.net_config)):
                raise Conflict(f"container {c.short_id} is already connected to network "
                               f"{net.name}")
            config = _endpoint_plan(cfg)
            attached = False
            with trio.CancelScope(shield=True):  # wired and recorded, or neither
                if c.live is not None and c.state.status in (State.RUNNING, State.PAUSED):
                    await nets.reserve(c.id, c.name, net, nets.next_ifname(c.id),
                                       config.ipv4, list(config.aliases), config.ipv6,
                                       links=list(config.links),
                                       ports=ports.plugin_options(c.host_config, c.config))
                    await nets.attach(c.id, c.live.pid, net, default_route=False,
                                      announce=False)
                    attached = True
                c.net_config[net.id] = config
                await self.save(c)
                c.notify()
        if attached:  # once the connection is recorded too
            nets.announce("connect", c.id, net)

    async def disconnect(self, c: Container, ref: str) -> None:
        """Leave network ``ref`` (live if running)."""
        nets = self.networks
        net = nets.resolve(ref)
        async with c.lock:
            mode = c.host_config.NetworkMode or "default"
            planned = nets.plan(mode, c.net_config)
            if not any(n.id == net.id for n, _ in planned):
                raise InvalidParameter(f"container {c.short_id} is not connected to network "
                                       f"{net.name}")
            left = await nets.release(c.id, only=net, announce=False,
                                      pid=c.live.pid if c.live is not None else None)
            if planned[0][0].id == net.id:
                c.net_config[net.id] = EndpointPlan(disconnected=True)
            else:
                c.net_config.pop(net.id, None)
            await self.save(c)
            c.notify()
        for gone in left:  # once the disconnection is recorded too
            nets.announce("disconnect", c.id, gone)

    async def remove_link(self, c: Container, alias: str) -> None:
        """Drop the legacy link ``alias`` of ``c`` (``DELETE /containers/<c>/<alias>?link=1``).
        As with dockerd, a running container's /etc/hosts and environment keep it until its
        next start. 404 when ``c`` has no such link."""
        async with c.lock:
            links = list(c.host_config.Links or [])
            kept = [e for e in links if _alias_of(e) != alias]
            if len(kept) == len(links):
                raise NotFound(f"No such container: {c.name.lstrip('/')}/{alias}")
            c.host_config.Links = kept or None
            await self.save(c)
            c.notify()

    def network_names(self, c: Container) -> set[str]:
        """Names and ids of the networks ``c`` joins (the list's ``network`` filter)."""
        mode = c.host_config.NetworkMode or "default"
        try:
            plan = self.networks.plan(mode, c.net_config)
        except SvcError:
            plan = []
        out = {x for n, _ in plan for x in (n.name, n.id)}
        return out | ({mode} if mode in ("host", "none") else set())



def _alias_of(entry: str) -> str:
    try:
        return parse_link(entry)[1]
    except InvalidParameter:
        return ""


def _endpoint_plan(cfg: EndpointConfigBody | None) -> EndpointPlan:
    """The settings checked: addresses (EndpointPlan) and each link's form (400 naming it)."""
    plan = EndpointPlan.from_body(cfg)
    for entry in plan.links:
        parse_link(entry)
    return plan
