"""The json-file log driver: dockerd's on-disk format, rotation, reading back, follow, framing."""

from __future__ import annotations

import gzip
import json
import os
import random
import threading
import time
from pathlib import Path

import pytest
import trio

from svc.storage.jsonlog.follow import follow, follow_framed
from svc.storage.jsonlog.options import parse_log_opts, parse_size
from svc.storage.jsonlog.reader import log_files, read_framed, read_logs
from svc.storage.jsonlog.writer import JsonLogWriter
from svc.wire.jsonlog import MAX_LINE, Lines, encode_record, format_time, records_of
from svc.wire.jsonlog_parse import LogRecord
from svc.wire.stdcopy import FrameDecoder

T0 = 1546341071111111111  # 2019-01-01T11:11:11.111111111Z, the docs' example time


def go_escape(s: bytes) -> bytes:
    """A byte-by-byte port of moby's ffjsonWriteJSONBytesAsString, the reference."""
    out, i = bytearray(), 0
    while i < len(s):
        b = s[i]
        if b < 0x80:
            if b >= 0x20 and b not in b'\\"<>&':
                out.append(b)
            elif b in b'\\"':
                out += b"\\" + bytes([b])
            elif b == 0x0A:
                out += b"\\n"
            elif b == 0x0D:
                out += b"\\r"
            else:
                out += b"\\u00%02x" % b
            i += 1
            continue
        size = next((k for k in (2, 3, 4) if _one_rune(s[i : i + k])), 0)
        if not size:
            out += b"\\ufffd"
            i += 1
        elif s[i : i + size] in ("\u2028".encode(), "\u2029".encode()):
            out += b"\\u202" + s[i + size - 1 : i + size].hex()[-1:].encode()
            i += size
        else:
            out += s[i : i + size]
            i += size
    return bytes(out)


def _one_rune(b: bytes) -> bool:
    try:
        return len(b.decode()) == 1
    except UnicodeDecodeError:
        return False


def records(path: Path, **kw: object) -> list[LogRecord]:
    return list(read_logs(path, stdout=True, stderr=True, **kw))  # type: ignore[arg-type]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# -- format ------------------------------------------------------------------------------------


def test_line_matches_dockerd_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"Log line is here\n", T0)
    assert path.read_bytes() == (
        b'{"log":"Log line is here\\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}\n'
    )
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_escapes_as_go_does() -> None:
    line = encode_record("stderr", b'\t<a href="x">&</a>\\\r\x00\x7f\x1b[0m\n', T0)
    assert line.startswith(
        b'{"log":"\\u0009\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e\\\\\\r\\u0000\x7f'
        b'\\u001b[0m\\n","stream":"stderr",'
    )
    assert encode_record("stdout", "caf\u00e9 \u2028\u2029 \U0001f600".encode(), T0).startswith(
        '{"log":"caf\u00e9 \\u2028\\u2029 \U0001f600","stream"'.encode()
    )


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        (b"\xff", b"\\ufffd"),
        (b"\xe2\x82A", b"\\ufffd\\ufffdA"),  # Go replaces byte by byte, Python per subpart
        (b"\xed\xa0\x80", b"\\ufffd" * 3),  # an encoded surrogate
        (b"\xf0\x9f\x98", b"\\ufffd" * 3),  # a truncated emoji
        (b"\xc0\xaf", b"\\ufffd" * 2),  # overlong
        ("\ufffd".encode(), "\ufffd".encode()),  # a real U+FFFD stays raw
    ],
)
def test_invalid_utf8_becomes_ufffd_per_byte(raw: bytes, escaped: bytes) -> None:
    assert encode_record("stdout", raw, T0).startswith(b'{"log":"' + escaped + b'","stream"')
    assert go_escape(raw) == escaped


