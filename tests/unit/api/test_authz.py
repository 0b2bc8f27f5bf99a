"""The authorization wrapper at the edge (``svc.api.authz``) with a scripted authorizer: what
it hands the plugins, what the app gets, what the client gets; and that without plugins the
app is built exactly as before (the fast paths on, no wrapper)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from svc.api.app import create_app
from svc.api.authz import Authorization, parse_head, request_uri
from svc.api.versioning import VersionPrefix
from svc.engine.authz import AuthorizationDenied, AuthzRequest, AuthzResponse

COMMON = [("Api-Version", "1.23"), ("Server", "svc")]


class Scripted:
    """Records what it is asked; denies the phases it is told to."""

    def __init__(self, deny: str = "") -> None:
        self.deny = deny
        self.requests: list[AuthzRequest] = []
        self.responses: list[AuthzResponse] = []

    async def authorize_request(self, request: AuthzRequest) -> None:
        self.requests.append(request)
        if self.deny == "req":
            raise AuthorizationDenied("p", "no")

    async def authorize_response(self, request: AuthzRequest, response: AuthzResponse) -> None:
        self.responses.append(response)
        if self.deny == "res":
            raise AuthorizationDenied("p", "not that answer")


def scope(method: str = "GET", path: str = "/v1.23/containers/json", query: bytes = b"",
          headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
            "query_string": query, "headers": headers or [], "extensions": {}}


def sized_app(seen: list[Any], body: bytes = b"[]") -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(await receive())
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return app


def feeder(messages: list[dict[str, Any]]) -> Any:
    async def receive() -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return messages.pop(0) if messages else {"type": "http.disconnect"}
    return receive


async def run(wrapper: Authorization, sc: dict[str, Any],
              messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await wrapper(sc, feeder(messages), send)
    return sent


async def test_a_json_body_is_sent_and_the_app_reads_it_all_the_same() -> None:
    authz, seen = Scripted(), []
    body = b'{"Image":"busybox"}'
    sc = scope("POST", "/v1.23/containers/create", b"name=x",
               [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()), (b"x-registry-auth", b"s")])
    sent = await run(Authorization(sized_app(seen), authz, COMMON), sc,
                     [{"type": "http.request", "body": body, "more_body": False}])
    req = authz.requests[0]
    assert req.uri == "/v1.23/containers/create?name=x" and req.body == body
    assert "X-Registry-Auth" not in req.headers and req.user is None
    assert seen == [{"type": "http.request", "body": body, "more_body": False}]
    assert authz.responses[0].status == 200 and authz.responses[0].body == b"[]"
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


async def test_chunked_bodies_are_read_up_to_the_limit_and_large_ones_not_sent() -> None:
    authz, seen = Scripted(), []
    chunked = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]
    await run(Authorization(sized_app(seen), authz, COMMON), scope("POST", headers=chunked),
              [{"type": "http.request", "body": b'{"a":', "more_body": True},
               {"type": "http.request", "body": b"1}", "more_body": False}])
    assert authz.requests[-1].body == b'{"a":1}' and seen[0]["body"] == b'{"a":'
    big = b"x" * (1 << 20)
    await run(Authorization(sized_app(seen), authz, COMMON), scope("POST", headers=chunked),
              [{"type": "http.request", "body": big, "more_body": True},
               {"type": "http.request", "body": b"", "more_body": False}])
    assert authz.requests[-1].body is None and seen[-1]["body"] == big
    declared = [(b"content-type", b"application/json"), (b"content-length", b"1048576")]
    await run(Authorization(sized_app(seen), authz, COMMON), scope("POST", headers=declared),
              [{"type": "http.request", "body": big, "more_body": False}])
    assert authz.requests[-1].body is None
    tar = [(b"content-type", b"application/x-tar"), (b"content-length", b"3")]
    await run(Authorization(sized_app(seen), authz, COMMON), scope("POST", headers=tar),
              [{"type": "http.request", "body": b"tar", "more_body": False}])
    assert authz.requests[-1].body is None


async def test_a_denied_request_never_reaches_the_app() -> None:
    seen: list[Any] = []
    sent = await run(Authorization(sized_app(seen), Scripted("req"), COMMON),
                     scope("DELETE", "/v1.23/containers/x"), [])
    assert seen == []
    start, body = sent
    assert start["status"] == 403
    assert (b"api-version", b"1.23") in start["headers"]  # a denied /_ping still tells it
    assert body["body"] == b"authorization denied by plugin p: no\n"
    sent = await run(Authorization(sized_app(seen), Scripted("req"), COMMON),
                     scope("HEAD", "/_ping"), [])
    assert sent[0]["status"] == 403 and sent[1]["body"] == b""


async def test_a_held_answer_is_replaced_when_its_authz_res_denies() -> None:
    seen: list[Any] = []
    sent = await run(Authorization(sized_app(seen, b'[{"Id":"secret"}]'), Scripted("res"),
                                   COMMON), scope(), [])
    assert [m.get("status") for m in sent] == [403, None]
    assert b"secret" not in b"".join(m.get("body", b"") for m in sent)
    assert sent[1]["body"] == b"authorization denied by plugin p: not that answer\n"


async def test_a_stream_passes_as_it_comes_and_authz_res_follows_its_end() -> None:
    authz, order = Scripted("res"), []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}\n", "more_body": True})
        order.append(f"sent before AuthZRes: {not authz.responses}")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(message: dict[str, Any]) -> None:
        order.append(message["type"])

    async with trio.open_nursery() as nursery:
        conn = SimpleNamespace(raw=None, task_group=SimpleNamespace(spawn=nursery.start_soon))
        sc = scope(path="/v1.23/containers/x/logs", query=b"follow=1")
        sc["extensions"]["svc.hijack"] = {"connection": conn}
        await Authorization(app, authz, COMMON)(sc, feeder([]), send)
    assert order == ["http.response.start", "http.response.body", "sent before AuthZRes: True",
                     "http.response.body"]
    assert authz.responses[0].status == 200 and authz.responses[0].body is None


def test_request_uri_and_takeover_heads() -> None:
    assert request_uri(scope(path="/v1.23/events", query=b"filters=%7B%7D")) == \
        "/v1.23/events?filters=%7B%7D"
    assert parse_head(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: x\r\nUpgrade: tcp\r\n\r\n") \
        == (101, [("Content-Type", "x"), ("Upgrade", "tcp")])


def test_without_plugins_the_app_is_built_as_before() -> None:
    plain = create_app(SimpleNamespace(authz=None))  # type: ignore[arg-type]
    assert plain.plain is not None  # the protocol answers the plain routes itself
    assert isinstance(plain.asgi.app, VersionPrefix)  # no authorization wrapper
    guarded = create_app(SimpleNamespace(authz=Scripted()))  # type: ignore[arg-type]
    assert guarded.plain is None and isinstance(guarded.asgi.app, Authorization)
