"""``logs -f`` from the tap renders each write exactly as reading the log back renders the
records the writer made of it: frames (or a TTY's raw bytes), with and without timestamps,
for lines of one width (framed with one ``replace``) and of mixed widths, escapes, long
lines and unfinished lines."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from svc.engine.containers.log_chunks import raw_chunks
from svc.engine.containers.log_tap import Tapped, _Cutter
from svc.storage.jsonlog.reader import read_framed, read_logs
from svc.storage.jsonlog.writer import JsonLogWriter
from svc.wire.jsonlog import MAX_LINE, Lines, plain_lines, records_of
from svc.wire.stdcopy import STDERR, STDOUT

T0 = 1546341071111111111
CODES = {"stdout": STDOUT, "stderr": STDERR}


def _chunks(rng: random.Random, streams: list[str]) -> list[tuple[str, bytes]]:
    alike = b"z" * 999 + b"\n"
    # (Not invalid UTF-8: the file holds U+FFFD for it, the tap the bytes as written.)
    pieces = [b"line\n", b"no newline", b'quote"\n', b"\t\n", b"\xc3\xa9\n", b"\n", b"<&>\n",
              b"w" * (MAX_LINE + 7), b"v" * 3000 + b"\n"]
    out = []
    for _ in range(300):
        stream = rng.choice(streams)
        if rng.random() < 0.4:  # a block of lines of one width, as bulk writers make
            chunk = alike * rng.randrange(1, 40)
        else:
            chunk = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6)))
        out.append((stream, chunk))
    return out


@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("raw", [False, True])
def test_the_tapped_render_is_the_log_read_back(tmp_path: Path, timestamps: bool,
                                                raw: bool) -> None:
    path = tmp_path / "c-json.log"
    cutter = _Cutter((b"", b""), stdout=True, stderr=True, timestamps=timestamps, raw=raw)
    got = []
    with JsonLogWriter(path, max_size=None) as w:
        streams = ["stdout"] if raw else ["stdout", "stderr"]  # a TTY has one stream
        for i, (stream, chunk) in enumerate(_chunks(random.Random(5), streams)):
            made = w.write(stream, chunk, T0 + i, records=True)
            ref, end = w.position()
            got.append(cutter.render([Tapped(CODES[stream], chunk, T0 + i, ref, end,
                                             records=made)]))
        for j, stream in enumerate(streams):
            w.flush(T0 + 999 + j, stream)
            ref, end = w.position()
            got.append(cutter.render([Tapped(CODES[stream], b"", T0 + 999 + j, ref, end,
                                             flush=True)]))
    if raw:
        back = b"".join(raw_chunks(read_logs(path, stdout=True, stderr=True), timestamps))
    else:
        back = b"".join(read_framed(path, stdout=True, stderr=True, timestamps=timestamps))
    assert b"".join(got) == back


def test_plain_lines_know_their_width() -> None:
    assert plain_lines(b"ab\ncd\nef\n") == Lines(b"ab\ncd\nef\n", 3)
    assert plain_lines(b"ab\ncd\ne\n") == Lines(b"ab\ncd\ne\n", 0)
    assert plain_lines(b"a\nbc\n\n") == Lines(b"a\nbc\n\n", 0)  # as many bytes, other cuts
    assert plain_lines(b"\n\n") == Lines(b"\n\n", 1)
    assert plain_lines(b'a"\n') is None and plain_lines(b"\xc3\xa9\n") is None
    assert plain_lines(b"a\tb\n") is None
    assert records_of(b"xy\nzw\n")[0] == [Lines(b"xy\nzw\n", 3)]
