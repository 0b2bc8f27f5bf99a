"""GNU sparse files in tar archives, read as Go's ``archive/tar`` (and so moby) reads them.

A sparse entry stores only its data segments; a map says where each goes in a file of its
real size, the rest being holes. Three spellings exist, all accepted:

- the old GNU header (type ``S``): up to 4 map entries in the header at offset 386, more in
  extension blocks of 21 that follow it, the real size at offset 483;
- PAX 0.0 and 0.1: ``GNU.sparse.offset``/``GNU.sparse.numbytes`` pairs (0.0, merged into a
  map while the PAX records are read) or ``GNU.sparse.map`` (0.1), with ``GNU.sparse.size``;
- PAX 1.0 (``GNU.sparse.major=1``, ``minor=0``): the map is the start of the payload, decimal
  numbers each ended by a newline (the count, then offset and length pairs), padded to a
  block; ``GNU.sparse.name`` and ``GNU.sparse.realsize``.

The map must be in order, without overlaps, inside the real size, and its lengths must add
up to the data stored, as Go's ``validateSparseEntries`` and its reader demand.
"""

from __future__ import annotations

from collections.abc import Callable

from svc.storage.tarfields import BLOCK, bad, num, show

Segment = tuple[int, int]  # (offset in the file, length)
MAX_SEGMENTS = 1 << 16  # a map longer than this is refused (Go bounds its map by size too)


def old_gnu(block: bytes, more: Callable[[], bytes]) -> tuple[list[Segment], int]:
    """The map and real size of an old GNU sparse header; ``more()`` reads the next
    extension block (recorded in the skeleton like any header)."""
    segments = _entries(block[386:482], 4)
    real = num(block[483:495])
    extended = block[482]
    while extended:
        ext = more()
        if len(ext) < BLOCK:
            raise bad("unexpected end of data in a sparse map")
        segments += _entries(ext[:504], 21)
        if len(segments) > MAX_SEGMENTS:
            raise bad("a sparse map is too long")
        extended = ext[504]
    return segments, real


def _entries(data: bytes, count: int) -> list[Segment]:
    out = []
    for i in range(count):
        field = data[i * 24 : i * 24 + 24]
        if field[0] == 0:  # an unused entry ends the list, as in Go
            break
        out.append((num(field[:12]), num(field[12:])))
    return out


def pax(records: dict[bytes, bytes], read_block: Callable[[], bytes], name: bytes
        ) -> tuple[list[Segment], int | None, bytes | None, int] | None:
    """For an entry with PAX records: (map, real size, name, payload bytes the map used) if
    it is a GNU sparse file, else None. ``read_block`` reads the next payload block (1.0)."""
    major = records.get(b"GNU.sparse.major")
    minor = records.get(b"GNU.sparse.minor")
    if major == b"0" and minor in (b"0", b"1"):
        v1 = False
    elif major == b"1" and minor == b"0":
        v1 = True
    elif major is not None or minor is not None:
        raise bad(f'entry "{show(name)}" uses an unknown GNU sparse format '
                  f"({show(major or b'')}.{show(minor or b'')})")
    elif records.get(b"GNU.sparse.map"):
        v1 = False
    else:
        return None
    size_text = records.get(b"GNU.sparse.size") or records.get(b"GNU.sparse.realsize")
    try:
        real = int(size_text) if size_text else None
    except ValueError:
        raise bad(f'entry "{show(name)}" has a bad sparse size') from None
    sparse_name = records.get(b"GNU.sparse.name")
    if v1:
        segments, used = _map_1x0(read_block, name)
    else:
        segments, used = _map_0x1(records.get(b"GNU.sparse.map", b""), name), 0
    return segments, real, sparse_name, used


def _map_0x1(text: bytes, name: bytes) -> list[Segment]:
    parts = text.split(b",") if text else []
    if len(parts) % 2 or len(parts) > 2 * MAX_SEGMENTS:
        raise bad(f'entry "{show(name)}" has a malformed sparse map')
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise bad(f'entry "{show(name)}" has a malformed sparse map') from None
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def _map_1x0(read_block: Callable[[], bytes], name: bytes) -> tuple[list[Segment], int]:
    """The map at the start of a 1.0 payload; and how many payload bytes it took."""
    buf = b""
    used = 0

    def number() -> int:
        nonlocal buf, used
        while b"\n" not in buf:
            if len(buf) > 64:
                raise bad(f'entry "{show(name)}" has a malformed sparse map')
            block = read_block()
            if len(block) < BLOCK:
                raise bad("unexpected end of data in a sparse map")
            buf += block
            used += BLOCK
        text, _, buf = buf.partition(b"\n")
        if not text.isdigit():
            raise bad(f'entry "{show(name)}" has a malformed sparse map')
        return int(text)

    count = number()
    if count > MAX_SEGMENTS:
        raise bad(f'entry "{show(name)}": a sparse map is too long')
    return [(number(), number()) for _ in range(count)], used


def check(segments: list[Segment], real: int, data: int, name: bytes) -> None:
    """The map must fit the file and account for exactly the ``data`` bytes stored."""
    end = 0
    for offset, length in segments:
        if offset < 0 or length < 0 or offset < end or offset + length > real:
            raise bad(f'entry "{show(name)}" has a sparse map out of order or beyond its size')
        end = offset + length
    if sum(length for _, length in segments) != data:
        raise bad(f'entry "{show(name)}": its sparse map does not match the data stored')
