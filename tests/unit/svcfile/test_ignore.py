"""The ignore matcher: Go filepath.Match semantics plus ``**`` and ``!`` exceptions, as
docker SDK 7's PatternMatcher decides (cases checked against it). Three cases differ from
the SDK on purpose, following Go's filepath.Match as the engines do: matching is
case-sensitive, ``[^...]`` negates a class, and ``\\`` escapes the next character."""

from __future__ import annotations

import pytest

from svc.svcfile.ignore import PatternMatcher, read_patterns

CASES = [
    (["*.txt"], "a.txt", True),
    (["*.txt"], "d/a.txt", False),
    (["*/*.txt"], "d/a.txt", True),
    (["**/*.txt"], "d/e/a.txt", True),
    (["**/*.txt"], "a.txt", True),
    (["d"], "d/e/f", True),
    (["d/"], "d/e", True),
    (["./d/../e"], "e/x", True),
    (["d", "!d/keep"], "d/keep", False),
    (["d", "!d/keep"], "d/other", True),
    (["*", "!Svcfile"], "Svcfile", False),
    (["*", "!Svcfile"], "src", True),
    (["a?c"], "abc", True),
    (["a?c"], "a/c", False),
    (["[a-c]x"], "bx", True),
    (["[^a-c]x"], "bx", False),
    (["[!a-c]x"], "dx", True),
    (["\\*"], "*", True),
    (["\\*"], "a", False),
    (["**"], "any/thing", True),
    (["d/**/x"], "d/x", True),
    (["d/**/x"], "d/a/b/x", True),
    (["d/**"], "d/a/b", True),
    (["."], "a", False),
    (["!a"], "a", False),
    (["A"], "a", False),
]


@pytest.mark.parametrize(("patterns", "path", "excluded"), CASES)
def test_matches(patterns: list[str], path: str, excluded: bool) -> None:
    assert PatternMatcher(patterns).matches(path) is excluded


def test_read_patterns_drops_comments_and_blanks() -> None:
    assert read_patterns("# c\n\n  *.o  \n!keep.o\n") == ["*.o", "!keep.o"]


def test_bad_pattern_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid ignore pattern"):
        PatternMatcher(["[ab"])
