"""The /v<major>.<minor> prefix: accepted range, too new, too old, malformed; unknown routes."""

from __future__ import annotations

import httpx
import pytest


@pytest.mark.parametrize("prefix", ["", "/v1.14", "/v1.19", "/v1.22", "/v1.23"])
async def test_supported_versions(client: httpx.AsyncClient, prefix: str) -> None:
    r = await client.get(f"{prefix}/version")
    assert r.status_code == 200
    assert r.json()["ApiVersion"] == "1.23"


async def test_too_new_names_both_versions(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1.44/version")
    assert r.status_code == 400
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.text == "client version 1.44 is too new. Maximum supported API version is 1.23\n"
    assert r.headers["api-version"] == "1.23"


async def test_too_old_names_the_minimum(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1.11/info")
    assert r.status_code == 400
    assert r.text == ("client version 1.11 is too old. Minimum supported API version is 1.14, "
                      "please upgrade your client to a newer version\n")


@pytest.mark.parametrize("bad", ["1", "1.x", "1.23.1", "1.", "2..3"])
async def test_malformed_version(client: httpx.AsyncClient, bad: str) -> None:
    r = await client.get(f"/v{bad}/version")
    assert r.status_code == 400
    assert "malformed API version" in r.text and repr(bad) in r.text


async def test_version_checked_even_on_unknown_routes(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v9.0/no/such/route")).status_code == 400


@pytest.mark.parametrize("method,path", [
    ("GET", "/no/such/route"), ("GET", "/v1.23/no/such/route"), ("POST", "/version"),
    ("DELETE", "/_ping"), ("PUT", "/v1.22/info"), ("GET", "/vfoo/version"),
])
async def test_unknown_routes_and_methods(client: httpx.AsyncClient, method: str,
                                          path: str) -> None:
    r = await client.request(method, path)
    assert r.status_code == 404
    assert r.text == "page not found\n"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["api-version"] == "1.23"
