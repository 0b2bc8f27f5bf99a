"""Docker's reference grammar and normalization (svc.wire.reference)."""

from __future__ import annotations

import time

import pytest

from svc.errors import InvalidParameter
from svc.wire.reference import (
    ERR_FORMAT,
    ERR_UPPERCASE,
    Reference,
    check_domain,
    is_full_id,
    is_id_prefix,
    parse,
    validate_tag,
)

HEX = "a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"
DIGEST = f"sha256:{HEX}"

# input -> (domain, path, tag, digest, familiar_string)
VALID = {
    "busybox": ("docker.io", "library/busybox", None, None, "busybox"),
    "busybox:latest": ("docker.io", "library/busybox", "latest", None, "busybox:latest"),
    "busybox:1.36.1-musl": ("docker.io", "library/busybox", "1.36.1-musl", None,
                            "busybox:1.36.1-musl"),
    "busybox:Upper_Case": ("docker.io", "library/busybox", "Upper_Case", None,
                           "busybox:Upper_Case"),
    f"busybox@{DIGEST}": ("docker.io", "library/busybox", None, DIGEST, f"busybox@{DIGEST}"),
    f"busybox:1@{DIGEST}": ("docker.io", "library/busybox", "1", DIGEST,
                            f"busybox:1@{DIGEST}"),
    "docker.io/busybox": ("docker.io", "library/busybox", None, None, "busybox"),
    "docker.io/library/busybox": ("docker.io", "library/busybox", None, None, "busybox"),
    "index.docker.io/busybox:1": ("docker.io", "library/busybox", "1", None, "busybox:1"),
    "index.docker.io/library/busybox": ("docker.io", "library/busybox", None, None, "busybox"),
    "library/busybox": ("docker.io", "library/busybox", None, None, "busybox"),
    "user/app": ("docker.io", "user/app", None, None, "user/app"),
    "docker.io/user/app:v2": ("docker.io", "user/app", "v2", None, "user/app:v2"),
    "docker.io/library/a/b": ("docker.io", "library/a/b", None, None, "library/a/b"),
    "127.0.0.1:5000/a/b:1": ("127.0.0.1:5000", "a/b", "1", None, "127.0.0.1:5000/a/b:1"),
    "localhost/x": ("localhost", "x", None, None, "localhost/x"),
    "localhost:5000/x:y": ("localhost:5000", "x", "y", None, "localhost:5000/x:y"),
    "registry.example.com/team/app": ("registry.example.com", "team/app", None, None,
                                      "registry.example.com/team/app"),
    "Registry.Example.com/app": ("Registry.Example.com", "app", None, None,
                                 "Registry.Example.com/app"),
    "example:5000/app": ("example:5000", "app", None, None, "example:5000/app"),
    "[::1]:5000/app": ("[::1]:5000", "app", None, None, "[::1]:5000/app"),
    # Without a slash "localhost:5000" is a name plus a tag, as in docker.
    "localhost:5000": ("docker.io", "library/localhost", "5000", None, "localhost:5000"),
    "a.b-c__d_e---f": ("docker.io", "library/a.b-c__d_e---f", None, None, "a.b-c__d_e---f"),
    "x" * 20 + ":" + "t" * 128: ("docker.io", "library/" + "x" * 20, "t" * 128, None,
                                 "x" * 20 + ":" + "t" * 128),
    "deadbeef": ("docker.io", "library/deadbeef", None, None, "deadbeef"),
    f"sha256:{HEX}": ("docker.io", "library/sha256", HEX, None, f"sha256:{HEX}"),
    f"user/{HEX}": ("docker.io", f"user/{HEX}", None, None, f"user/{HEX}"),
}

INVALID = {
    "": ERR_FORMAT,
    " busybox": ERR_FORMAT,
    "busybox ": ERR_FORMAT,
    "busybox\n": ERR_FORMAT,
    "busybox:": ERR_FORMAT,
    "busybox@": ERR_FORMAT,
    ":latest": ERR_FORMAT,
    "/busybox": ERR_FORMAT,
    "busybox/": ERR_FORMAT,
    "a//b": ERR_FORMAT,
    "-busybox": ERR_FORMAT,
    "busybox-": ERR_FORMAT,
    "a..b": ERR_FORMAT,
    "a___b": ERR_FORMAT,
    "busybox:-tag": ERR_FORMAT,
    "busybox:.tag": ERR_FORMAT,
    "busybox:" + "t" * 129: ERR_FORMAT,
    "busybox:a:b": ERR_FORMAT,
    "busybox:tag/x": ERR_FORMAT,
    "busybox@sha256:abc": ERR_FORMAT,
    "busybox@" + HEX: ERR_FORMAT,
    "foo.com:bar/x": ERR_FORMAT,
    "-host.com/x": ERR_FORMAT,
    "héllo": ERR_FORMAT,
    "busybox:tàg": ERR_FORMAT,
    "Busybox": ERR_UPPERCASE,
    "busyBox:latest": ERR_UPPERCASE,
    "Foo/bar": ERR_UPPERCASE,
    "localhost:5000/Foo": ERR_UPPERCASE,
    "docker.io/library/BUSYBOX": ERR_UPPERCASE,
    HEX: f"invalid repository name ({HEX}), cannot specify 64-byte hexadecimal strings",
    f"{HEX}:tag": f"invalid repository name ({HEX}), cannot specify 64-byte hexadecimal strings",
    f"docker.io/{HEX}": f"invalid repository name ({HEX}), cannot specify 64-byte hexadecimal "
    "strings",
    "busybox@md5:" + "a" * 32: "unsupported digest algorithm",
    "busybox@sha256:" + "a" * 31: ERR_FORMAT,
    "busybox@sha256:" + "a" * 63: "invalid checksum digest length",
    "busybox@sha256:" + "a" * 65: "invalid checksum digest length",
    "busybox@sha256:" + HEX.upper(): "invalid checksum digest format",
    "a/" * 130 + "b": "repository name must not be more than 255 characters",
}


