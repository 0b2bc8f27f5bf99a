"""The one place where error kinds become HTTP status codes and bodies.

Bodies are what the engines of the 1.22/1.23 generation send and what 1.23 clients print as
they are: ``text/plain; charset=utf-8``, the bare message and a newline. Routes that the spec
gives JSON error bodies (archive) mark themselves with ``json_errors`` and get
``{"message": ...}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from quart import Response, g
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.exceptions import NotFound as RouteNotFound

from svc import errors

log = logging.getLogger("svc.api")

STATUS: dict[type[errors.SvcError], int] = {
    errors.NotModified: 304,
    errors.InvalidParameter: 400,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.NotAcceptable: 406,
    errors.Conflict: 409,
    errors.Unavailable: 503,
    errors.Unsupported: 501,
    errors.NoSpace: 507,
    errors.SystemError_: 500,
}

P = ParamSpec("P")
R = TypeVar("R")


def status_of(exc: errors.SvcError) -> int:
    """The status of the most specific kind: an error that is both a machine failure and
    something more telling (the registry adapter's ``NotFound`` is also a ``SystemError_``)
    gets the telling one's status."""
    found = [STATUS[kind] for kind in type(exc).__mro__ if kind in STATUS]
    telling = [s for s in found if s != 500]
    return telling[0] if telling else 500


def json_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Mark a route whose errors the spec gives as JSON bodies (archive 400/403/404)."""

    @wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        g.json_errors = True
        return await fn(*args, **kwargs)

    return wrapper


def error_response(status: int, message: str) -> Response:
    if status == 304:
        return Response(b"", status=304)
    if g.get("json_errors"):
        body = json.dumps({"message": message}).encode() + b"\n"
        return Response(body, status=status, content_type="application/json")
    resp = Response((message + "\n").encode(), status=status,
                    content_type="text/plain; charset=utf-8")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


async def handle_svc_error(exc: errors.SvcError) -> Response:
    status = status_of(exc)
    if status >= 500:
        log.error("%s: %s", type(exc).__name__, exc)
    return error_response(status, exc.message)


async def handle_http_exception(exc: HTTPException) -> Response:
    # dockerd answers unknown routes and wrong methods alike with 404 "page not found".
    if isinstance(exc, (RouteNotFound, MethodNotAllowed)):
        return error_response(404, "page not found")
    return error_response(exc.code or 500, exc.description or exc.name)


async def handle_unexpected(exc: Exception) -> Response:
    full = errors.as_no_space(exc)
    if full is not None:  # an ordinary condition: no traceback, a clear answer
        return await handle_svc_error(full)
    log.exception("unexpected error while serving a request")
    return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def install(app: Any) -> None:
    app.register_error_handler(errors.SvcError, handle_svc_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_unexpected)
