"""Plain routes: the answers to the requests that clients make most, without the cost of an
ASGI request (about 1.3 ms of CPU each).

``/_ping`` (every docker CLI command starts with one), ``/version``, a container's inspect
and the container list are asked for far more often than anything else, and each costs
little to answer. Through the full stack (hypercorn's HTTP stream and a task for the app,
quart-trio's nursery and two more tasks, Quart's request context, hooks and ``Response``)
svc spent over a millisecond of CPU on a ``/_ping``; dockerd spends 0.12 ms.

A plain route is an ordinary Quart route (``plain_route``): Quart matches and serves it as
usual. Its view is also kept here, keyed by its endpoint, as a function of a ``Plain``
request that returns an ``Answer`` right away (no await, so nothing to cancel). The HTTP/1.1
protocol (``svc.api.hijack``) asks ``PlainRoutes.answer`` about each GET or HEAD without a
body: the path is routed by the app's own URL map (Quart's routing, bound once), and when it
names a plain route whose view answers, the answer is written directly. Anything else
(another route, a version to refuse, a view that raises, because the answer is an error
or needs I/O) returns None and the request goes the full way, where the same view runs under
Quart and errors are mapped as everywhere else.

A POST's plain form (``plain_alternative(..., post=True)``) is asked about once the request's
whole body has come (``svc.api.plainstream``); its view gets the body (``Plain.body``). Such
a view may act (an exec's create), so it must check everything first and answer once it has
acted: a view that raises has done nothing, and the full way then answers the error. ``docker
exec`` is the case: create, start and inspect are plain.

Two refinements: a request that arrives as one simple head (``PlainRoutes.quick``) is
answered before h11 parses it at all, and a view may answer with a ``Streamer`` (a plain
stream: ``GET /events``), for which the connection is taken over and the stream run in the
connection's task group; asked for in a connection's first read, the stream is served
without hypercorn's protocol at all (``svc.api.barestream``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote

from quart import Blueprint, Response, request
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map

from svc.api.versioning import PREFIX_RE, Version, api_version, resolve
from svc.errors import SvcError

log = logging.getLogger("svc.api")
# a request head of visible ASCII, spaces, tabs and line ends only; a header name a token
_SIMPLE_HEAD = re.compile(rb"[\x21-\x7e][\x20-\x7e\t\r\n]*")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NOT_PLAIN = frozenset({b"transfer-encoding", b"upgrade", b"expect"})
# paths whose route is remembered (``PlainRoutes._route``): ~520 bytes each, and one per
# container read (its id is in the path), so 1024 covers the bench's 500 containers twice over
ROUTES_KEPT = 1024
# request heads whose plain stream is remembered (``PlainRoutes.stream``): a client that opens
# many streams sends one head over and over
STREAM_HEADS_KEPT = 64
PHRASES = {status.value: status.phrase.encode() for status in HTTPStatus}


@dataclass
class Plain:
    """A request as a plain view sees it: a bodiless GET or HEAD, or a POST with its whole
    body (``svc.api.plainstream.PendingPost``)."""

    version: Version
    args: MultiDict[str, str]
    body: bytes = b""
    content_type: str | None = None
    upgrade: bool = False  # ``Connection: Upgrade`` and ``Upgrade: tcp`` (a hijack's 101)


@dataclass
class Posted:
    """A POST's body, whole, and what its plain view needs of its head."""

    body: bytes
    content_type: str | None
    upgrade: bool  # ``Connection: Upgrade`` and ``Upgrade: tcp`` (a hijack's 101)


@dataclass
class Answer:
    """A whole response: status, content type, body and any headers of the view's own."""

    body: bytes
    content_type: str = "application/json"
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)

    def response(self) -> Response:
        resp = Response(self.body, status=self.status, content_type=self.content_type)
        for name, value in self.headers:
            resp.headers[name] = value
        return resp


PlainView = Callable[..., Answer]
PlainAlternative = Callable[..., "Answer | Streamer | None"]
_VIEWS: dict[str, PlainAlternative] = {}
_STREAMS: set[str] = set()  # the endpoints whose plain views answer with a ``Streamer``
_POSTS: set[str] = set()  # the endpoints whose plain views take a POST with its body


def plain_route(bp: Blueprint, rule: str, methods: tuple[str, ...] = ("GET",)) \
        -> Callable[[PlainView], PlainView]:
    """Register ``view(req, **path_values) -> Answer`` as a Quart route of ``bp`` and as a
    plain route (see the module)."""
    def register(view: PlainView) -> PlainView:
        async def serve(**values: Any) -> Response:
            req = Plain(api_version(), request.args)
            return view(req, **values).response()

        serve.__name__ = view.__name__
        bp.route(rule, methods=list(methods))(serve)
        _VIEWS[f"{bp.name}.{view.__name__}"] = view
        return view
    return register


