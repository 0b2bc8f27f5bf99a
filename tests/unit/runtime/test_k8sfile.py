"""conmon's k8s-file log lines parsed back into what the container wrote."""

import pytest

from svc.runtime.conmon.k8sfile import BadLine, Record, format_line, parse, parse_runs, parse_time


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
])
def test_times(text: bytes, ns: int) -> None:
    assert parse_time(text) == ns


@pytest.mark.parametrize("line", [
    b"", b"hello", b"2026-11-28T09:37:30Z stdin F x", b"2026-11-28T09:37:30Z stdout X x",
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