def test_random_bytes_match_the_go_reference(tmp_path: Path) -> None:
    rng = random.Random(7)
    alphabet = [*b"ab \t\"\\<>&\r\x00\x7f", 0xC3, 0xA9, 0xE2, 0x80, 0xA8, 0xF0, 0x9F, 0xFF]
    end = b'","stream":"%s","time":"2019-01-01T11:11:11.111111111Z"}\n'
    path = tmp_path / "c-json.log"
    expected = []
    with JsonLogWriter(path, max_size=None) as w:
        for _ in range(500):
            text = bytes(rng.choice(alphabet) for _ in range(rng.randrange(40)))
            w.write("stdout", text + b"\n", T0)
            expected.append(b'{"log":"' + go_escape(text + b"\n") + end % b"stdout")
            if text:
                w.write("stderr", text, T0)
                w.flush(T0)
                expected.append(b'{"log":"' + go_escape(text) + end % b"stderr")
    assert lines_of(path) == expected


def test_nine_digit_times() -> None:
    assert format_time(T0) == "2019-01-01T11:11:11.111111111Z"
    assert format_time(1_000_000_000) == "1970-01-01T00:00:01.000000000Z"


def test_reading_back_gives_the_bytes_go_would(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"ok \t\"q\" caf\xc3\xa9\n\xffx\n", T0)
    assert records(path) == [
        LogRecord("stdout", b'ok \t"q" caf\xc3\xa9\n', T0),
        LogRecord("stdout", b"\xef\xbf\xbdx\n", T0),
    ]


# -- splitting ---------------------------------------------------------------------------------


def test_partial_lines_wait_for_their_newline_per_stream(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    w = JsonLogWriter(path, max_size=None)
    w.write("stdout", b"abc", T0)
    w.write("stderr", b"err", T0)
    assert path.read_bytes() == b""
    w.write("stdout", b"def\nghi", T0 + 1)
    w.flush(T0 + 2)
    w.write("stderr", b"\n", T0 + 3)
    w.close()
    assert [(r.stream, r.data, r.time_ns) for r in records(path)] == [
        ("stdout", b"abcdef\n", T0 + 1),
        ("stdout", b"ghi", T0 + 2),
        ("stderr", b"err", T0 + 2),
        ("stderr", b"\n", T0 + 3),
    ]
    assert b'"log":"ghi","stream"' in path.read_bytes()  # a partial record has no \n


def test_close_flushes_the_unfinished_line(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"no newline", T0)
    assert [r.data for r in records(path)] == [b"no newline"]
    with pytest.raises(ValueError):
        w.write("stdout", b"x")


def test_one_streams_end_does_not_cut_the_others_line(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"half", T0)
        w.write("stderr", b"err", T0)
        w.flush(T0, "stderr")  # stderr reached EOF; stdout goes on
        assert w.pending() == (b"half", b"")
        w.write("stdout", b" line\n", T0)
    assert [(r.stream, r.data) for r in records(path)] == [("stderr", b"err"),
                                                            ("stdout", b"half line\n")]


def test_records_of_cuts_as_the_writer_does() -> None:
    groups, rest = records_of(b"a\nbb\n" + b"x" * (MAX_LINE + 5))
    assert groups == [Lines(b"a\nbb\n", 0), [b"x" * MAX_LINE]] and rest == b"x" * 5
    groups, rest = records_of(b"y" * (MAX_LINE + 2) + b"\nz")
    assert groups == [[b"y" * MAX_LINE, b"yy\n"]] and rest == b"z"


def test_the_writers_own_records_are_what_records_of_gives(tmp_path: Path) -> None:
    """``write(records=True)`` hands followers the same records a cut of the chunk (after the
    stream's unfinished line) gives, and writes the same file as a plain write."""
    rng = random.Random(11)
    pieces = [b"line\n", b"no newline", b'quote"\n', b"\t\n", b"\xff\n", b"\n",
              b"z" * (MAX_LINE + 7), b"w" * 3000 + b"\n"]
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    shadow = {"stdout": b"", "stderr": b""}
    with JsonLogWriter(a, max_size=None) as wa, JsonLogWriter(b, max_size=None) as wb:
        for i in range(400):
            stream = rng.choice(["stdout", "stderr"])
            chunk = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6)))
            got = wa.write(stream, chunk, T0 + i, records=True)
            assert wb.write(stream, chunk, T0 + i) is None
            want = records_of(shadow[stream] + chunk) if chunk else ([], b"")
            if chunk:
                shadow[stream] = want[1]
            assert got == want, (shadow, chunk)
        wa.flush(T0 + 999)
        wb.flush(T0 + 999)
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    ("size", "pieces"),
    [
        (MAX_LINE - 1, [MAX_LINE]),  # 16383 bytes and its newline fit
        (MAX_LINE, [MAX_LINE, 1]),  # dockerd's buffer fills first: a lone "\n" record follows
        (40000, [MAX_LINE, MAX_LINE, 40000 - 2 * MAX_LINE + 1]),
    ],
)
def test_long_lines_are_split_at_16k(tmp_path: Path, size: int, pieces: list[int]) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"short\n" + b"a" * size + b"\nshort\n", T0)
    got = [len(r.data) for r in records(path)]
    assert got == [6, *pieces, 6]
    assert b"".join(r.data for r in records(path)) == b"short\n" + b"a" * size + b"\nshort\n"


