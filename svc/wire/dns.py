"""The little of RFC 1035 the embedded DNS server needs: a query's question, an answer of A
records, a failure reply. Pure bytes in and out."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

ADDRESS = "127.0.0.11"
PORT = 53
TYPE_A, TYPE_AAAA, CLASS_IN = 1, 28, 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN = 0, 1, 2, 3
TTL = 600
_HEADER = struct.Struct(">HHHHHH")


class DNSFormatError(ValueError):
    pass


@dataclass(frozen=True)
class Question:
    id: int
    flags: int
    name: str  # lowercase, without the trailing dot
    qtype: int
    qclass: int
    raw: bytes  # the question section as received (echoed in the answer)


def parse_query(msg: bytes) -> Question:
    """The one question of a standard query (``DNSFormatError`` otherwise)."""
    if len(msg) < _HEADER.size:
        raise DNSFormatError("short message")
    qid, flags, qd, _, _, _ = _HEADER.unpack_from(msg)
    if flags & 0x8000 or qd != 1:
        raise DNSFormatError("not a query with one question")
    labels, pos = [], _HEADER.size
    while True:
        if pos >= len(msg):
            raise DNSFormatError("truncated name")
        n = msg[pos]
        if n & 0xC0:
            raise DNSFormatError("compressed name in a question")
        pos += 1
        if n == 0:
            break
        labels.append(msg[pos:pos + n].decode("ascii", "replace"))
        pos += n
    if pos + 4 > len(msg):
        raise DNSFormatError("truncated question")
    qtype, qclass = struct.unpack_from(">HH", msg, pos)
    return Question(qid, flags, ".".join(labels).lower(), qtype, qclass,
                    msg[_HEADER.size:pos + 4])


def answer(q: Question, addresses: list[str], rcode: int = NOERROR) -> bytes:
    """A response to ``q``: authoritative, recursion available, with an A record per
    address (compressed to the question's name)."""
    flags = 0x8000 | (q.flags & 0x7900) | 0x0400 | 0x0080 | rcode  # QR, opcode+RD, AA, RA
    out = [_HEADER.pack(q.id, flags, 1, len(addresses), 0, 0), q.raw]
    for a in addresses:
        out.append(struct.pack(">HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL, 4)
                   + socket.inet_aton(a))
    return b"".join(out)


def failure(msg: bytes, rcode: int) -> bytes | None:
    """A bare error response to an unparsable or unanswerable message, if it has a header."""
    if len(msg) < _HEADER.size:
        return None
    qid, flags = struct.unpack_from(">HH", msg)
    return _HEADER.pack(qid, 0x8000 | (flags & 0x7900) | 0x0080 | rcode, 0, 0, 0, 0)