def plain_alternative(bp: Blueprint, endpoint: str, *, stream: bool = False,
                      post: bool = False) -> Callable[[PlainAlternative], PlainAlternative]:
    """Register ``view(req, **path_values) -> Answer | Streamer | None`` as the plain form
    of ``bp``'s route ``endpoint``, whose Quart view stays: None sends the request the full
    way (a query the plain view does not serve, such as one that needs I/O). ``stream``: it
    answers with a ``Streamer`` (served bare, ``svc.api.barestream``), and its answer must
    depend on the request alone: it is kept per request head (``PlainRoutes.stream``).
    ``post``: the route is a POST's, and its plain view is given the body (``Plain.body``);
    a view that has done something must answer, as its effect cannot be undone."""
    def register(view: PlainAlternative) -> PlainAlternative:
        _VIEWS[f"{bp.name}.{endpoint}"] = view
        if stream:
            _STREAMS.add(f"{bp.name}.{endpoint}")
        if post:
            _POSTS.add(f"{bp.name}.{endpoint}")
        return view
    return register


def args_of(raw: str) -> MultiDict[str, str]:
    return MultiDict(parse_qsl(raw, keep_blank_values=True)) if raw else MultiDict()


@dataclass
class Streamer:
    """A plain view's stream: ``run(raw, head)`` is given the connection once it is taken
    over and writes ``head`` (a chunked 200 that closes the connection) itself, after
    whatever must happen before the client sees it (an events subscription).

    ``adopt(conn, head)``, if given, opens the same stream with no task behind it (in the
    server's accept loop: ``svc.api.taskless``): True when it took the connection, False
    when this stream needs a task from the start (nothing was done nor written then).

    ``head``: the head ``run`` is given, when not the chunked 200 (a hijack's raw stream)."""

    run: Callable[[Any, bytes], Awaitable[None]]
    content_type: str = "application/json"
    adopt: Callable[[Any, bytes], bool] | None = None
    head: bytes | None = None


@dataclass
class Reply:
    """What the protocol writes for a plain route: an answer, or a stream's head and run."""

    status: int = 200
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    stream: Streamer | None = None
    head: bytes = b""
    wire: bytes = b""  # the whole response, when written without h11 (``PlainRoutes.quick``)


def _request_line(data: bytes) -> tuple[bytes, bytes] | None:
    """``(method, target)`` of a head whose request line is a GET or HEAD of HTTP/1.1."""
    parts = data[: data.find(b"\r\n")].split(b" ")
    if len(parts) != 3 or parts[2] != b"HTTP/1.1" or parts[0] not in (b"GET", b"HEAD"):
        return None
    return parts[0], parts[1]


def _simple_request(data: bytes) -> tuple[bytes, bytes] | None:
    """``(method, target)`` when ``data`` is exactly one simple request head (see
    ``PlainRoutes.quick``), else None."""
    if not data.endswith(b"\r\n\r\n") or not _SIMPLE_HEAD.fullmatch(data):
        return None
    request = _request_line(data)
    if request is None:
        return None
    host = False
    for line in data[:-4].split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            return None
        low = name.lower()
        if low in _NOT_PLAIN:
            return None
        if low == b"content-length" and value.strip() != b"0":
            return None
        if low == b"connection" and value.strip().lower() != b"keep-alive":
            return None
        host = host or low == b"host"
    return request if host else None


def _locate(target: bytes) -> tuple[str | None, str, str]:
    """A request target's API version (as written, if any), path without it, and query."""
    raw_path, _, query = target.decode("latin-1").partition("?")
    path = unquote(raw_path) if "%" in raw_path else raw_path
    m = PREFIX_RE.match(path)
    if m:
        return m.group(1), m.group(2) or "/", query
    return None, path, query


