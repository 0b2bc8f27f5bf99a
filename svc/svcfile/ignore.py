"""The context ignore file (``.svcignore``, or ``.dockerignore``).

Semantics of the engines and of docker SDK 7's ``PatternMatcher`` (not gitignore's): one
pattern a line, ``#`` lines are comments, each pattern is cleaned like a path (``./a/../b``
is ``b``; leading and trailing slashes do not count) and matched against the whole path
relative to the context root with Go ``filepath.Match`` rules (``*`` and ``?`` never cross
``/``, ``[a-z]``/``[^a]``/``[!a]`` classes, ``\\`` escapes the next character), plus
``**`` for any number of directories. A pattern that matches a directory matches all that
is below it. A leading ``!`` makes an exception; the last pattern that matches decides.
``*.txt`` therefore matches ``a.txt`` but not ``d/a.txt`` (unlike gitignore).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IGNORE_FILES = (".svcignore", ".dockerignore")


def read_patterns(text: str) -> list[str]:
    """The patterns of an ignore file: blank lines and comments dropped, blanks trimmed."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def clean_parts(path: str) -> list[str]:
    """A path's components after removing ``.``, empty parts and ``..`` with its parent."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return parts


def translate(pattern: str) -> str:
    """A regular expression for a cleaned pattern (Go filepath.Match plus ``**``)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "*":
            if i < n and pattern[i] == "*":
                i += 1
                if i < n and pattern[i] == "/":
                    i += 1
                    out.append("(?:.*/)?")
                else:
                    out.append(".*")
            else:
                out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\" and i < n:
            out.append(re.escape(pattern[i]))
            i += 1
        elif ch == "[":
            end = _class_end(pattern, i)
            if end < 0:
                raise ValueError(f"syntax error in pattern {pattern!r}: unclosed [")
            body = pattern[i:end]
            negate = body[:1] in ("^", "!")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("[", "\\[") + "]")
            i = end + 1
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _class_end(pattern: str, i: int) -> int:
    j = i
    if j < len(pattern) and pattern[j] in ("^", "!"):
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j if j < len(pattern) else -1


@dataclass(frozen=True)
class _Pattern:
    exception: bool
    parts: tuple[str, ...]
    regex: re.Pattern[str]


class PatternMatcher:
    """Decides which context paths an ignore file excludes."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns: list[_Pattern] = []
        for raw in patterns:
            exception = raw.startswith("!")
            parts = clean_parts(raw[1:].strip() if exception else raw.strip())
            if not parts:
                continue  # "." and "/" are ignored, as engines do
            cleaned = "/".join(parts)
            try:
                regex = re.compile(translate(cleaned) + r"\Z", re.DOTALL)
            except (ValueError, re.error) as exc:
                raise ValueError(f"invalid ignore pattern {raw!r}: {exc}") from None
            self.patterns.append(_Pattern(exception, tuple(parts), regex))

    @property
    def has_exceptions(self) -> bool:
        return any(p.exception for p in self.patterns)

    def matches(self, path: str) -> bool:
        """Whether ``path`` (relative to the context root) is excluded."""
        parts = clean_parts(path)
        whole = "/".join(parts)
        excluded = False
        for p in self.patterns:
            # a pattern matching a directory matches what is below it (``**`` patterns can
            # match a directory at any depth, so every ancestor is tried)
            if p.regex.match(whole) or any(p.regex.match("/".join(parts[:k]))
                                           for k in range(1, len(parts))):
                excluded = not p.exception
        return excluded
