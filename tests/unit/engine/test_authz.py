"""What the engines sent to authorization plugins, and how their answers are read: the pure
parts of ``svc.engine.authz``."""

from __future__ import annotations

import base64
import json

import pytest

from svc.engine.authz import (
    AuthorizationDenied,
    AuthorizationFailed,
    AuthzRequest,
    AuthzResponse,
    canonical_key,
    flatten_headers,
    sends_body,
    verdict,
)

JSON = "application/json"


@pytest.mark.parametrize(("raw", "canonical"), [
    ("content-type", "Content-Type"), ("x-registry-auth", "X-Registry-Auth"),
    ("USER-AGENT", "User-Agent"), ("api-version", "Api-Version"), ("te", "Te"),
    ("bad header", "bad header"), ("", ""),
])
def test_header_names_are_canonical_as_in_go(raw: str, canonical: str) -> None:
    assert canonical_key(raw) == canonical


def test_headers_are_flattened_without_credentials() -> None:
    pairs = [("host", "docker"), ("user-agent", "Docker-Client/28.2.2 (linux)"),
             ("x-registry-auth", "secret"), ("Authorization", "Bearer x"),
             ("X-Registry-Config", "e30="), ("accept", "a"), ("accept", "b"),
             ("transfer-encoding", "chunked"), ("content-type", "application/json")]
    assert flatten_headers(pairs) == {"User-Agent": "Docker-Client/28.2.2 (linux)",
                                      "Accept": "b", "Content-Type": "application/json"}
    # a response keeps what Go's response header map holds (no Host there anyway)
    assert flatten_headers([("transfer-encoding", "chunked")], request=False) == \
        {"Transfer-Encoding": "chunked"}


def test_bodies_only_json_and_never_of_auth() -> None:
    assert sends_body("/v1.23/containers/create", "application/json")
    assert not sends_body("/v1.23/containers/create", "application/json; charset=utf-8")
    assert not sends_body("/v1.23/images/load", "application/x-tar")
    assert not sends_body("/v1.23/build", None)
    assert not sends_body("/v1.23/auth", "application/json")


def test_the_documents_leave_empty_fields_out_and_encode_bytes_as_go() -> None:
    req = AuthzRequest("POST", "/v1.23/containers/create?name=x", {"Content-Type": JSON},
                       b'{"Image":"busybox"}', "alice")
    doc = req.document()
    assert list(doc) == ["User", "UserAuthNMethod", "RequestMethod", "RequestUri",
                         "RequestBody", "RequestHeaders"]
    assert doc["UserAuthNMethod"] == "TLS"
    assert base64.b64decode(doc["RequestBody"]) == b'{"Image":"busybox"}'
    bare = AuthzRequest("GET", "/_ping", {}).document()
    assert bare == {"RequestMethod": "GET", "RequestUri": "/_ping"}
    # a certificate without a CommonName: the method, no user (omitempty)
    assert AuthzRequest("GET", "/_ping", {}, None, "").document()["UserAuthNMethod"] == "TLS"
    res = AuthzResponse(200, {"Content-Type": JSON}, b"[]").document()
    assert res == {"ResponseStatusCode": 200, "ResponseBody": "W10=",
                   "ResponseHeaders": {"Content-Type": JSON}}
    json.dumps({**doc, **res})  # all of it is JSON



def test_answers_allow_deny_or_fail() -> None:
    verdict("p", "AuthZPlugin.AuthZReq", {"Allow": True})
    verdict("p", "AuthZPlugin.AuthZReq", {"allow": True, "msg": ""})  # Go's any-case match
    with pytest.raises(AuthorizationDenied, match="^authorization denied by plugin p: no$"):
        verdict("p", "AuthZPlugin.AuthZReq", {"Allow": False, "Msg": "no"})
    with pytest.raises(AuthorizationDenied, match="^authorization denied by plugin p: $"):
        verdict("p", "AuthZPlugin.AuthZReq", {})  # nothing said: not allowed
    with pytest.raises(AuthorizationFailed,
                       match="^plugin p failed with error: AuthZPlugin.AuthZRes: db down$"):
        verdict("p", "AuthZPlugin.AuthZRes", {"Allow": True, "Err": "db down"})
    with pytest.raises(AuthorizationFailed, match="is not an authorization answer"):
        verdict("p", "AuthZPlugin.AuthZReq", {"Allow": "yes"})
    with pytest.raises(AuthorizationFailed, match="is not an authorization answer"):
        verdict("p", "AuthZPlugin.AuthZReq", {"Allow": False, "Msg": 3})