def test_a_growing_unfinished_line_is_cut_at_16k(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"x" * 10000, T0)
        assert path.read_bytes() == b""
        w.write("stdout", b"x" * 10000, T0)
        assert [len(r.data) for r in records(path)] == [MAX_LINE]
    assert [len(r.data) for r in records(path)] == [MAX_LINE, 20000 - MAX_LINE]


def test_a_character_split_at_16k_becomes_replacement_chars(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"a" * (MAX_LINE - 1) + "\u00e9".encode() + b"\n", T0)
    first, second = records(path)
    assert first.data.endswith(b"a\xef\xbf\xbd") and second.data == b"\xef\xbf\xbd\n"


# -- rotation ----------------------------------------------------------------------------------


def write_numbered(w: JsonLogWriter, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        w.write("stdout" if i % 3 else "stderr", b"line %05d\n" % i, T0 + i)


def test_rotation_keeps_max_file_files(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=1000, max_file=3) as w:
        write_numbered(w, 200)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "c-json.log", "c-json.log.1", "c-json.log.2"
    ]
    record_len = len(lines_of(path)[0])
    for p in (tmp_path / "c-json.log.1", tmp_path / "c-json.log.2"):
        # moby rotates before a record once the file has reached max-size
        assert 1000 <= p.stat().st_size < 1000 + record_len
    got = [int(r.data[5:10]) for r in records(path)]
    assert got == list(range(200 - len(got), 200)) and len(got) > 20


def test_rotation_splits_one_big_write_between_records(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=1000, max_file=50) as w:
        w.write("stdout", b"".join(b"line %05d\n" % i for i in range(100)), T0)
    files = [p for p, _ in log_files(path)]
    assert len(files) > 5
    for p in files:
        assert p.read_bytes().endswith(b"}\n")
    assert [int(r.data[5:10]) for r in records(path)] == list(range(100))


def test_max_file_1_truncates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=500, max_file=1) as w:
        write_numbered(w, 100)
    assert [p.name for p in tmp_path.iterdir()] == ["c-json.log"]
    assert path.stat().st_size < 600
    assert int(records(path)[-1].data[5:10]) == 99


def test_compressed_rotation(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=1000, max_file=4, compress=True) as w:
        write_numbered(w, 200)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["c-json.log", "c-json.log.1.gz", "c-json.log.2.gz", "c-json.log.3.gz"]
    gz = tmp_path / "c-json.log.1.gz"
    with gzip.open(gz) as f:
        last = f.read().splitlines()[-1]
    raw = gz.read_bytes()
    assert raw[3] & 4  # FEXTRA with moby's rotateFileMetadata
    extra = json.loads(raw[12 : 12 + int.from_bytes(raw[10:12], "little")])
    assert extra["lastTime"].encode() in last
    got = [int(r.data[5:10]) for r in records(path)]
    assert got == list(range(200 - len(got), 200)) and len(got) > 30


