"""Output cut into log messages as dockerd's copier cuts it (svc.logdrivers.lines)."""

from __future__ import annotations

from svc.logdrivers.lines import LineCutter


def test_lines_across_chunks() -> None:
    cut = LineCutter()
    assert cut.feed(b"one\ntw") == [(b"one", False)]
    assert cut.feed(b"o\n\nthree") == [(b"two", False), (b"", False)]
    assert cut.flush() == (b"three", True)
    assert cut.flush() is None


def test_long_lines_become_partial_pieces() -> None:
    cut = LineCutter(max_line=4)
    assert cut.feed(b"abcdefghij\nxy") == [(b"abcd", True), (b"efgh", True), (b"ij", False)]
    assert cut.feed(b"zzzzz") == [(b"xyzz", True)]
    assert cut.feed(b"\n") == [(b"zzz", False)]
    # a line of exactly the limit: a full piece, then its (empty) end, as json-file has it
    assert cut.feed(b"abcd\n") == [(b"abcd", True), (b"", False)]


def test_count_gives_what_feed_would_and_keeps_the_unfinished_line() -> None:
    chunks = [b"a\nbb\nccc", b"c\n" + b"x" * 40000 + b"\ny", b"", b"\n\nzz"]
    fed, counted = LineCutter(), LineCutter()
    for chunk in chunks:
        assert counted.count(chunk) == len(fed.feed(chunk))
    assert counted.flush() == fed.flush() == (b"zz", True)
