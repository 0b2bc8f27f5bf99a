"""Splitting instruction arguments into words, the way engines of API 1.22/1.23 did.

Two passes, as in the legacy builder: the parser splits a line into words but keeps their
quotes and escapes (``split_words``, ``split_flags``), and the evaluator later expands
environment references and removes the quotes (``svc.build.shellwords``).
"""

from __future__ import annotations


def _is_space(ch: str) -> bool:
    return ch.isspace()


def split_words(rest: str, escape: str = "\\") -> list[str]:
    """Words separated by blanks; quotes and escapes kept (``foo 'a b'`` -> two words, the
    second still quoted). A word that is only quotes (``""``) is kept."""
    words: list[str] = []
    word: list[str] = []
    started = blank_ok = False
    quote = ""
    i, n = 0, len(rest)
    while i < n:
        ch = rest[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == escape and quote != "'":
                if i + 1 == n:
                    break  # an escape at the very end is dropped
                word.append(ch)
                i += 1
                ch = rest[i]
            word.append(ch)
        elif _is_space(ch):
            if started and (blank_ok or word):
                words.append("".join(word))
            word, started, blank_ok = [], False, False
        else:
            started = True
            if ch in ("'", '"'):
                quote, blank_ok = ch, True
            elif ch == escape:
                if i + 1 == n:
                    break
                word.append(ch)  # outside quotes the escape stays with its character
                i += 1
                ch = rest[i]
            word.append(ch)
        i += 1
    if started and (blank_ok or word):
        words.append("".join(word))
    return words


def split_flags(line: str) -> tuple[str, list[str]]:
    """Leading ``--name[=value]`` words of an instruction's arguments, unquoted, and the
    rest of the line. A lone ``--`` ends the flags and is dropped."""
    flags: list[str] = []
    word: list[str] = []
    in_word = blank_ok = False
    quote = ""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if not in_word:
            if _is_space(ch):
                i += 1
                continue
            if not line.startswith("--", i):
                return line[i:], flags
            in_word = True
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\":
                if i + 1 == n:
                    quote = ""
                    i += 1
                    continue
                i += 1
                word.append(line[i])
            else:
                word.append(ch)
        elif _is_space(ch):
            text = "".join(word)
            if text == "--":
                return line[i:], flags
            if blank_ok or text:
                flags.append(text)
            word, in_word, blank_ok = [], False, False
        elif ch in ("'", '"'):
            quote, blank_ok = ch, True
        elif ch == "\\":
            if i + 1 < n:
                i += 1
                word.append(line[i])
        else:
            word.append(ch)
        i += 1
    text = "".join(word)
    if in_word and text != "--" and (blank_ok or text):
        flags.append(text)
    return "", flags
