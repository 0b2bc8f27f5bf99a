"""The networks endpoints: list, inspect, create, remove, connect, disconnect."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response
from quart_trio import QuartTrio

from svc.api.params import json_body, qfilters
from svc.api.shaping import json_response
from svc.api.wiring import Wired
from svc.engine.backend import NetworksBackend
from svc.engine.networks.ipam import CreateSpec, Network
from svc.engine.networks.service import NetworkService
from svc.errors import InvalidParameter
from svc.models.networks import (
    ConnectBody,
    DisconnectBody,
    IPAMBody,
    IPAMConfigEntry,
    NetworkBody,
    NetworkContainer,
    NetworkCreateBody,
    NetworkCreateResponse,
)

bp = Blueprint("networks", __name__)
_backend: Wired[NetworksBackend] = Wired("networks")


def register(app: QuartTrio, backend: NetworksBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def networks() -> NetworkService:
    return _backend.get().networks


def _pool(subnet: str, ip_range: str = "", gateway: str = "",
          aux: dict[str, str] | None = None) -> dict[str, Any]:
    """An IPAM Config entry as dockerd writes it: empty fields left out."""
    return {k: v for k, v in (("Subnet", subnet), ("IPRange", ip_range), ("Gateway", gateway),
                              ("AuxiliaryAddresses", aux)) if v}


def shape(n: Network) -> dict[str, Any]:
    given = n.configured  # the pool the create asked for, shown as asked (the engines did)
    if given:
        config = [_pool(given["Subnet"], given.get("IPRange", ""), given.get("Gateway", ""),
                        n.aux)]
    else:  # none asked for: the pool chosen, with its gateway
        config = [_pool(n.subnet, n.ip_range, n.gateway, n.aux)] if n.subnet else []
    if n.subnet6:
        config.append(_pool(n.subnet6, gateway=n.gateway6))
    elif n.declared6:
        config.append(_pool(n.declared6["Subnet"], gateway=n.declared6.get("Gateway", "")))
    options = dict(n.options)
    if n.builtin and n.bridge:
        options.update({"com.docker.network.bridge.name": n.bridge,
                        "com.docker.network.bridge.default_bridge": "true"})
    containers = {cid: NetworkContainer(
        Name=info.container.lstrip("/"), EndpointID=info.endpoint_id,
        MacAddress=info.endpoint.mac,
        IPv4Address=f"{info.endpoint.address}/{info.endpoint.prefixlen}",
        IPv6Address=f"{info.endpoint.address6}/{info.endpoint.prefixlen6}"
        if info.endpoint.address6 else "")
        for cid, info in n.endpoints.items() if info.attached}
    body = NetworkBody(Name=n.name, Id=n.id, Scope=n.plugin_scope or n.scope, Driver=n.driver,
                       IPAM=IPAMBody(Driver=n.ipam_driver or "default", ipam_config=[],
                                     Options=n.ipam_options or None),
                       Internal=n.internal, EnableIPv6=bool(n.subnet6), Containers=containers,
                       Options=options, Labels=n.labels or None).model_dump()
    body["IPAM"]["Config"] = config
    # The same shape at every version: compose 1.x reads Internal at 1.22 and compares the
    # whole IPAM object ("Options": null included); no client of an older version breaks on
    # a field its engine did not send yet.
    return body


@bp.get("/networks")
async def list_networks() -> Response:
    filters = qfilters(("name", "id", "type"))
    for t in filters.get("type", []):
        if t not in ("custom", "builtin"):
            raise InvalidParameter(f"Invalid filter: 'type'='{t}': custom or builtin")
    found = []
    for n in sorted(networks().networks.values(), key=lambda n: n.name):
        if "name" in filters and not any(f in n.name for f in filters["name"]):
            continue
        if "id" in filters and not any(f in n.id for f in filters["id"]):
            continue
        if "type" in filters and ("builtin" if n.builtin else "custom") not in filters["type"]:
            continue
        found.append(shape(n))
    return json_response(found)


@bp.get("/networks/<path:ref>")
async def inspect(ref: str) -> Response:
    return json_response(shape(networks().resolve(ref)))


@bp.post("/networks/create")
async def create() -> Response:
    body = await json_body(NetworkCreateBody)
    assert body is not None
    entries = (body.IPAM.Config or []) if body.IPAM else []
    v4 = [e for e in entries if ":" not in (e.Subnet or "")]
    v6 = [e for e in entries if ":" in (e.Subnet or "")]
    if len(v4) > 1 or len(v6) > 1:
        raise InvalidParameter("IPAM Config: one IPv4 and one IPv6 subnet per network")
    if v6 and v6[0].AuxiliaryAddresses:
        raise InvalidParameter("AuxiliaryAddresses are taken on the IPv4 pool only")
    e = v4[0] if v4 else IPAMConfigEntry()
    e6 = v6[0] if v6 else IPAMConfigEntry()
    net, warning = await networks().create(CreateSpec(
        body.Name, driver=body.Driver, ipam_driver=body.IPAM.Driver if body.IPAM else "",
        subnet=e.Subnet or "", ip_range=e.IPRange or "", gateway=e.Gateway or "",
        internal=body.Internal, options=body.Options, labels=body.Labels,
        subnet6=e6.Subnet or "", gateway6=e6.Gateway or "",
        ipam_options=body.IPAM.Options if body.IPAM else None,
        aux=e.AuxiliaryAddresses, enable_ipv6=body.EnableIPv6,
        check_duplicate=body.CheckDuplicate))
    return json_response(NetworkCreateResponse(Id=net.id, Warning=warning), status=201)


@bp.delete("/networks/<path:ref>")
async def remove(ref: str) -> Response:
    await networks().remove(networks().resolve(ref), [])
    return Response(b"", status=204)


@bp.post("/networks/<path:ref>/connect")
async def connect(ref: str) -> Response:
    body = await json_body(ConnectBody)
    assert body is not None
    svc = _backend.get().containers
    await svc.connect(svc.resolve(body.Container), ref, body.EndpointConfig)
    return Response(b"", status=200)


@bp.post("/networks/<path:ref>/disconnect")
async def disconnect(ref: str) -> Response:
    body = await json_body(DisconnectBody)
    assert body is not None
    svc = _backend.get().containers
    await svc.disconnect(svc.resolve(body.Container), ref)
    return Response(b"", status=200)
