"""X-Registry-Auth / X-Registry-Config decoding (svc.wire.authconfig)."""

from __future__ import annotations

import base64
import json

import pytest

from svc.wire.authconfig import (
    ANONYMOUS,
    AuthConfig,
    decode_auth_header,
    decode_config_header,
    encode_auth_header,
    lookup,
    registry_key,
)


def url64(doc: object, *, pad: bool = True) -> str:
    s = base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()
    return s if pad else s.rstrip("=")


def std64(doc: object, *, pad: bool = True) -> str:
    s = base64.b64encode(json.dumps(doc).encode()).decode()
    return s if pad else s.rstrip("=")


# "~~~" and ">>>?" encode to "+" and "/" in the standard alphabet, "-" and "_" in base64url.
TRICKY = {"username": "u~~~", "password": "p>>>?"}


@pytest.mark.parametrize("encode", [
    url64, std64, lambda d: url64(d, pad=False), lambda d: std64(d, pad=False),
])
def test_either_alphabet_padding_optional(encode: object) -> None:
    got = decode_auth_header(encode(TRICKY))  # type: ignore[operator]
    assert (got.username, got.password) == ("u~~~", "p>>>?")
    assert not got.is_anonymous


@pytest.mark.parametrize("value", [
    None, "", "e30=", "e30", "   ", "!!!notbase64!!!", "a", url64([1, 2]), url64("str"),
    url64(None), base64.b64encode(b"{not json").decode(), base64.b64encode(b"\xff\xfe").decode(),
    url64({"username": 5}), url64({"password": ["x"]}), "x" * 300_000,
])
def test_unreadable_or_empty_is_anonymous(value: str | None) -> None:
    assert decode_auth_header(value) == ANONYMOUS
    assert decode_auth_header(value).is_anonymous


def test_all_fields_and_case_insensitive_names() -> None:
    doc = {"UserName": "alice", "PASSWORD": "pw", "Email": "a@b", "ServerAddress": "r:5000",
           "IdentityToken": "idt", "registryToken": "rt", "Auth": "", "unknown": {"x": 1}}
    got = decode_auth_header(url64(doc))
    assert got == AuthConfig(username="alice", password="pw", email="a@b",
                             serveraddress="r:5000", identitytoken="idt", registrytoken="rt")
    assert "pw" not in repr(got) and "idt" not in repr(got) and "rt'" not in repr(got)


def test_last_duplicate_wins_and_null_is_unset() -> None:
    raw = '{"username":"a","Username":"b","password":null}'
    got = decode_auth_header(base64.b64encode(raw.encode()).decode())
    assert got.username == "b" and got.password == ""


def test_auth_field_gives_basic_credentials() -> None:
    packed = base64.b64encode(b"bob:s3:cret").decode()
    got = decode_auth_header(url64({"auth": packed}))
    assert got.basic_credentials() == ("bob", "s3:cret")
    assert not got.is_anonymous
    # explicit fields win over auth; a broken auth is no credentials
    assert AuthConfig(username="x", password="y", auth=packed).basic_credentials() == ("x", "y")
    assert AuthConfig(auth="%%%").basic_credentials() is None
    assert AuthConfig(auth=base64.b64encode(b"nocolon").decode()).basic_credentials() is None
    assert AuthConfig(auth="%%%").is_anonymous


def test_tokens_alone_are_not_anonymous() -> None:
    assert not AuthConfig(identitytoken="t").is_anonymous
    assert not AuthConfig(registrytoken="t").is_anonymous
    assert AuthConfig(email="a@b", serveraddress="x").is_anonymous


def test_round_trip() -> None:
    config = AuthConfig(username="u", password="p", serveraddress="localhost:5000")
    assert decode_auth_header(encode_auth_header(config)) == config


def test_registry_config_map() -> None:
    doc = {
        "https://index.docker.io/v1/": {"username": "hub", "password": "h"},
        "localhost:5000": {"Username": "loc", "Password": "l"},
        "broken": {"username": 7},
        "nothing": None,
    }
    configs = decode_config_header(url64(doc, pad=False))
    assert set(configs) == {"https://index.docker.io/v1/", "localhost:5000", "nothing"}
    assert lookup(configs, "docker.io").username == "hub"
    assert lookup(configs, "localhost:5000").username == "loc"
    assert lookup(configs, "other:1") == ANONYMOUS
    assert decode_config_header("e30=") == {}
    assert decode_config_header(None) == {}
    assert decode_config_header("@@") == {}
    assert decode_config_header(url64(["x"])) == {}


@pytest.mark.parametrize("key,host", [
    ("https://index.docker.io/v1/", "docker.io"),
    ("index.docker.io", "docker.io"),
    ("registry-1.docker.io", "docker.io"),
    ("http://localhost:5000/v2/", "localhost:5000"),
    ("127.0.0.1:5000", "127.0.0.1:5000"),
])
def test_registry_key(key: str, host: str) -> None:
    assert registry_key(key) == host
