"""GET/HEAD /_ping, GET /version, GET /info."""

from __future__ import annotations

from typing import Any

from quart import Blueprint
from quart_trio import QuartTrio

from svc.api.fastpath import Answer, Plain, plain_route
from svc.api.shaping import json_bytes, json_response, shape_info, shape_version
from svc.api.versioning import Version, api_version
from svc.api.wiring import Wired
from svc.engine.backend import SystemBackend

bp = Blueprint("system", __name__)
_backend: Wired[SystemBackend] = Wired("system")


def register(app: QuartTrio, backend: SystemBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


_PONG = Answer(b"OK", "text/plain; charset=utf-8", headers=[
    ("Cache-Control", "no-cache, no-store, must-revalidate"), ("Pragma", "no-cache")])


@plain_route(bp, "/_ping", methods=("GET", "HEAD"))
def ping(req: Plain) -> Answer:
    return _PONG


_VERSIONS: dict[Version, bytes] = {}  # the daemon's version answer does not change


@plain_route(bp, "/version")
def version(req: Plain) -> Answer:
    body = _VERSIONS.get(req.version)
    if body is None:
        body = json_bytes(shape_version(_backend.get().version(), req.version))
        _VERSIONS[req.version] = body
    return Answer(body)


@bp.get("/info")
async def info() -> Any:
    return json_response(shape_info(_backend.get().info(), api_version()))
