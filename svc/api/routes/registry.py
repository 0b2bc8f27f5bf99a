"""Registry endpoints: ``POST /auth`` (login), ``GET /images/search``,
``POST /images/{name}/push``.

Credentials pass through: the login body and ``X-Registry-Auth`` go to the engine, which
neither logs nor stores them. A push answers its early failures (no such tag, refused
credentials, no registry) as HTTP errors, then streams progress; a client that goes away
cancels it at once (``respond_chunked``).
"""

from __future__ import annotations

import logging
from functools import partial

from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api.params import json_body, qint, qstr
from svc.api.progress import progress_lines
from svc.api.shaping import json_response
from svc.api.streaming import respond_chunked
from svc.api.wiring import Wired
from svc.engine.backend import RegistryBackend
from svc.models.system import AuthAnswer, AuthBody
from svc.wire.authconfig import AuthConfig, decode_auth_header

log = logging.getLogger("svc.api.registry")

bp = Blueprint("registry", __name__)
_backend: Wired[RegistryBackend] = Wired("registry")


def register(app: QuartTrio, backend: RegistryBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def header_credentials() -> AuthConfig:
    """``X-Registry-Auth``; missing, ``e30=`` or unreadable is anonymous."""
    return decode_auth_header(request.headers.get("X-Registry-Auth"))


@bp.post("/auth")
async def auth() -> Response:
    body = await json_body(AuthBody)
    assert body is not None
    credentials = AuthConfig(**body.model_dump(by_alias=False))
    token = await _backend.get().registries.login(credentials)
    return json_response(AuthAnswer(Status="Login Succeeded", IdentityToken=token).model_dump())


@bp.get("/images/search")
async def search() -> Response:
    term = qstr("term") or ""
    found = await _backend.get().registries.search(term, qint("limit"), header_credentials())
    return json_response([r.model_dump() for r in found])


@bp.post("/images/<path:name>/push")
async def push(name: str) -> Response:
    pusher = _backend.get().pusher
    job = await pusher.prepare(name, qstr("tag"), header_credentials())
    return await respond_chunked(progress_lines(partial(pusher.run, job), "push"),
                                 content_type="application/json")
