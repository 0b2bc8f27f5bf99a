"""GET /volumes, POST /volumes/create, GET and DELETE /volumes/{name}."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response
from quart_trio import QuartTrio

from svc.api.params import json_body, qfilters
from svc.api.shaping import json_response
from svc.api.versioning import api_version
from svc.api.wiring import Wired
from svc.engine.backend import VolumesBackend
from svc.engine.volumes.base import Volume
from svc.engine.volumes.service import VolumeService
from svc.errors import InvalidParameter
from svc.models.volumes import VolumeBody, VolumeCreateBody

bp = Blueprint("volumes", __name__)
_backend: Wired[VolumesBackend] = Wired("volumes")


def register(app: QuartTrio, backend: VolumesBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)
TRUTH = {"true": True, "1": True, "false": False, "0": False}


def volumes() -> VolumeService:
    return _backend.get().volumes


def shape(v: Volume) -> dict[str, Any]:
    """The volume object, the same at every version (``Labels`` came with v1.23; no older
    client breaks on it). A plugin's volume also shows its ``Scope`` and, when the plugin's
    ``Get`` gave one, its ``Status`` (as later engines showed them)."""
    body = VolumeBody(Name=v.name, Driver=v.driver, Mountpoint=v.mountpoint,
                      Labels=v.labels or None)
    out = body.model_dump()
    if not v.local:
        out["Scope"] = v.scope or "local"
        if v.status:
            out["Status"] = v.status
    return out


@bp.get("/volumes")
async def list_volumes() -> Response:
    filters = qfilters(("dangling", "name", "driver", "label"))
    dangling = None
    for value in filters.get("dangling", []):
        if value.lower() not in TRUTH:
            raise InvalidParameter(f"Invalid filter 'dangling={value}': true or false")
        dangling = TRUTH[value.lower()]
    found, warnings = await volumes().select(
        dangling, names=filters.get("name"), drivers=filters.get("driver"),
        labels=filters.get("label"))
    return json_response({"Volumes": [shape(v) for v in found], "Warnings": warnings or None})


@bp.post("/volumes/create")
async def create() -> Response:
    body = await json_body(VolumeCreateBody, required=False) or VolumeCreateBody()
    if body.Labels and api_version() < (1, 23):
        body.Labels = None  # labels came with v1.23
    v = await volumes().create(body.Name or None, driver=body.Driver,
                               options=body.DriverOpts, labels=body.Labels)
    return json_response(shape(v), status=201)


@bp.get("/volumes/<name>")
async def inspect(name: str) -> Response:
    return json_response(shape(await volumes().inspect(name)))


@bp.delete("/volumes/<name>")
async def remove(name: str) -> Response:
    await volumes().remove(name)
    return Response(b"", status=204)
