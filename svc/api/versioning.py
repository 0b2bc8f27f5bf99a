"""The ``/v<major>.<minor>`` path prefix and the API version of each request.

``VersionPrefix`` is a thin ASGI wrapper: it strips the prefix before Quart routes the path, so
every route exists with and without it, and leaves the raw value in the scope. The app's
``before_request`` then calls ``resolve`` (errors flow through the one error mapping) and
handlers read the result with ``api_version()``.
"""

from __future__ import annotations

import re
from typing import Any

from quart import g

from svc.errors import InvalidParameter
from svc.version import API_VERSION, API_VERSION_STR, MIN_API_VERSION, MIN_API_VERSION_STR

Version = tuple[int, int]

SCOPE_KEY = "svc.api_version"
PREFIX_RE = re.compile(r"^/v([0-9][^/]*)(/.*)?$")
_VERSION_RE = re.compile(r"^(\d{1,4})\.(\d{1,4})$")


def parse_version(raw: str) -> Version:
    m = _VERSION_RE.match(raw)
    if not m:
        raise InvalidParameter(f"malformed API version {raw!r}: expected <major>.<minor>, "
                               f"for example {API_VERSION_STR}")
    return int(m.group(1)), int(m.group(2))


def resolve(raw: str | None) -> Version:
    """The version a request asked for; unprefixed paths mean the current version."""
    if raw is None:
        return API_VERSION
    v = parse_version(raw)
    if v > API_VERSION:
        raise InvalidParameter(f"client version {raw} is too new. "
                               f"Maximum supported API version is {API_VERSION_STR}")
    if v < MIN_API_VERSION:
        raise InvalidParameter(f"client version {raw} is too old. Minimum supported API version "
                               f"is {MIN_API_VERSION_STR}, please upgrade your client to a "
                               "newer version")
    return v


def api_version() -> Version:
    """The API version of the current request (set before any handler runs)."""
    v: Version = g.get("api_version", API_VERSION)
    return v


class VersionPrefix:
    """ASGI wrapper: ``/v1.22/info`` is routed as ``/info`` with the version kept in the scope."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            m = PREFIX_RE.match(scope["path"])
            if m:
                scope = dict(scope)
                scope[SCOPE_KEY] = m.group(1)
                rest = m.group(2) or "/"
                scope["path"] = rest
                raw = scope.get("raw_path") or b""
                cut = raw.find(b"/", 1)
                scope["raw_path"] = raw[cut:] if cut > 0 else b"/"
        await self.app(scope, receive, send)
