"""The Quart application: routes, the version prefix, common headers, error mapping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from quart import Response, g, request
from quart_trio import QuartTrio

from svc.api import errors as api_errors
from svc.api.afterresponse import AfterResponse
from svc.api.body import BoundedRequest, HTTPConnection
from svc.api.routes import container_files as container_files_routes
from svc.api.routes import containers as containers_routes
from svc.api.routes import events as events_routes
from svc.api.routes import execs as execs_routes
from svc.api.routes import images as images_routes
from svc.api.routes import networks as networks_routes
from svc.api.routes import system as system_routes
from svc.api.routes import volumes as volumes_routes
from svc.api.versioning import SCOPE_KEY, VersionPrefix, resolve
from svc.engine.engine import Engine
from svc.version import API_VERSION_STR, SERVER_HEADER

CORS_ALLOW_HEADERS = "Origin, X-Requested-With, Content-Type, Accept, X-Registry-Auth"
CORS_ALLOW_METHODS = "HEAD, GET, POST, DELETE, PUT, OPTIONS"


def create_app(engine: Engine, *, cors_origin: str = "",
               extensions: Sequence[Callable[..., None]] = ()) -> Any:
    """Build the ASGI application: a QuartTrio app behind the version-prefix wrapper, behind
    the one that runs what views defer until their response is sent."""
    app = QuartTrio("svc")
    app.request_class = BoundedRequest
    app.asgi_http_class = HTTPConnection
    # Streams (events, logs -f, pulls) and uploads (loads, builds) have no size or time limit.
    app.config.update(RESPONSE_TIMEOUT=None, BODY_TIMEOUT=None, MAX_CONTENT_LENGTH=None,
                      PROVIDE_AUTOMATIC_OPTIONS=False)
    app.extensions["svc.engine"] = engine
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

    app.register_blueprint(system_routes.bp)
    app.register_blueprint(events_routes.bp)
    app.register_blueprint(images_routes.bp)
    app.register_blueprint(containers_routes.bp)
    app.register_blueprint(container_files_routes.bp)
    app.register_blueprint(execs_routes.bp)
    app.register_blueprint(volumes_routes.bp)
    app.register_blueprint(networks_routes.bp)
    for extend in extensions:
        extend(app, engine)
    return AfterResponse(VersionPrefix(app))


def common_headers(cors_origin: str = "") -> list[tuple[str, str]]:
    """The headers every response carries (and that views writing their own head add)."""
    out = [("Api-Version", API_VERSION_STR), ("Server", SERVER_HEADER), ("Ostype", "linux"),
           ("Docker-Experimental", "false")]
    if cors_origin:
        out += [("Access-Control-Allow-Origin", cors_origin),
                ("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS),
                ("Access-Control-Allow-Methods", CORS_ALLOW_METHODS)]
    return out


def response_head(status: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP/1.1 response head with the common headers, for views that take over."""
    from quart import current_app

    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers),
             *(f"{k}: {v}" for k, v in current_app.config["SVC_COMMON_HEADERS"])]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def engine_of() -> Engine:
    """The engine serving the current request."""
    from quart import current_app

    engine: Engine = current_app.extensions["svc.engine"]
    return engine
