"""The Quart application: routes, the version prefix, common headers, error mapping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from quart import Response, g, request
from quart_trio import QuartTrio

from svc.api import errors as api_errors
from svc.api.afterresponse import AfterResponse
from svc.api.authz import Authorization
from svc.api.body import BoundedRequest, HTTPConnection
from svc.api.fastpath import PlainRoutes
from svc.api.heads import common_headers
from svc.api.routes import build as build_routes
from svc.api.routes import container_files as container_files_routes
from svc.api.routes import container_reads as container_reads_routes
from svc.api.routes import containers as containers_routes
from svc.api.routes import events as events_routes
from svc.api.routes import execs as execs_routes
from svc.api.routes import images as images_routes
from svc.api.routes import networks as networks_routes
from svc.api.routes import registry as registry_routes
from svc.api.routes import system as system_routes
from svc.api.routes import volumes as volumes_routes
from svc.api.versioning import SCOPE_KEY, VersionPrefix, resolve
from svc.engine.engine import Engine


def create_app(engine: Engine, *, cors_origin: str = "",
               extensions: Sequence[Callable[..., None]] = ()) -> SvcApp:
    """Build the ASGI application: a QuartTrio app behind the version-prefix wrapper, behind
    the one that runs what views defer until their response is sent."""
    app = QuartTrio("svc")
    app.request_class = BoundedRequest
    app.asgi_http_class = HTTPConnection
    # Streams (events, logs -f, pulls) and uploads (loads, builds) have no size or time limit.
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None, MAX_CONTENT_LENGTH=None,
                      PROVIDE_AUTOMATIC_OPTIONS=False)
    api_errors.install(app)

    @app.before_request
    async def _select_version() -> None:
        raw = request.scope.get(SCOPE_KEY)
        g.api_version = resolve(raw if isinstance(raw, str) else None)

    app.config["SVC_COMMON_HEADERS"] = common_headers(cors_origin)

    @app.after_request
    async def _common_headers(resp: Response) -> Response:
        for name, value in app.config["SVC_COMMON_HEADERS"]:
            resp.headers[name] = value
        return resp

    if cors_origin:
        @app.route("/<path:_any>", methods=["OPTIONS"])
        @app.route("/", methods=["OPTIONS"])
        async def _preflight(_any: str = "") -> Response:
            return Response(b"", status=200)

    # each router gets the slice of the engine it needs (svc.engine.backend)
    system_routes.register(app, engine)
    events_routes.register(app, engine)
    registry_routes.register(app, engine)
    images_routes.register(app, engine)
    build_routes.register(app, engine)
    containers_routes.register(app, engine)
    container_reads_routes.register(app, engine)
    container_files_routes.register(app, engine)
    execs_routes.register(app, engine)
    volumes_routes.register(app, engine)
    networks_routes.register(app, engine)
    for extend in extensions:
        extend(app, engine)
    common = app.config["SVC_COMMON_HEADERS"]
    if engine.authz is not None:
        # every request through the plugins, so none answered without the app (fastpath);
        # inside AfterResponse: what a view defers follows the answer the plugins let out
        return SvcApp(AfterResponse(Authorization(VersionPrefix(app), engine.authz, common)),
                      None)
    return SvcApp(AfterResponse(VersionPrefix(app)), PlainRoutes(app.url_map, common))


class SvcApp:
    """The ASGI application svcd serves, with its plain routes (``svc.api.fastpath``) for
    the protocol to answer without it (None: every request goes through the app)."""

    def __init__(self, asgi: Any, plain: PlainRoutes | None) -> None:
        self.asgi = asgi
        self.plain = plain

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.asgi(scope, receive, send)
