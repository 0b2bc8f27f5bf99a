"""The C framer (svc.wire.native) against the Python path it stands in for: on every block it
frames, the same bytes; on every block of the writer's exact shape and one stream, it frames
(nothing is left to Python that C could do); anything else it leaves to Python."""

from __future__ import annotations

import random

import pytest

from svc.wire.jsonlog import encode_record
from svc.wire.jsonlog_parse import to_frames
from svc.wire.native import Framer, library_path

FRAMER = Framer.load()
pytestmark = pytest.mark.skipif(
    FRAMER is None, reason=f"{library_path()} is not built (scripts/setup.sh builds it)")
T0 = 1_764_000_000_123_456_789


def _block(records: list[tuple[str, bytes]], step: int = 1_000) -> bytes:
    return b"".join(encode_record(stream, data, T0 + i * step)
                    for i, (stream, data) in enumerate(records))


def _exact(block: bytes) -> bool:
    """Every line the writer's exact shape, of the first line's stream, nothing escaped."""
    lines = block.split(b"\n")[:-1]
    mid = lines[0][-62:-32]
    return mid in (b'\\n","stream":"stdout","time":"', b'\\n","stream":"stderr","time":"') \
        and all(line[-62:-32] == mid and line.endswith(b'"}') and line.startswith(b'{"log":"')
                and b"\\" not in line[8:-62] and b'"' not in line[8:-62] for line in lines)


def _both(block: bytes, want: int = 3) -> tuple[bytes | None, bytes]:
    assert FRAMER is not None
    c = FRAMER.frames(block)
    return (None if c is None else to_frames(want, 0, False, block)), \
        to_frames(want, 0, False, block, None)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_exact_blocks_are_framed_in_c_as_python_frames_them(stream: str) -> None:
    texts = [b"", b"x", b"hello world", b"\xe2\x82\xac utf-8", b"a" * 16 * 1024,
             b"{}", b"json: {}"]
    block = _block([(stream, t + b"\n") for t in texts])
    for want in (1, 2, 3):
        c, py = _both(block, want)
        assert c is not None
        assert c == py
    assert (to_frames(1, 0, False, block) == b"") == (stream == "stderr")


@pytest.mark.parametrize("records", [
    [("stdout", b"a\n"), ("stderr", b"b\n")],  # two streams
    [("stdout", b'say "hi"\n')],  # escaped quote
    [("stdout", b"back\\slash\n")],  # escaped backslash
    [("stdout", b"bell\x07\n")],  # escaped control byte
    [("stdout", b"partial")],  # a partial record (no newline)
    [("stdout", b"a\n"), ("stdout", b"partial"), ("stdout", b"b\n")],
])
def test_other_blocks_are_left_to_python(records: list[tuple[str, bytes]]) -> None:
    assert FRAMER is not None
    block = _block(records)
    assert FRAMER.frames(block) is None
    assert to_frames(3, 0, False, block) == to_frames(3, 0, False, block, None)


def test_damaged_and_foreign_lines_are_left_to_python() -> None:
    assert FRAMER is not None
    good = _block([("stdout", b"one\n"), ("stdout", b"two\n")])
    for bad in (good[:-1], good[:-40], b"x" + good, good.replace(b'"time"', b'"tiem"'),
                good + b'{"log":"three\\n","stream":"stdout","time":"2026-11-28T20:31:41Z"}\n',
                b'{"log":"a\\n","stream":"stdout","attrs":{},"time":"2026-11-28T20:31:41.1Z"}\n',
                b""):
        assert FRAMER.frames(bad) is None, bad[:80]


def test_random_blocks_agree() -> None:
    """Random texts from an alphabet with every character that needs escaping, random
    streams and partial records: C frames exactly the blocks Python's fast path can, the
    same way; times, stamps and ``since`` stay Python's."""
    rng = random.Random(27)
    alphabet = b'ab \t"\\\n\x00\x1f\xc3\xa9{}:,'
    framed = 0
    for _ in range(2_000):
        one, safe, partials = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.2
        records = []
        for _ in range(rng.randint(1, 30)):
            stream = "stdout" if one or rng.random() < 0.7 else "stderr"
            chars = b"xyz 0{}:" if safe and rng.random() < 0.97 else alphabet
            text = bytes(rng.choice(chars) for _ in range(rng.randint(0, 60)))
            records.append((stream, text if partials and rng.random() < 0.1 else text + b"\n"))
        block = _block(records)
        c, py = _both(block, rng.choice((1, 2, 3)))
        if c is not None:
            framed += 1
            assert c == py
        if _exact(block):
            assert c is not None, block[:200]
        assert to_frames(3, T0 + 5_000, True, block) == to_frames(3, T0 + 5_000, True, block, None)
    assert framed > 300
