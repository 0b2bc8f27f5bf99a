"""Environment substitution and quote removal in instruction arguments.

The rules of the legacy builder (a small subset of the POSIX shell): ``'...'`` is literal,
``"..."`` expands ``$`` and lets the escape character escape ``"`` and ``$`` only, an
unquoted escape takes the next character literally; ``$NAME``, ``${NAME}``,
``${NAME:-word}`` (word when NAME is unset or empty) and ``${NAME:+word}`` (word when NAME
is set and not empty), nested; a digit after ``$`` is a one-character name; anything else
after ``$`` leaves the ``$`` as it is. ``expand_words`` also splits the result into words,
where only unquoted blanks (including those that came out of an unquoted variable) split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


class SubstitutionError(ValueError):
    """A ``${...}`` form that cannot be expanded; the message names the word."""


def lookup(env: Sequence[str], name: str) -> str:
    """The value of ``name`` in ``KEY=VALUE`` entries; the first entry wins; unset is ''."""
    for entry in env:
        key, sep, value = entry.partition("=")
        if key == name:
            return value if sep else ""
    return ""


def expand_word(word: str, env: Sequence[str], escape: str = "\\") -> str:
    """``word`` with its variables expanded and quotes removed (one word, blanks kept)."""
    return _Expander(word, env, escape).run(None)[0]


def expand_words(word: str, env: Sequence[str], escape: str = "\\") -> list[str]:
    """``word`` expanded as ``expand_word`` does, then split at unquoted blanks."""
    return _Expander(word, env, escape).run(None)[1]


@dataclass
class _Words:
    words: list[str] = field(default_factory=list)
    word: str = ""
    in_word: bool = False

    def add_char(self, ch: str) -> None:
        if ch.isspace():
            if self.in_word and self.word:
                self.words.append(self.word)
                self.word, self.in_word = "", False
        else:
            self.add_raw(ch)

    def add_raw(self, text: str) -> None:
        self.word += text
        self.in_word = True

    def add_text(self, text: str) -> None:
        for ch in text:
            self.add_char(ch)

    def done(self) -> list[str]:
        if self.word:
            self.words.append(self.word)
            self.word, self.in_word = "", False
        return self.words


class _Expander:
    def __init__(self, word: str, env: Sequence[str], escape: str) -> None:
        self.text = word
        self.env = env
        self.escape = escape
        self.pos = 0

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _next(self) -> str:
        ch = self._peek()
        self.pos += 1 if ch else 0
        return ch

    def run(self, stop: str | None) -> tuple[str, list[str]]:
        result: list[str] = []
        words = _Words()
        while (ch := self._peek()) != "":
            if stop is not None and ch == stop:
                self._next()
                break
            if ch in ("'", '"', "$"):
                piece = (self._single() if ch == "'" else self._double() if ch == '"'
                         else self._dollar())
                result.append(piece)
                if ch == "$":
                    words.add_text(piece)
                else:
                    words.add_raw(piece)
                continue
            ch = self._next()
            if ch == self.escape:
                ch = self._next()
                if ch == "":
                    break
                words.add_raw(ch)
            else:
                words.add_char(ch)
            result.append(ch)
        return "".join(result), words.done()

    def _single(self) -> str:
        self._next()
        out: list[str] = []
        while (ch := self._next()) not in ("'", ""):
            out.append(ch)
        return "".join(out)

    def _double(self) -> str:
        self._next()
        out: list[str] = []
        while (ch := self._peek()) != "":
            if ch == '"':
                self._next()
                break
            if ch == "$":
                out.append(self._dollar())
                continue
            ch = self._next()
            if ch == self.escape:
                following = self._peek()
                if following == "":
                    continue
                if following in ('"', "$"):
                    ch = self._next()
            out.append(ch)
        return "".join(out)

    def _dollar(self) -> str:
        self._next()
        if self._peek() != "{":
            name = self._name()
            return lookup(self.env, name) if name else "$"
        self._next()
        name = self._name()
        ch = self._peek()
        if ch == "}":
            self._next()
            return lookup(self.env, name)
        if ch != ":":
            raise SubstitutionError(f"Missing ':' in substitution: {self.text}")
        self._next()
        modifier = self._next()
        word, _ = self.run("}")
        value = lookup(self.env, name)
        if modifier == "+":
            return word if value else value
        if modifier == "-":
            return value if value else word
        raise SubstitutionError(f"Unsupported modifier ({modifier}) in substitution: "
                                f"{self.text}")

    def _name(self) -> str:
        out: list[str] = []
        while (ch := self._peek()) != "":
            if not out and ch.isdigit():
                return self._next()
            if not (ch.isalnum() or ch == "_"):
                break
            out.append(self._next())
        return "".join(out)
