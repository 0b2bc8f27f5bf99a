"""The embedded DNS server's message codec."""

from __future__ import annotations

import struct

import pytest

from svc.wire import dns


def query(name: str, qtype: int = 1, qid: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + \
        struct.pack(">HH", qtype, 1)


def test_parse_and_answer() -> None:
    q = dns.parse_query(query("Web.Example"))
    assert (q.id, q.name, q.qtype, q.qclass) == (0x1234, "web.example", 1, 1)
    out = dns.answer(q, ["10.0.0.5", "10.0.0.6"])
    qid, flags, qd, an, _, _ = struct.unpack_from(">HHHHHH", out)
    assert (qid, qd, an) == (0x1234, 1, 2) and flags & 0x8000 and flags & 0x0100  # QR, RD
    assert out.endswith(bytes([10, 0, 0, 6])) and out.count(b"\xc0\x0c") == 2


@pytest.mark.parametrize("msg", [b"", b"\0" * 11, query("a")[:-2],
                                 struct.pack(">HHHHHH", 1, 0x8000, 1, 0, 0, 0) + b"\0\0\1\0\1"])
def test_bad_messages(msg: bytes) -> None:
    with pytest.raises(dns.DNSFormatError):
        dns.parse_query(msg)


def test_failure_keeps_the_id() -> None:
    out = dns.failure(query("x", qid=77), dns.SERVFAIL)
    # QR, RD kept, RA, SERVFAIL
    assert out is not None and struct.unpack_from(">HH", out) == (77, 0x8182)
    assert dns.failure(b"\1", dns.FORMERR) is None