def test_interrupted_compression_is_finished_and_read_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=1000, max_file=3, compress=True) as w:
        write_numbered(w, 50)
    # A crash after "rename path -> path.1" but before gzip finished.
    (tmp_path / "c-json.log.1.gz").rename(tmp_path / "c-json.log.1.gz.tmp")
    with gzip.open(tmp_path / "c-json.log.1.gz.tmp") as f:
        (tmp_path / "c-json.log.1").write_bytes(f.read())
    before = records(path)
    assert [int(r.data[5:10]) for r in before][-1] == 49
    JsonLogWriter(path, max_size=1000, max_file=3, compress=True).close()
    assert not (tmp_path / "c-json.log.1").exists()
    assert not (tmp_path / "c-json.log.1.gz.tmp").exists()
    assert records(path) == before


def test_reader_prefers_the_plain_file_when_both_exist(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    (tmp_path / "c-json.log.1").write_bytes(encode_record("stdout", b"plain\n", T0))
    with gzip.open(tmp_path / "c-json.log.1.gz", "wb") as f:
        f.write(encode_record("stdout", b"gz\n", T0))
    with gzip.open(tmp_path / "c-json.log.2.gz", "wb") as f:
        f.write(encode_record("stdout", b"older\n", T0))
    path.write_bytes(encode_record("stdout", b"live\n", T0))
    assert [r.data for r in records(path)] == [b"older\n", b"plain\n", b"live\n"]


# -- reading -----------------------------------------------------------------------------------


@pytest.fixture
def rotated_log(tmp_path: Path) -> Path:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=800, max_file=10, compress=True) as w:
        write_numbered(w, 60)
    return path


def test_reading_while_another_thread_rotates(tmp_path: Path) -> None:
    """The files are opened as one consistent set: records come whole, in order, no gaps."""
    path = tmp_path / "c-json.log"
    w = JsonLogWriter(path, max_size=1500, max_file=4, compress=True)
    done = threading.Event()

    def writer() -> None:
        i = 0
        while not done.is_set():
            write_numbered(w, 7, i)
            i += 7
        w.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for n in range(200):
            got = [int(r.data[5:10]) for r in records(path, tail=None if n % 2 else 40)]
            assert got == list(range(got[0], got[0] + len(got))) if got else True
    finally:
        done.set()
        thread.join()


def test_tail_counts_both_streams_across_rotated_and_gzipped_files(rotated_log: Path) -> None:
    assert any(gz for _, gz in log_files(rotated_log))
    for n in (0, 1, 7, 25, 59, 60, 1000):
        got = [int(r.data[5:10]) for r in records(rotated_log, tail=n)]
        assert got == list(range(max(0, 60 - n), 60)), n
    out = list(read_logs(rotated_log, stdout=True, stderr=False, tail=6))
    assert [int(r.data[5:10]) for r in out] == [55, 56, 58, 59]  # 54 and 57 were stderr
    assert records(rotated_log, tail=-1) == records(rotated_log)


def test_since_and_stream_filters(rotated_log: Path) -> None:
    got = [int(r.data[5:10]) for r in records(rotated_log, since_ns=T0 + 45)]
    assert got == list(range(45, 60))
    got = [int(r.data[5:10]) for r in records(rotated_log, since_ns=T0 + 45, tail=5)]
    assert got == list(range(55, 60))
    errs = list(read_logs(rotated_log, stdout=False, stderr=True))
    assert [int(r.data[5:10]) for r in errs] == list(range(0, 60, 3))
    assert {r.stream for r in errs} == {"stderr"}
    assert list(read_logs(rotated_log, stdout=False, stderr=False)) == []


def test_torn_last_line_is_skipped_and_isolated_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"one\n", T0)
    whole = encode_record("stdout", b"two\n", T0)
    with open(path, "ab") as f:
        f.write(whole[:25])  # a crash mid-write
    assert [r.data for r in records(path)] == [b"one\n"]
    assert [r.data for r in records(path, tail=1)] == [b"one\n"]
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"three\n", T0)
    assert [r.data for r in records(path)] == [b"one\n", b"three\n"]


