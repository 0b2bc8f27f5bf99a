from __future__ import annotations

import random

import pytest

from svc.api.heads import raw_stream_head as response_head
from svc.api.heads import wants_upgrade as _wants_upgrade
from svc.wire.stdcopy import FrameDecoder, encode_frame
from svc.wire.timefmt import parse_timestamp_ns, rfc3339_nano


def test_frames_round_trip_in_any_split() -> None:
    frames = [(1, b"out"), (2, b"err" * 1000), (1, b""), (0, b"in")]
    data = b"".join(encode_frame(s, d) for s, d in frames)
    assert encode_frame(1, b"hi") == b"\x01\x00\x00\x00\x00\x00\x00\x02hi"
    rng = random.Random(7)
    for _ in range(20):
        dec, got, i = FrameDecoder(), [], 0
        while i < len(data):
            j = i + rng.randint(1, 50)
            got += [(f.stream, f.data) for f in dec.feed(data[i:j])]
            i = j
        assert got == frames and dec.pending == 0


def test_bad_stream_type() -> None:
    with pytest.raises(ValueError):
        FrameDecoder().feed(b"\x07\x00\x00\x00\x00\x00\x00\x00")


def test_rfc3339_nano() -> None:
    assert rfc3339_nano(1_795_340_602_451_252_091) == "2026-11-22T09:43:22.451252091Z"
    assert rfc3339_nano(0) == "1970-01-01T00:00:00.000000000Z"


@pytest.mark.parametrize("raw,ns", [
    ("1795340596", 1_795_340_596_000_000_000),
    ("1795340596.5", 1_795_340_596_500_000_000),
    ("1795340596.000000001", 1_795_340_596_000_000_001),
    ("2026-11-22T09:43:16Z", 1_795_340_596_000_000_000),
    ("2026-11-22T10:43:16.25+01:00", 1_795_340_596_250_000_000),
])
def test_parse_timestamp(raw: str, ns: int) -> None:
    assert parse_timestamp_ns(raw) == ns


@pytest.mark.parametrize("raw", ["", "yesterday", "1.2.3", "2026-13-01"])
def test_parse_timestamp_rejects(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp_ns(raw)


def test_upgrade_detection() -> None:
    assert _wants_upgrade([(b"Connection", b"Upgrade"), (b"Upgrade", b"tcp")])
    assert _wants_upgrade([(b"connection", b"keep-alive, upgrade"), (b"upgrade", b"TCP")])
    assert not _wants_upgrade([(b"Upgrade", b"tcp")])
    assert not _wants_upgrade([(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket")])
    assert response_head(True).startswith(b"HTTP/1.1 101 UPGRADED\r\n")
    assert response_head(False) == (b"HTTP/1.1 200 OK\r\nContent-Type: "
                                    b"application/vnd.svc.raw-stream\r\n\r\n")
