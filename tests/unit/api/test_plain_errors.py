"""A plain view's unexpected error: a GET's goes the full way (which runs the view again and
answers the error); a POST's, whose view may have acted, is answered at once with the full
way's 500 (never run twice); a plain stream that fails closes its connection, never the
server."""

from __future__ import annotations

from typing import Any

import trio
from quart import Blueprint
from werkzeug.routing import Map, Rule

from svc.api.fastpath import Plain, PlainRoutes, Posted, Reply, Streamer, plain_alternative
from svc.api.plainstream import PlainStream

bp = Blueprint("plain_errors_test", __name__)
calls: list[str] = []


@plain_alternative(bp, "boom_get")
def boom_get(req: Plain) -> None:
    calls.append("get")
    raise KeyError("no such key")


@plain_alternative(bp, "boom_post", post=True)
def boom_post(req: Plain) -> None:
    calls.append("post")
    raise KeyError("no such key")


def _routes() -> PlainRoutes:
    url_map = Map([Rule("/boom", endpoint="plain_errors_test.boom_get", methods=["GET"]),
                   Rule("/boom", endpoint="plain_errors_test.boom_post", methods=["POST"])])
    return PlainRoutes(url_map, [("Api-Version", "1.23")])


def test_a_get_view_that_fails_goes_the_full_way() -> None:
    calls.clear()
    assert _routes().answer(b"GET", b"/v1.23/boom") is None
    assert calls == ["get"]


def test_a_post_view_that_fails_is_answered_500_once() -> None:
    calls.clear()
    reply = _routes().answer(b"POST", b"/v1.23/boom", Posted(b"{}", "application/json", False))
    assert reply is not None and reply.status == 500
    assert reply.body == b"internal error: KeyError: 'no such key'\n"
    assert (b"content-type", b"text/plain; charset=utf-8") in reply.headers
    assert (b"api-version", b"1.23") in reply.headers
    assert calls == ["post"]


class _Raw:
    closed = False

    async def aclose(self) -> None:
        self.closed = True


class _Protocol:
    recycled = False

    async def _maybe_recycle(self) -> None:
        self.recycled = True


async def test_a_plain_stream_that_fails_closes_only_its_connection() -> None:
    async def run(raw: Any, head: bytes) -> None:
        raise RuntimeError("a bug")

    streamer = Streamer(run)
    protocol, raw = _Protocol(), _Raw()
    with trio.fail_after(5):
        await PlainStream(protocol, b"POST", Reply(stream=streamer))._run(streamer, raw)
    assert raw.closed and protocol.recycled
