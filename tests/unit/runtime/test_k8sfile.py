"""conmon's k8s-file log lines parsed back into what the container wrote."""

from random import Random

import pytest

from svc.runtime.conmon.k8sfile import (
    BadLine,
    Record,
    _by_heads,
    format_line,
    parse,
    parse_runs,
    parse_time,
)


def test_full_and_partial_lines() -> None:
    assert parse(b"2026-11-28T09:37:30.428929233+00:00 stdout F hello\n") == \
        Record(1795858650428929233, "stdout", b"hello\n")
    assert parse(b"2026-11-28T09:37:30.428929233+00:00 stderr P part") == \
        Record(1795858650428929233, "stderr", b"part")


def test_spaces_and_empty_lines_are_kept() -> None:
    assert parse(b"2026-11-28T09:37:30.1Z stdout F  two  spaces \n").data == b" two  spaces \n"
    assert parse(b"2026-11-28T09:37:30.1Z stdout F \n").data == b"\n"
    assert parse(b"2026-11-28T09:37:30.1Z stdout F\n").data == b"\n"


@pytest.mark.parametrize(("text", "ns"), [
    (b"1970-01-01T00:00:01Z", 1_000_000_000),
    (b"1970-01-01T00:00:01.5Z", 1_500_000_000),
    (b"1970-01-01T01:00:01.000000001+01:00", 1_000_000_001),
    (b"1970-01-01T00:00:01-00:30", 1_000_000_000 + 1800 * 1_000_000_000),
    (b"2026-11-28T15:07:30.428929233+05:30", 1795858650428929233),
    (b"2026-11-28T01:37:30.428929233-08:00", 1795858650428929233),
    (b"2026-11-28T09:37:30.428929233+00:00", 1795858650428929233),
])
def test_times(text: bytes, ns: int) -> None:
    assert parse_time(text) == ns


@pytest.mark.parametrize("line", [
    b"", b"hello", b"2026-11-28T09:37:30.42892923x+00:00 stdout F x",
    b"2026-13-28T09:37:30.428929233+00:00 stdout F x", b"2026-11-28T09:37:30Z stdin F x",
    b"2026-11-28T09:37:30Z stdout X x",
    b"yesterday stdout F x", b"2026-11-28T09:37:30+0000 stdout F x",
])
def test_what_is_not_conmons_is_refused(line: bytes) -> None:
    with pytest.raises(BadLine):
        parse(line)


def test_format_is_the_inverse() -> None:
    for rec in (Record(1795858650428929233, "stdout", b"a b\n"), Record(5, "stderr", b"p")):
        assert parse(format_line(rec)) == rec


def test_runs_join_what_one_read_stamped_alike() -> None:
    t1, t2 = b"2026-11-28T09:37:30.1+00:00", b"2026-11-28T09:37:30.2+00:00"
    lines = [t1 + b" stdout F a", t1 + b" stdout F ", t1 + b" stdout P b",
             t1 + b" stderr F e", t2 + b" stderr F f", b"not conmon's", t2 + b" stdout F c"]
    buf = b"\n".join(lines) + b"\n"
    records, ends, bad = parse_runs(buf)
    assert [(r.stream, r.data) for r in records] == [
        ("stdout", b"a\n\nb"), ("stderr", b"e\n"), ("stderr", b"f\n"), ("stdout", b"c\n")]
    assert [r.ts_ns for r in records] == [parse_time(t1)] * 2 + [parse_time(t2)] * 2
    assert bad == 1
    assert ends[-1] == len(buf)
    assert ends[0] == len(b"\n".join(lines[:3])) + 1


def test_runs_say_what_the_lines_say_whatever_the_mix() -> None:
    """Against the line-by-line reading, on random logs as conmon writes them (each read
    stamped with its own time, its lines together): streams, partial and empty lines,
    contents that look like tags, a tag without its space, lines that are not conmon's."""
    import random

    rng = random.Random(7)
    contents = [b"", b"x", b"F y", b"P z", b" lead", b"long" * 50]
    stamp = 0
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.05:
                lines.append(b"garbage line")
                continue
            stamp += 1
            head = b"2026-11-28T09:37:30.%09d+00:00 %s " % (
                stamp, rng.choice([b"stdout", b"stderr"]))
            count = rng.randint(1, 6)
            for i in range(count):
                tag = b"P" if i == count - 1 and rng.random() < 0.3 else b"F"
                content = rng.choice(contents)
                sep = b"" if not content and rng.random() < 0.3 else b" "
                lines.append(head + tag + sep + content)
        buf = b"\n".join(lines) + b"\n"
        records, ends, bad = parse_runs(buf)
        want: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        skipped = 0
        for line in lines:
            try:
                rec = parse(line)
            except BadLine:
                skipped += 1
                continue
            want[rec.stream] += rec.data
        got: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        for rec in records:
            got[rec.stream] += rec.data
        assert (got, bad) == (want, skipped), buf
        assert ends == sorted(ends) and (not ends or ends[-1] <= len(buf))


def _conmon_log(rng: Random, reads: int, contents: list[bytes]) -> tuple[bytes, list[bytes]]:
    """A log as conmon writes it: each read stamped with its own time (nine digits), its lines
    together, a partial line only last; and its lines."""
    lines = []
    for stamp in range(1, reads + 1):
        head = b"2026-11-28T09:37:30.%09d+00:00 %s " % (
            stamp, rng.choice([b"stdout", b"stderr"]))
        count = rng.randint(1, 6)
        for i in range(count):
            tag = b"P" if i == count - 1 and rng.random() < 0.3 else b"F"
            lines.append(head + tag + b" " + rng.choice(contents))
    return b"\n".join(lines) + b"\n", lines


def test_lines_grouped_by_head_say_what_the_lines_say() -> None:
    """conmon's own logs take the C-speed grouping (no line is looked at in Python), with the
    same records as line by line: contents with the digits and colons of a head (a search for
    the head slows on those), empty ones, ones that look like tags."""
    import random

    rng = random.Random(11)
    contents = [b"", b"z" * 999, b"F y", b"P z", b"12:00:00 +00:00", b"2026-11-28T09:37:30"]
    for _ in range(100):
        buf, lines = _conmon_log(rng, rng.randint(1, 12), contents)
        assert _by_heads(buf) is not None
        records, ends, bad = parse_runs(buf)
        want = [parse(line) for line in lines]
        assert bad == 0 and ends[-1] == len(buf)
        for stream in ("stdout", "stderr"):
            assert b"".join(r.data for r in records if r.stream == stream) == \
                b"".join(r.data for r in want if r.stream == stream)
        assert [r.ts_ns for r in records] == sorted(r.ts_ns for r in records)


@pytest.mark.parametrize("odd", [
    b"garbage", b"2026-11-28T09:37:30.1+00:00 stdout F short time",
    b"2026-11-28T09:37:30.000000001+00:00 stdout F",  # a tag without its space
    b"2026-11-28T09:37:30.000000001+00:00 stdin  F x",
    b"2026-11-28T09:37:30.000000001+00:00xstdout F x",
])
def test_a_line_not_of_conmons_width_falls_back_to_runs(odd: bytes) -> None:
    head = b"2026-11-28T09:37:30.000000001+00:00 stdout "
    buf = head + b"F a\n" + odd + b"\n" + head + b"F b\n"
    assert _by_heads(buf) is None
    assert parse_runs(buf)[0]  # still read, run by run
