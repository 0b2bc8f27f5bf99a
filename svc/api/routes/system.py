"""GET/HEAD /_ping, GET /version, GET /info."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response
from quart_trio import QuartTrio

from svc.api.shaping import json_response, shape_info, shape_version
from svc.api.versioning import api_version
from svc.api.wiring import Wired
from svc.engine.backend import SystemBackend

bp = Blueprint("system", __name__)
_backend: Wired[SystemBackend] = Wired("system")


def register(app: QuartTrio, backend: SystemBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


@bp.route("/_ping", methods=["GET", "HEAD"])
async def ping() -> Response:
    resp = Response(b"OK", status=200, content_type="text/plain; charset=utf-8")
    resp.headers["Cache-Control"] = "no-cache, no-store, must-revalidate"
    resp.headers["Pragma"] = "no-cache"
    return resp


@bp.get("/version")
async def version() -> Response:
    return json_response(shape_version(_backend.get().version(), api_version()))


@bp.get("/info")
async def info() -> Any:
    return json_response(shape_info(_backend.get().info(), api_version()))
