"""Splitting instruction arguments into words, the way engines of API 1.22/1.23 did.

Two passes, as in the legacy builder: the parser splits a line into words but keeps their
quotes and escapes (``split_words``, ``split_flags``), and the evaluator later expands
environment references and removes the quotes (``svc.svcfile.shellwords``).
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
    i, n = 0, len(line)
    while i < n:
        if _is_space(line[i]):
            i += 1
            continue
        if not line.startswith("--", i):
            return line[i:], flags
        word, keep, i = _flag_word(line, i)
        if word == "--":
            return line[i:], flags
        if keep:
            flags.append(word)
    return "", flags


def _flag_word(line: str, i: int) -> tuple[str, bool, int]:
    """One flag word from ``i``: (its text unquoted, whether to keep it, where it ended).
    Quotes are removed; a backslash takes the next character as it is."""
    word: list[str] = []
    blank_ok = False
    quote = ""
    n = len(line)
    while i < n:
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\":
                i += 1
                if i == n:
                    break
                word.append(line[i])
            else:
                word.append(ch)
        elif _is_space(ch):
            break
        elif ch in ("'", '"'):
            quote, blank_ok = ch, True
        elif ch == "\\":
            i += 1
            if i < n:
                word.append(line[i])
        else:
            word.append(ch)
        i += 1
    text = "".join(word)
    return text, blank_ok or bool(text), i
