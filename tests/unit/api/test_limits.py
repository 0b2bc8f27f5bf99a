"""The JSON decoder's bounds and the request-head guard, without a server."""

from __future__ import annotations

import pytest

from svc.api import limits
from svc.api.limits import HeadGuard
from svc.wire import jsondoc


@pytest.mark.parametrize("raw, why", [
    (b'{"Memory": 1' + b"0" * 5000 + b"}", "out of range"),
    (b'{"Memory": 18446744073709551616}', "out of range"),
    (b'{"Memory": -9223372036854775809}', "out of range"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"x": NaN}', "NaN is not valid JSON"),
    (b'{"x": Infinity}', "Infinity is not valid JSON"),
    (b'{"x": 1e999}', "out of range"),
    (b'{"x": ', "not valid JSON"),
    (b'\xff\xfe', "not valid"),
])
def test_json_refusals_name_the_fault(raw: bytes, why: str) -> None:
    with pytest.raises(jsondoc.JSONError, match=why):
        jsondoc.loads(raw)


def test_json_bounds_that_pass() -> None:
    assert jsondoc.loads(b'{"a": 18446744073709551615, "b": -9223372036854775808}') == \
        {"a": 2**64 - 1, "b": -(2**63)}
    assert jsondoc.loads(b"[" * 50 + b"]" * 50) is not None
    assert jsondoc.loads('{"x": 1.5}') == {"x": 1.5}


def _feed(guard: HeadGuard, *parts: bytes) -> int | None:
    for p in parts:
        status = guard.on_data(p, 0.0)
        if status is not None:
            return status
    return None


def test_head_guard_statuses() -> None:
    assert _feed(HeadGuard(), bytes(range(256))) == 400
    assert _feed(HeadGuard(), b"\x16\x03\x01\x02\x00") == 400  # TLS to a plain socket
    assert _feed(HeadGuard(), b" GET / HTTP/1.1\r\n") == 400
    assert _feed(HeadGuard(), b"GET /?" + b"a" * limits.MAX_REQUEST_LINE) == 414
    big = b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * limits.MAX_HEAD
    assert _feed(HeadGuard(), big) == 431
    assert _feed(HeadGuard(), b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n") is None
    assert _feed(HeadGuard(), b"G", b"E", b"T", b" ", b"/ HTTP/1.1\r\n\r\n") is None


def test_a_body_after_the_head_does_not_count_as_head() -> None:
    g = HeadGuard()
    assert g.on_data(b"POST /x HTTP/1.1\r\nContent-Length: 9000000\r", 0.0) is None
    assert g.on_data(b"\n\r\n" + b"[" * (limits.MAX_HEAD + 10), 0.0) is None
    assert g.complete


def test_head_timeout_counts_from_the_first_byte() -> None:
    g = HeadGuard()
    g.open(100.0)
    assert not g.overdue(100.0 + limits.HEAD_TIMEOUT - 1)
    assert g.overdue(100.0 + limits.HEAD_TIMEOUT + 1)  # a connection that never asks
    g.head_done()
    assert not g.overdue(10**9)  # idle between requests: never
    g.on_data(b"GE", 500.0)
    assert g.overdue(500.0 + limits.HEAD_TIMEOUT + 1)


def test_runtime_errors_map_to_what_they_say() -> None:
    """A runtime's 'no such container' is a 404 and its state conflicts a 409 (they were
    500s: the runtime failure came first in their bases)."""
    from svc.api.errors import status_of
    from svc.runtime.protocol import ContainerNotFound, ContainerStateConflict, RuntimeFailure

    assert status_of(ContainerNotFound("container x does not exist")) == 404
    assert status_of(ContainerStateConflict("container not running")) == 409
    assert status_of(RuntimeFailure("runc exploded")) == 500