class PlainRoutes:
    """The plain routes of one app, routed by its URL map."""

    def __init__(self, url_map: Map, common_headers: list[tuple[str, str]]) -> None:
        self._adapter = url_map.bind("localhost")
        self._routes: dict[tuple[str, bytes], tuple[str, dict[str, Any]]] = {}
        self._views = dict(_VIEWS)
        self._streams = frozenset(_STREAMS)
        self._posts = frozenset(_POSTS)
        self._opened: dict[bytes, Reply] = {}  # request head -> its plain stream's reply
        self._stream_heads: dict[str, bytes] = {}
        self._common_text = common_headers
        self._common = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in common_headers]

    def answer(self, method: bytes, target: bytes, posted: Posted | None = None) \
            -> Reply | None:
        """The response to a bodiless ``method`` (GET or HEAD) of ``target``, or to a POST
        whose body is ``posted`` (``svc.api.plainstream.PendingPost``), or None for the full
        way. Never raises."""
        try:
            raw_version, path, query = _locate(target)
            endpoint, values = self._route(path, method)
            if (posted is not None) != (endpoint in self._posts):
                return None
            view = self._views.get(endpoint)
            if view is None:
                return None
            req = Plain(resolve(raw_version), args_of(query))
            if posted is not None:
                req.body, req.content_type, req.upgrade = \
                    posted.body, posted.content_type, posted.upgrade
            answer = view(req, **values)
        except (SvcError, HTTPException, UnicodeError, ValueError):
            return None
        except Exception as exc:  # a bug in the view
            if posted is None:
                return None  # (the full way runs it again and answers the error)
            log.exception("unexpected error while serving a request")
            return self._internal_error(exc)  # (it may have acted: not again)
        if answer is None:
            return None
        if isinstance(answer, Streamer):
            head = answer.head if answer.head is not None \
                else self._stream_head(answer.content_type)
            return Reply(stream=answer, head=head)
        headers = [*self._common, (b"content-type", answer.content_type.encode("latin-1")),
                   (b"content-length", str(len(answer.body)).encode("ascii"))]
        headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in answer.headers]
        return Reply(answer.status, headers, answer.body)

    def _internal_error(self, exc: Exception) -> Reply:
        """The 500 the full way answers an unexpected error with (``svc.api.errors``)."""
        body = f"internal error: {type(exc).__name__}: {exc}\n".encode()
        return Reply(500, [*self._common,
                           (b"content-type", b"text/plain; charset=utf-8"),
                           (b"x-content-type-options", b"nosniff"),
                           (b"content-length", str(len(body)).encode("ascii"))], body)

    def takes_post(self, target: bytes) -> bool:
        """Whether ``target`` names a route with a plain form for POSTs. Never raises."""
        if not self._posts:
            return False
        try:
            endpoint, _ = self._route(_locate(target)[1], b"POST")
        except (HTTPException, UnicodeError, ValueError):
            return False
        return endpoint in self._posts

    def quick(self, data: bytes, date: bytes) -> Reply | None:
        """The whole response to ``data`` when it is exactly one simple request head (HTTP/1.1,
        GET or HEAD, a Host, no body, no upgrade, nothing but keep-alive for Connection) of a
        plain route that answers; else None, and h11 parses it as usual (and refuses what is
        malformed). This skips h11 and hypercorn's events for the requests clients repeat
        most. ``date`` is the ``Date`` header's value."""
        request = _simple_request(data)
        reply = None if request is None else self.answer(*request)
        if reply is None or reply.stream is not None:
            return reply
        assert request is not None
        head = [b"HTTP/1.1 %d %s" % (reply.status, PHRASES.get(reply.status, b"")),
                *(b"%s: %s" % pair for pair in reply.headers), b"date: " + date]
        out = b"\r\n".join(head) + b"\r\n\r\n"
        reply.wire = out if request[0] == b"HEAD" else out + reply.body
        return reply

    def stream(self, data: bytes) -> Reply | None:
        """The plain stream ``data`` asks for when it is one simple request head (as
        ``quick``) of a route whose plain view answers with one (served bare,
        ``svc.api.barestream``); else None. The request line is routed before the head is
        checked: any other request a connection begins with costs one remembered route.

        A stream's reply depends on the request alone (``plain_alternative``), so it is kept
        per head: the next opening with the same head (a client opening many) reuses it."""
        if not data.startswith(b"GET "):
            return None  # (a stream is a GET: a body's bytes are not even hashed)
        reply = self._opened.get(data)
        if reply is not None:
            return reply
        line = _request_line(data)
        if line is None:
            return None
        try:
            _, path, _ = _locate(line[1])
            endpoint, _ = self._route(path, line[0])
        except (HTTPException, UnicodeError, ValueError):
            return None
        if endpoint not in self._streams:
            return None
        request = _simple_request(data)
        reply = None if request is None else self.answer(*request)
        if reply is None or reply.stream is None:
            return None
        if len(self._opened) >= STREAM_HEADS_KEPT:
            del self._opened[next(iter(self._opened))]  # the oldest
        self._opened[data] = reply
        return reply

    def _route(self, path: str, method: bytes) -> tuple[str, dict[str, Any]]:
        """The endpoint and path values of ``path`` by the app's URL map, remembered for the
        reads asked for most recently (the map never changes; werkzeug's matcher, ~11 us, is
        a tenth of a plain request's cost). A POST's is not kept: its path is most often
        asked once (an exec's start, a container's), and would push the reads out. Raises
        what werkzeug raises (no route: 404)."""
        key = (path, method)
        found = self._routes.get(key)
        if found is None:
            endpoint, values = self._adapter.match(path, method.decode("ascii"))
            if method == b"POST":
                return str(endpoint), dict(values)
            if len(self._routes) >= ROUTES_KEPT:
                del self._routes[next(iter(self._routes))]  # the oldest
            found = self._routes[key] = (str(endpoint), dict(values))
        return found

    def _stream_head(self, content_type: str) -> bytes:
        head = self._stream_heads.get(content_type)
        if head is None:
            lines = ["HTTP/1.1 200 OK", f"Content-Type: {content_type}",
                     "Transfer-Encoding: chunked", "Connection: close",
                     *(f"{k}: {v}" for k, v in self._common_text)]
            head = self._stream_heads[content_type] = \
                ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head
