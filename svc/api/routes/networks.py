"""GET /networks and GET /networks/{id} (the built-in bridge, host and none)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from svc.api.params import qfilters
from svc.api.shaping import json_response
from svc.api.versioning import api_version
from svc.engine.networks import Network, NetworkService
from svc.errors import InvalidParameter
from svc.models.networks import IPAMBody, IPAMConfigEntry, NetworkBody, NetworkContainer

bp = Blueprint("networks", __name__)


def networks() -> NetworkService:
    from svc.api.app import engine_of

    return engine_of().networks


def shape(n: Network) -> dict[str, Any]:
    config = [IPAMConfigEntry(Subnet=n.subnet, Gateway=n.gateway)] if n.subnet else []
    options = {"com.docker.network.bridge.name": n.bridge,
               "com.docker.network.bridge.default_bridge": "true"} if n.bridge else {}
    containers = {cid: NetworkContainer(
        Name=info.container.lstrip("/"), EndpointID=info.endpoint_id,
        MacAddress=info.endpoint.mac,
        IPv4Address=f"{info.endpoint.address}/{info.endpoint.prefixlen}")
        for cid, info in n.endpoints.items() if info.attached}
    body = NetworkBody(Name=n.name, Id=n.id, Driver=n.driver, IPAM=IPAMBody(Config=config),
                       Containers=containers, Options=options).model_dump()
    if api_version() < (1, 23):
        for key in ("EnableIPv6", "Internal"):
            body.pop(key)
        body["IPAM"].pop("Options")
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
        if "type" in filters and "builtin" not in filters["type"]:
            continue  # every network is built in until user networks exist
        found.append(shape(n))
    return json_response(found)


@bp.get("/networks/<ref>")
async def inspect(ref: str) -> Response:
    return json_response(shape(networks().resolve(ref)))
