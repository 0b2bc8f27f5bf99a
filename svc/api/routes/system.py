"""GET/HEAD /_ping, GET /version, GET /info."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from svc.api.shaping import json_response, shape_info, shape_version
from svc.api.versioning import api_version

bp = Blueprint("system", __name__)


@bp.route("/_ping", methods=["GET", "HEAD"])
async def ping() -> Response:
    resp = Response(b"OK", status=200, content_type="text/plain; charset=utf-8")
    resp.headers["Cache-Control"] = "no-cache, no-store, must-revalidate"
    resp.headers["Pragma"] = "no-cache"
    return resp


@bp.get("/version")
async def version() -> Response:
    from svc.api.app import engine_of

    return json_response(shape_version(engine_of().version(), api_version()))


@bp.get("/info")
async def info() -> Any:
    from svc.api.app import engine_of

    return json_response(shape_info(engine_of().info(), api_version()))
