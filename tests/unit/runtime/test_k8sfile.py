"""conmon's k8s-file log lines parsed back into what the container wrote."""

import pytest

from svc.runtime.conmon.k8sfile import BadLine, Record, format_line, parse, parse_time


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
