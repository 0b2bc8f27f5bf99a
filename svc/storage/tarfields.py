"""A tar header's fields: numbers (octal or GNU base-256), the checksum, PAX records; and
how a name is shown in a message. Shared by the reader (``tarformat``) and the sparse maps
(``tarsparse``), which import nothing else of each other's."""

from __future__ import annotations

import struct
import zlib

from svc.errors import InvalidParameter

BLOCK = 512

SHOWN_MAX = 200  # bytes of a name an error message shows


def show(name: bytes) -> str:
    """A name for a message: decoded with escapes, cut short when long."""
    if len(name) > SHOWN_MAX:
        return (name[:SHOWN_MAX].decode("utf-8", "backslashreplace")
                + f"...({len(name)} bytes)")
    return name.decode("utf-8", "backslashreplace")


def bad(message: str) -> InvalidParameter:
    return InvalidParameter(f"invalid layer archive: {message}")


def num(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 when the high bit is set."""
    try:
        return int(field.rstrip(b"\0 "), 8)  # fast path: "0000644\0", "  644 \0", "015341\0 "
    except ValueError:
        pass
    if field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0xFF else value
    text = field.partition(b"\0")[0]
    return int(text, 8) if text.strip() else 0


def checksum_ok(block: bytes) -> bool:
    """Unsigned header sum (checksum field as spaces); signed too, as some old tars wrote it."""
    view = memoryview(block)
    # Each half sums to at most 65280 < 65521, so Adler-32's low half is its exact byte sum + 1.
    total = (zlib.adler32(view[:256]) & 0xFFFF) + (zlib.adler32(view[256:]) & 0xFFFF) - 2
    try:
        stored = num(block[148:156])
    except ValueError:
        return False
    if stored == total - sum(block[148:156]) + 256:
        return True
    signed: tuple[int, ...] = struct.unpack_from("148b", block)
    signed += struct.unpack_from("356b", block, 156)
    return stored == 256 + sum(signed)


def pax_records(data: bytes) -> dict[bytes, bytes]:
    """Parse PAX ``"<len> key=value\\n"`` records (values kept as raw bytes)."""
    records: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos]:
        space = data.find(b" ", pos)
        length = int(data[pos:space]) if space > pos else 0
        record = data[pos : pos + length]
        key, eq, value = record[space - pos + 1 : -1].partition(b"=")
        if length <= 0 or len(record) != length or not record.endswith(b"\n") or not eq:
            raise ValueError("malformed PAX record")
        if not (key.startswith(b"GNU.sparse.") and merge_sparse_record(records, key, value)):
            records[key] = value
        pos += length
    return records


def merge_sparse_record(records: dict[bytes, bytes], key: bytes, value: bytes) -> bool:
    """PAX 0.0 sparse files repeat ``GNU.sparse.offset``/``numbytes``: keep them, in order,
    as one ``GNU.sparse.map`` (as Go does). True when ``key`` was such a record."""
    if key not in (b"GNU.sparse.offset", b"GNU.sparse.numbytes"):
        return False
    have = records.get(b"GNU.sparse.map")
    records[b"GNU.sparse.map"] = value if not have else have + b"," + value
    return True


def pax_time_ns(text: bytes) -> int:
    negative = text.startswith(b"-")
    whole, _, frac = text.lstrip(b"-").partition(b".")
    ns = int(whole or b"0") * 1_000_000_000 + int((frac + b"000000000")[:9])
    return -ns if negative else ns
