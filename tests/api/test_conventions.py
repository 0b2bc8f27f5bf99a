"""Query and body conventions over the socket: booleans, filters, JSON bodies, keep-alive."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


@pytest.mark.parametrize("raw,value", [("1", True), ("True", True), ("true", True),
                                       ("0", False), ("False", False), ("false", False)])
async def test_boolean_spellings(client: httpx.AsyncClient, raw: str, value: bool) -> None:
    r = await client.get("/_probe/params", params={"all": raw})
    assert r.status_code == 200
    assert r.json() == {"all": value}


@pytest.mark.parametrize("raw", ["yes", "2", "TRUE", "maybe", "on"])
async def test_bad_boolean_names_the_parameter(client: httpx.AsyncClient, raw: str) -> None:
    r = await client.get("/_probe/params", params={"all": raw})
    assert r.status_code == 400
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert "'all'" in r.text and repr(raw) in r.text


async def test_filters_both_forms(client: httpx.AsyncClient) -> None:
    new = await client.get("/_probe/params",
                           params={"filters": json.dumps({"label": ["a=b", "c"]})})
    assert new.json() == {"filters": {"label": ["a=b", "c"]}}
    old = await client.get("/_probe/params", params={
        "filters": json.dumps({"container": {"abc": True, "def": False}})})
    assert old.json() == {"filters": {"container": ["abc"]}}


@pytest.mark.parametrize("raw", ["notjson", "[1,2]", '{"a": "b"}', '{"a": [1]}', '{"a": {"b": 1}}'])
async def test_bad_filters_are_400(client: httpx.AsyncClient, raw: str) -> None:
    r = await client.get("/_probe/params", params={"filters": raw})
    assert r.status_code == 400
    assert r.text.startswith("invalid filters parameter")


async def test_json_body_unknown_fields_ignored(client: httpx.AsyncClient) -> None:
    r = await client.post("/_probe/body", json={"Name": "x", "Count": 2, "FutureField": {"a": 1}})
    assert r.status_code == 200
    assert r.json() == {"Name": "x", "Count": 2}


async def test_json_body_errors(client: httpx.AsyncClient) -> None:
    wrong_type = await client.post("/_probe/body", content=b'{"Name": "x"}',
                                   headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 400
    assert wrong_type.text == "Content-Type specified (text/plain) must be 'application/json'\n"
    bad = await client.post("/_probe/body", content=b'{"Name": ',
                            headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.text.startswith("invalid JSON body")
    invalid = await client.post("/_probe/body", json={"Count": "many"})
    assert invalid.status_code == 400
    assert "Name" in invalid.text and "Count" in invalid.text
    empty = await client.post("/_probe/body", content=b"",
                              headers={"Content-Type": "application/json"})
    assert empty.status_code == 400


async def test_idle_keepalive_connection_is_not_cut(daemon: Daemon) -> None:
    """hypercorn's default idle cut-off is 5 s; svc keeps idle connections open."""
    s = await connect(daemon.sock)
    buf = bytearray()
    for pause in (0, 6.5):
        await trio.sleep(pause)
        await s.send_all(b"GET /_ping HTTP/1.1\r\nHost: svc\r\n\r\n")
        head = await read_head(s, buf)
        assert head.startswith(b"HTTP/1.1 200")
        while len(buf) < 2:
            buf += await s.receive_some()
        del buf[:2]
    await s.aclose()


async def test_many_requests_on_one_connection(client: httpx.AsyncClient) -> None:
    for _ in range(1200):  # past hypercorn's default cap of 1000 requests per connection
        r = await client.get("/_ping")
        assert r.status_code == 200 and r.headers.get("connection") != "close"


async def test_connection_close_request_is_closed_by_the_server(daemon: Daemon) -> None:
    s = await connect(daemon.sock)
    await s.send_all(b"GET /_ping HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n\r\n")
    with trio.fail_after(2):
        data = b""
        while chunk := await s.receive_some():
            data += chunk
    assert data.endswith(b"OK")


async def test_status_lines_carry_the_reason_phrase(daemon: Daemon) -> None:
    """``HTTP/1.1 404 Not Found``, as dockerd writes them (hypercorn writes none)."""
    for target, line in ((b"/_ping", b"HTTP/1.1 200 OK\r\n"),
                         (b"/containers/nope/json", b"HTTP/1.1 404 Not Found\r\n"),
                         (b"/containers/json?all=maybe", b"HTTP/1.1 400 Bad Request\r\n")):
        s = await connect(daemon.sock)
        await s.send_all(b"GET " + target + b" HTTP/1.1\r\nHost: svc\r\n\r\n")
        head = await read_head(s, bytearray())
        await s.aclose()
        assert head.startswith(line), head
