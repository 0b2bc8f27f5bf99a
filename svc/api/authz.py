"""Authorization plugins at the edge: ``Authorization``, the ASGI wrapper that puts every request
the app serves to the engine's ``Authorizer`` (``svc.engine.authz``) before it runs, and its
answer after.

It is installed only when ``--authorization-plugin`` is given, and then the protocol's plain
routes (``svc.api.fastpath``, which answer ``/_ping``, inspect, the container list and the
opening of ``/events`` without the app) are switched off, so that every request, hijacked or
streamed ones included, comes through here once. Without plugins nothing here runs.

- **Before**: ``AuthZReq`` with the method, the URI as sent, the headers, the body where the
  engines sent one (read here and handed on to the app unchanged), and the user of the TLS
  client certificate. Denied: the request is not served; the client gets the error (403
  ``authorization denied by plugin <name>: <msg>``, or 500 ``plugin <name> failed with
  error: ...``) as plain text with the common headers, so a client still learns the API
  version from a denied ``/_ping``.
- **After, an answer of known length** (what the engines held back): held until ``AuthZRes``
  allows it; a denial replaces it with the error.
- **After, a stream** (a chunked answer, a taken-over connection: attach, exec start, logs,
  events, stats, pull, push, build, archives; a websocket): its head and data go out as they
  come, as the engines flushed them, so ``AuthZReq`` alone decides. ``AuthZRes`` is asked
  once the stream has ended, with the status and headers that went out and no body, and its
  answer can only be logged: the client has had the stream. For a taken-over connection it
  is asked after the connection has closed (in the connection's task group), so a plugin
  that hangs never holds up the client's end of stream.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from svc.api.errors import status_of
from svc.engine.authz import (
    MAX_BODY,
    Authorizer,
    AuthzRequest,
    AuthzResponse,
    flatten_headers,
    sends_body,
)
from svc.errors import SvcError

log = logging.getLogger("svc.authz")

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
EXTENSION = "svc.hijack"  # (svc.api.hijack's scope extension: its "connection")


class Authorization:
    """ASGI wrapper: the app behind authorization plugins (see the module).

    Cancellation: a client that goes away while its request waits for a plugin is noticed
    only once the plugin has answered (the plugin call is bounded by ``--plugin-timeout``);
    once the app runs, quart-trio cancels it as usual, with a held answer's ``AuthZRes``.
    Nothing is left behind: a held answer is dropped; a stream cut short by cancellation (the
    daemon stopping) gets no ``AuthZRes``.
    """

    def __init__(self, app: Any, authorizer: Authorizer,
                 common_headers: list[tuple[str, str]]) -> None:
        self.app = app
        self.authz = authorizer
        self.common = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                       for k, v in common_headers]

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        conn = _connection(scope)
        pairs = _pairs(scope)
        uri = request_uri(scope)
        body, receive = await _read_body(scope, receive, uri, pairs)
        req = AuthzRequest(scope["method"], uri, flatten_headers(pairs), body, tls_user(conn))
        try:
            await self.authz.authorize_request(req)
        except SvcError as exc:
            _log_refusal(req, exc, "request")
            await self.refuse(send, exc, head=scope["method"] == "HEAD")
            return
        answer = _Answer(self, req, send, conn, head=scope["method"] == "HEAD")
        await self.app(scope, receive, answer.send)
        answer.after()

    async def _websocket(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """A websocket's handshake is a GET: authorized as one; a denial is its HTTP answer
        (hypercorn's ``websocket.http.response``). ``AuthZRes`` once the session ends."""
        conn = _connection(scope)
        req = AuthzRequest("GET", request_uri(scope), flatten_headers(_pairs(scope)),
                           None, tls_user(conn))
        try:
            await self.authz.authorize_request(req)
        except SvcError as exc:
            _log_refusal(req, exc, "request")
            status, headers, body = self.error(exc)
            await send({"type": "websocket.http.response.start", "status": status,
                        "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
            return
        outcome = {"status": 500}

        async def watch(message: Message) -> None:
            kind = message["type"]
            if kind == "websocket.accept":
                outcome["status"] = 101
            elif kind == "websocket.http.response.start":
                outcome["status"] = int(message["status"])
            elif kind == "websocket.close" and outcome["status"] == 500:
                outcome["status"] = 403  # closed before accepting: hypercorn answers 403
            await send(message)

        await self.app(scope, receive, watch)
        await self.after_stream(req, AuthzResponse(outcome["status"], {}))

    def error(self, exc: SvcError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The status, headers and body of ``exc`` as the app's error mapping writes them
        (plain text, the message and a newline), with the common headers."""
        body = (exc.message + "\n").encode()
        headers = [*self.common, (b"content-type", b"text/plain; charset=utf-8"),
                   (b"x-content-type-options", b"nosniff"),
                   (b"content-length", str(len(body)).encode("ascii"))]
        return status_of(exc), headers, body

    async def refuse(self, send: Send, exc: SvcError, *, head: bool) -> None:
        status, headers, body = self.error(exc)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head else body,
                    "more_body": False})

    async def after_stream(self, req: AuthzRequest, resp: AuthzResponse) -> None:
        """``AuthZRes`` for a stream that has been sent: the verdict is only logged."""
        try:
            await self.authz.authorize_response(req, resp)
        except SvcError as exc:
            log.warning("%s %s (user %r): %s; the stream had been sent already", req.method,
                        req.uri, req.user or "", exc)


class _Answer:
    """The app's answer to an authorized request: held until ``AuthZRes`` allows it when its
    length is known, passed on as it comes when it is a stream (see the module)."""

    def __init__(self, authz: Authorization, req: AuthzRequest, send: Send, conn: Any, *,
                 head: bool) -> None:
        self._authz, self._req, self._send, self._conn = authz, req, send, conn
        self._head = head
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        self._streamed: Message | None = None  # the head of a stream that went out

    def _taken_over(self) -> bool:
        return getattr(self._conn, "raw", None) is not None

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self._streamed is not None or self._taken_over():
            await self._send(message)  # (after a takeover hypercorn drops Quart's answer)
            return
        if kind == "http.response.start":
            if _sized(message):
                self._start = message
                return
            self._streamed = message  # chunked: a stream, passed on as it comes
            await self._send(message)
            return
        if kind == "http.response.body" and self._start is not None:
            self._chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                await self._decide(self._start, b"".join(self._chunks))
            return
        await self._send(message)

    async def _decide(self, start: Message, body: bytes) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]]
        content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
        resp = AuthzResponse(int(start["status"]), flatten_headers(headers, request=False),
                             body if sends_body(self._req.uri, content_type) else None)
        try:
            await self._authz.authz.authorize_response(self._req, resp)
        except SvcError as exc:
            _log_refusal(self._req, exc, "response")
            await self._authz.refuse(self._send, exc, head=self._head)
            return
        await self._send(start)
        await self._send({"type": "http.response.body", "body": body, "more_body": False})

    def after(self) -> None:
        """The app is done: ``AuthZRes`` for a stream (logged only). A taken-over
        connection's is asked in the connection's task group, once it has closed."""
        if self._taken_over():
            status, headers = parse_head(self._conn.raw.head)
            resp = AuthzResponse(status, flatten_headers(headers, request=False))
            self._conn.task_group.spawn(self._authz.after_stream, self._req, resp)
        elif self._streamed is not None and self._conn is not None:
            headers = [(k.decode("latin-1"), v.decode("latin-1"))
                       for k, v in self._streamed.get("headers", ())]
            resp = AuthzResponse(int(self._streamed["status"]),
                                 flatten_headers(headers, request=False))
            self._conn.task_group.spawn(self._authz.after_stream, self._req, resp)


def _sized(start: Message) -> bool:
    """An answer of known length (held for ``AuthZRes``), not a stream: it has a
    ``Content-Length``, or a status that has no body (204, 304, 1xx)."""
    status = int(start["status"])
    return status in (204, 304) or status < 200 or any(
        k.lower() == b"content-length" for k, _ in start.get("headers", ()))


def _log_refusal(req: AuthzRequest, exc: SvcError, what: str) -> None:
    level = logging.ERROR if status_of(exc) >= 500 else logging.INFO
    log.log(level, "%s %s (user %r): %s refused: %s", req.method, req.uri, req.user or "",
            what, exc)


def _connection(scope: dict[str, Any]) -> Any:
    """The HTTP/1.1 protocol serving the request (``svc.api.hijack``), or None."""
    ext = scope.get("extensions", {}).get(EXTENSION)
    return ext.get("connection") if ext else None


def _pairs(scope: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]


def request_uri(scope: dict[str, Any]) -> str:
    """The request target as the client sent it (Go's ``r.RequestURI``): the raw path, with
    its version prefix, and the query."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string") or b""
    return (raw + b"?" + query if query else raw).decode("latin-1")


def tls_user(conn: Any) -> str | None:
    """The Subject CommonName of the client's certificate, as the engines took it (``""``
    for a certificate without one); None when the connection is not TLS or the client sent
    no certificate (``--tls`` without ``--tlsverify`` asks for none)."""
    stream = getattr(getattr(getattr(conn, "send", None), "__self__", None), "stream", None)
    if not isinstance(stream, trio.SSLStream):
        return None
    cert = stream.getpeercert()
    if not cert:
        return None
    common_name = ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                common_name = str(value)  # the last one, as Go's pkix.Name keeps it
    return common_name


def parse_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    """The status and headers of a response head written at a takeover."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return status, headers


async def _read_body(scope: dict[str, Any], receive: Receive, uri: str,
                     pairs: list[tuple[str, str]]) -> tuple[bytes | None, Receive]:
    """The request body, where the engines sent it to the plugins, and a ``receive`` that
    gives the app the same messages again. A body of 1 MiB or more (declared, or found while
    reading a chunked one) is not sent; a body the view reads from the socket itself (a
    build context: ``svc.api.rawbody``) never is."""
    content_type = next((v for k, v in pairs if k.lower() == "content-type"), None)
    if not sends_body(uri, content_type):
        return None, receive
    ext = scope.get("extensions", {}).get(EXTENSION) or {}
    if ext.get("body") is not None:
        return None, receive
    length = next((v for k, v in pairs if k.lower() == "content-length"), None)
    if length is not None and not (length.isdigit() and 0 < int(length) < MAX_BODY):
        return None, receive
    chunked = any(k.lower() == "transfer-encoding" for k, _ in pairs)
    if length is None and not chunked:
        return None, receive
    messages: list[Message] = []
    size, complete = 0, False
    while size < MAX_BODY:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break  # the client went
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            complete = size < MAX_BODY
            break
    body = b"".join(m.get("body", b"") for m in messages) if complete else None
    return body, _replay(messages, receive)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = deque(messages)

    async def replayed() -> Message:
        if pending:
            return pending.popleft()
        return await receive()

    return replayed