def test_damaged_lines_are_skipped_not_the_block(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    good = [encode_record("stdout", b"r%d\n" % i, T0 + i) for i in range(5)]
    path.write_bytes(b"".join(good[:2]) + b"garbage\n" + b"\x00" * 80 + b"\n" + b"".join(good[2:]))
    assert [r.data for r in records(path)] == [b"r%d\n" % i for i in range(5)]


def test_reads_dockerds_own_lines(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    path.write_bytes(
        b'{"log":"hello\\n","stream":"stdout","time":"2019-01-01T11:11:11.1Z"}\n'
        b'{"log":"x\\u003c\\n","stream":"stderr","attrs":{"tag":"t"},"time":"2019-01-01T11:11:12Z"}\n'
        b'{"log":"y\\ud800\\n","stream":"stdout","time":"2019-01-01T12:11:12+01:00"}\n'
    )
    assert records(path) == [
        LogRecord("stdout", b"hello\n", 1546341071_100000000),
        LogRecord("stderr", b"x<\n", 1546341072_000000000),
        LogRecord("stdout", b"y\xef\xbf\xbd\n", 1546341072_000000000),
    ]


def test_escapes_near_the_fixed_offsets_take_the_careful_path(tmp_path: Path) -> None:
    """Lines one escape away from the writer's exact shape: a tab where the final newline's
    escape sits (dockerd escapes a tab as \\t), a quote in the text, a stream other than
    stdout/stderr. Each is read for what it is, amid exact lines, by both readers."""
    path = tmp_path / "c-json.log"
    stamp = b'","stream":"stdout","time":"2019-01-01T11:11:11.000000000Z"}\n'
    exact = encode_record("stdout", b"plain\n", T0)
    path.write_bytes(exact + b'{"log":"tab\\t' + stamp + exact
                     + b'{"log":"a \\"quote\\"\\n' + stamp
                     + b'{"log":"odd\\n","stream":"stdodd"' + stamp[19:])
    want = [b"plain\n", b"tab\t", b"plain\n", b'a "quote"\n']
    assert [r.data for r in records(path)] == want
    assert [d for _, d in unframe(list(read_framed(path, stdout=True, stderr=True)))] == want


def test_one_stream_blocks_cut_by_one_split_match_the_careful_path() -> None:
    """The one-split path (exact records of one stream) frames every block as the line-by-line
    path does, and blocks it must not take (another stream, an escape, a partial line, a time
    of another length, a torn line) go the careful way with the same result."""
    from svc.wire import jsonlog_parse as logparse

    rng = random.Random(7)
    odd = [
        encode_record("stderr", b"err\n", T0),
        encode_record("stdout", b'quote " and \\ backslash\n', T0),
        encode_record("stdout", b"partial", T0),
        b'{"log":"short time\\n","stream":"stdout","time":"2019-01-01T11:11:11.1Z"}\n',
        b'{"log":"torn',
    ]
    for _ in range(300):
        stream = rng.choice(["stdout", "stderr"])
        block = [encode_record(stream, b"%d" % rng.randrange(10**rng.randrange(1, 30)) + b"\n",
                               T0 + i) for i in range(rng.randrange(1, 40))]
        plain = rng.random() < 0.5
        if not plain:
            block.insert(rng.randrange(len(block) + 1), rng.choice(odd))
        data = b"".join(block)
        data = data[: data.rfind(b"\n") + 1]
        if not data:
            continue
        if plain:
            assert logparse._plain(data) is not None, data
        for want in (1, 2, 3):
            fast = logparse.to_frames(want, 0, False, data)
            careful = logparse._frames(logparse._select(
                logparse._parse_slow(data, False), want, 0))
            assert fast == careful, data
    line = encode_record("stdout", b"plain\n", T0)
    for record in odd[:4]:
        assert logparse._plain(line + record + line) is None, record


# -- framing -----------------------------------------------------------------------------------


def unframe(chunks: list[bytes]) -> list[tuple[int, bytes]]:
    dec = FrameDecoder()
    frames = [f for c in chunks for f in dec.feed(c)]
    assert dec.pending == 0
    return [(f.stream, f.data) for f in frames]


def test_framed_output_is_one_frame_per_record(rotated_log: Path) -> None:
    path = rotated_log
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"tab\there\n", T0 + 100)  # an escape: the slow path
        w.write("stderr", b"partial", T0 + 101)
    recs = records(path)
    expect = [(1 if r.stream == "stdout" else 2, r.data) for r in recs]
    assert unframe(list(read_framed(path, stdout=True, stderr=True))) == expect
    stamped = unframe(list(read_framed(path, stdout=True, stderr=True, timestamps=True)))
    assert stamped == [(s, format_time(r.time_ns).encode() + b" " + d)
                       for (s, d), r in zip(expect, recs, strict=True)]
    assert stamped[0][1].startswith(b"2019-01-01T11:11:11.111111111Z line 00000\n")
    only_err = unframe(list(read_framed(path, stdout=False, stderr=True, tail=4, since_ns=1)))
    assert only_err == [e for e in expect[-4:] if e[0] == 2]


def test_framed_chunks_are_large(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    with JsonLogWriter(path, max_size=None) as w:
        w.write("stdout", b"x" * 99 + b"\n" * 1 + (b"y" * 99 + b"\n") * 20000, T0)
    chunks = list(read_framed(path, stdout=True, stderr=True))
    assert sum(map(len, chunks)) == 20001 * 108
    assert len(chunks) > 1 and all(len(c) > 100_000 for c in chunks[:-1])


# -- follow ------------------------------------------------------------------------------------


async def test_follow_across_rotations_until_stop(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    stop = trio.Event()
    got: list[LogRecord] = []
    w = JsonLogWriter(path, max_size=600, max_file=100)
    write_numbered(w, 10)  # existing records

    async def writer() -> None:
        for i in range(10, 200, 10):
            write_numbered(w, 10, i)
            await trio.sleep(0.005 if i % 50 else 0.08)  # bursts rotate several times per poll
        w.close()
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        async for rec in follow(path, stdout=True, stderr=True, stop=stop, poll_interval=0.02):
            got.append(rec)
    assert [int(r.data[5:10]) for r in got] == list(range(200))
    assert len(log_files(path)) > 10


async def test_follow_compressed_rotation_tail_and_framed(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    stop = trio.Event()
    w = JsonLogWriter(path, max_size=1000, max_file=3, compress=True)
    write_numbered(w, 30)
    chunks: list[bytes] = []

    async def writer() -> None:
        # A gzipped file cannot be chained by inode: at most one rotation between two polls.
        for i in range(30, 90, 10):
            await trio.sleep(0.15)
            write_numbered(w, 10, i)
        w.close()
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        async for chunk in follow_framed(path, stdout=True, stderr=True, tail=3, stop=stop,
                                         poll_interval=0.02):
            chunks.append(chunk)
    assert [int(d[5:10]) for _, d in unframe(chunks)] == list(range(27, 90))


async def test_follow_a_log_truncated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    stop = trio.Event()
    got: list[int] = []
    w = JsonLogWriter(path, max_size=4 * 5 * 81, max_file=1)

    async def writer() -> None:
        # Records are 81 bytes, so the file is truncated as every 5th burst begins: whatever
        # is written before a truncation has been read, as it would be lost otherwise.
        for i in range(0, 60, 5):
            write_numbered(w, 5, i)
            await trio.sleep(0.1)
        w.close()
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        async for rec in follow(path, stdout=True, stderr=True, stop=stop, poll_interval=0.02):
            got.append(int(rec.data[5:10]))
    assert got == list(range(60))


async def test_follow_waits_for_the_file_and_ends_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    stop = trio.Event()
    got: list[bytes] = []

    async def late_start() -> None:
        await trio.sleep(0.05)
        with JsonLogWriter(path, max_size=None) as w:
            w.write("stdout", b"hi\n")
            w.write("stderr", b"err\n")
        stop.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(late_start)
        async for rec in follow(path, stdout=True, stderr=False, tail=0, stop=stop):
            got.append(rec.data)
    assert got == [b"hi\n"]
    stop2 = trio.Event()
    stop2.set()
    assert [r async for r in follow(tmp_path / "never.log", stdout=True, stderr=True,
                                    stop=stop2)] == []
    with trio.move_on_after(0.2):  # without stop, only cancellation ends it
        async for rec in follow(path, stdout=True, stderr=True, tail=0):
            raise AssertionError(rec)


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [("100", 100), ("10k", 10_000), ("10m", 10_000_000), ("1g", 10**9), ("1.5k", 1500),
     ("2MB", 2_000_000), ("3 kib", 3000), ("7b", 7)],
)
def test_parse_size(value: str, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["", "m", "10x", "-1m", "10mbb", "1..5k"])
def test_parse_size_names_the_bad_value(value: str) -> None:
    with pytest.raises(ValueError, match=f"invalid size: '{value}'"):
        parse_size(value)


def test_parse_log_opts() -> None:
    assert parse_log_opts({}) == (None, 1, False)
    opts = {"max-size": "10m", "max-file": "3", "compress": "true", "labels": "a"}
    assert parse_log_opts(opts) == (10_000_000, 3, True)
    bad = [
        ({"x": "1"}, "unknown log opt 'x' for json-file log driver"),
        ({"max-size": "0"}, "max-size must be a positive number"),
        ({"max-file": "0"}, "max-file cannot be less than 1"),
        ({"max-file": "two"}, 'parsing "two": invalid syntax'),
        ({"compress": "yes"}, 'parsing "yes": invalid syntax'),
        ({"compress": "1", "max-file": "2"}, "compress cannot be true"),
        ({"compress": "1", "max-size": "1k"}, "compress cannot be true"),
    ]
    for opts, message in bad:
        with pytest.raises(ValueError, match=message):
            parse_log_opts(opts)


# -- throughput (printed, not asserted) ----------------------------------------------------------


def test_throughput_50mb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c-json.log"
    chunk = (b"0123456789" * 9 + b"abcdefghi\n") * 640  # 100-byte lines, 64 KB reads
    n = 50_000_000 // len(chunk)
    t = time.perf_counter()
    with JsonLogWriter(path, max_size=None) as w:
        for _ in range(n):
            w.write("stdout", chunk)
    write_s = time.perf_counter() - t
    size = path.stat().st_size
    t = time.perf_counter()
    count = sum(1 for _ in read_logs(path, stdout=True, stderr=True))
    records_s = time.perf_counter() - t
    t = time.perf_counter()
    framed = sum(map(len, read_framed(path, stdout=True, stderr=True)))
    framed_s = time.perf_counter() - t
    assert count == n * 640 and framed == n * 640 * 108
    mb = n * len(chunk) / 1e6
    with capsys.disabled():
        print(
            f"\njson-file, {mb:.0f} MB of 100-byte lines ({size / 1e6:.0f} MB on disk):"
            f" write {mb / write_s:.0f} MB/s of text; read_logs {size / records_s / 1e6:.0f} MB/s"
            f" of file ({count / records_s / 1e6:.2f} M records/s);"
            f" read_framed {size / framed_s / 1e6:.0f} MB/s of file"
            f" ({mb / framed_s:.0f} MB/s of text)"
        )


def test_a_busy_logs_pages_are_handed_to_the_disk_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 8 MiB written is queued for write-out (and the tail at close), so that the
    teardown's overlay unmount does not have a whole log to sync; a quiet log never is."""
    from svc.storage.jsonlog import writer as writer_mod

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(writer_mod, "start_writeback", lambda fd, off, n: calls.append((off, n)))
    with JsonLogWriter(tmp_path / "quiet.log", max_size=None) as w:
        w.write("stdout", b"hello\n", T0)
    assert calls == []
    line = b"z" * 999 + b"\n"
    with JsonLogWriter(tmp_path / "busy.log", max_size=None) as w:
        for _ in range(20):
            w.write("stdout", line * 1024, T0)
        size = w.size
    steps, tail = calls[:-1], calls[-1]
    assert steps and all(n >= writer_mod.WRITEBACK_STEP for _, n in steps)
    assert [off for off, _ in steps] == [0, *(off + n for off, n in steps[:-1])]
    assert tail == (sum(n for _, n in steps), 0) and tail[0] < size