@pytest.mark.parametrize("text", list(VALID))
def test_valid_references(text: str) -> None:
    domain, path, tag, digest, familiar = VALID[text]
    ref = parse(text)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == (domain, path, tag, digest)
    assert ref.familiar_string() == familiar
    assert parse(ref.string()) == ref, "the full form parses back to the same reference"
    assert parse(ref.familiar_string()) == ref, "so does the familiar form"


@pytest.mark.parametrize("text", list(INVALID))
def test_invalid_references(text: str) -> None:
    with pytest.raises(InvalidParameter) as exc:
        parse(text)
    assert str(exc.value) == INVALID[text]


def test_same_repository_spellings() -> None:
    spellings = ["x", "docker.io/x", "docker.io/library/x", "index.docker.io/x",
                 "index.docker.io/library/x", "library/x"]
    assert {parse(s) for s in spellings} == {Reference("docker.io", "library/x")}


def test_names() -> None:
    ref = parse("busybox")
    assert ref.name == "docker.io/library/busybox"
    assert ref.familiar_name == "busybox"
    assert str(ref) == "docker.io/library/busybox"
    private = parse("127.0.0.1:5000/a/b:1")
    assert private.name == private.familiar_name == "127.0.0.1:5000/a/b"
    assert parse("user/app").name == "docker.io/user/app"


def test_default_tag() -> None:
    assert parse("busybox").with_default_tag().familiar_string() == "busybox:latest"
    assert parse("busybox").with_default_tag().string() == "docker.io/library/busybox:latest"
    assert parse("busybox:1").with_default_tag().tag == "1"
    by_digest = parse(f"busybox@{DIGEST}").with_default_tag()
    assert by_digest.tag is None and by_digest.digest == DIGEST


def test_with_tag_and_name_only() -> None:
    ref = parse(f"busybox@{DIGEST}")
    assert ref.with_tag("v1").familiar_string() == f"busybox:v1@{DIGEST}"
    assert ref.name_only() == parse("busybox")
    assert parse("busybox").is_name_only and not ref.is_name_only
    with pytest.raises(InvalidParameter, match="^invalid tag format$"):
        ref.with_tag("-bad")


@pytest.mark.parametrize("tag", ["latest", "1", "_", "A.b-C_d", "x" * 128, "1.0.0-rc.1"])
def test_valid_tags(tag: str) -> None:
    validate_tag(tag)


@pytest.mark.parametrize("tag", ["", "-x", ".x", "x" * 129, "a:b", "a/b", "a@b", "tàg", "a b"])
def test_invalid_tags(tag: str) -> None:
    with pytest.raises(InvalidParameter, match="^invalid tag format$"):
        validate_tag(tag)


def test_ids() -> None:
    assert is_full_id(HEX) and is_full_id(DIGEST)
    assert not is_full_id(HEX[:63]) and not is_full_id(HEX + "0")
    assert not is_full_id(HEX.upper()) and not is_full_id("sha512:" + HEX)
    assert not is_full_id("sha256:sha256:" + HEX)
    for prefix in ["a", "a3ed95", HEX, "sha256:a3", DIGEST]:
        assert is_id_prefix(prefix), prefix
    for bad in ["", "sha256:", "xyz", "A3ED", HEX + "0", "sha256:g", "busybox", "a3 "]:
        assert not is_id_prefix(bad), bad


def test_no_catastrophic_backtracking() -> None:
    start = time.monotonic()
    for text in ["a" * 200 + "!", "a-" * 100 + "!", "a" * 5000 + "/" + "b" * 5000 + "-"]:
        with pytest.raises(InvalidParameter):
            parse(text)
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("domain", ["localhost", "localhost:5000", "127.0.0.1:5000",
                                    "registry.example.com", "my-registry.local:443",
                                    "[::1]:5000", "docker.io", "a" * 63 + ".local"])
def test_check_domain_accepts_hosts(domain: str) -> None:
    assert check_domain(domain) is None


@pytest.mark.parametrize("domain, says", [
    ("", "empty"), ("a\x00b", "printable ASCII"), ("héllo.com", "printable ASCII"),
    ("a b", "printable ASCII"), ("r" * 300, "longer than 259"), ("..", "not a host"),
    ("host:99999", "port 99999"), ("host:0", "port 0"), ("host:abc", "not a host"),
    ("-host", "not a host"), ("a" * 64 + ".local", "longer than 63"), (":5000", "not a host"),
])
def test_check_domain_names_what_is_wrong(domain: str, says: str) -> None:
    reason = check_domain(domain)
    assert reason is not None and says in reason, reason
