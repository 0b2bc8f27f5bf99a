"""The instructions-file parser (``Svcfile``, or a ``Dockerfile``).

It reproduces the legacy builder's parse, checked against the test pairs moby v1.11.2
published (tests/unit/svcfile/data): lines are joined at a trailing escape character,
comments and blank lines inside a continuation are dropped, the ``# escape=`` directive
(``\\`` or backtick) may open the file, leading ``--flag`` words are split off, and each
instruction's arguments are shaped by its own rule (one string, a JSON array or a
string, name/value pairs, blank-separated words). Quotes stay in the arguments: the
builder expands variables and removes quotes later (``svc.svcfile.shellwords``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from svc.errors import InvalidParameter
from svc.svcfile.words import split_flags, split_words

_WHITESPACE = re.compile(r"[\t\v\f\r ]+")
_DIRECTIVE = re.compile(r"^#[ \t]*escape[ \t]*=[ \t]*(?P<char>.).*$")
_BOM = "\ufeff"


class ParseError(InvalidParameter):
    """The file cannot be parsed; the message names the file, the line and the instruction."""

    def __init__(self, message: str, *, line: int = 0, instruction: str = "",
                 filename: str = "Svcfile") -> None:
        where = f"{filename} parse error line {line}" if line else f"{filename} parse error"
        what = f"{instruction.upper()}: " if instruction else ""
        super().__init__(f"{where}: {what}{message}")
        self.detail = message
        self.line = line
        self.instruction = instruction


class _ArgError(ValueError):
    """An instruction's arguments are malformed (turned into ParseError with the line)."""


@dataclass(frozen=True)
class Instruction:
    """One instruction. ``args`` are the raw (still quoted) arguments; ``json`` says they
    came from a JSON array (exec form); ``sub`` is the instruction an ONBUILD carries."""

    cmd: str
    args: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    json: bool = False
    original: str = ""
    start_line: int = 0
    end_line: int = 0
    sub: Instruction | None = None

    def dump(self) -> str:
        """The s-expression moby's parser tests print, e.g. ``copy ["--from=a"] "x" "/y"``."""
        out = self.cmd
        if self.flags:
            out += " [" + " ".join(go_quote(f) for f in self.flags) + "]"
        if self.sub is not None:
            out += " (" + self.sub.dump() + ")"
        for a in self.args:
            out += " " + go_quote(a)
        return out.strip()


@dataclass
class Svcfile:
    instructions: list[Instruction] = field(default_factory=list)
    escape: str = "\\"


def go_quote(s: str) -> str:
    """A string quoted as Go's ``strconv.Quote`` does (for dumps)."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch in "\a\b\f\v":
            out.append("\\" + "abfv"["\a\b\f\v".index(ch)])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable() and code > 0x7F:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


# -- argument shapes ------------------------------------------------------------------------

def _one_string(rest: str, escape: str) -> tuple[tuple[str, ...], bool]:
    return ((rest,) if rest else ()), False


def _blank_separated(rest: str, escape: str = "\\") -> tuple[tuple[str, ...], bool]:
    if not rest:
        return (), False
    return tuple(_WHITESPACE.split(rest)), False


def _json_array(rest: str) -> tuple[str, ...] | None:
    """The strings of a JSON array at the start of ``rest``; None if it is no JSON array.
    As the engines did, only the first JSON value is read and what follows is ignored."""
    rest = rest.lstrip()
    if not rest.startswith("["):
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, list):
        return None
    if not all(isinstance(v, str) for v in value):
        raise _ArgError("When using JSON array syntax, arrays must be comprised of strings "
                        "only.")
    return tuple(value)


def _maybe_json(rest: str, escape: str) -> tuple[tuple[str, ...], bool]:
    if not rest:
        return (), False
    found = _json_array(rest)
    return (found, True) if found is not None else ((rest,), False)


def _maybe_json_list(rest: str, escape: str) -> tuple[tuple[str, ...], bool]:
    found = _json_array(rest)
    return (found, True) if found is not None else _blank_separated(rest)


def _name_values(rest: str, escape: str, command: str) -> tuple[tuple[str, ...], bool]:
    """``KEY value with blanks`` (old form) or ``K1=v1 K2="v 2"`` (new form), flattened
    into name, value, name, value..."""
    words = split_words(rest, escape)
    if not words:
        return (), False
    if "=" not in words[0]:
        parts = _WHITESPACE.split(rest, maxsplit=1)
        if len(parts) < 2:
            raise _ArgError(f"{command} must have two arguments")
        return (parts[0], parts[1]), False
    out: list[str] = []
    for word in words:
        if "=" not in word:
            raise _ArgError(f"Syntax error - can't find = in {word!r}. Must be of the form: "
                            "name=value")
        name, _, value = word.partition("=")
        out += [name, value]
    return tuple(out), False


def _words(rest: str, escape: str) -> tuple[tuple[str, ...], bool]:
    return tuple(split_words(rest, escape)), False


_Shape = Callable[[str, str], tuple[tuple[str, ...], bool]]

SHAPES: dict[str, _Shape] = {
    "from": _one_string, "maintainer": _one_string, "user": _one_string,
    "workdir": _one_string, "stopsignal": _one_string,
    "env": lambda rest, esc: _name_values(rest, esc, "ENV"),
    "label": lambda rest, esc: _name_values(rest, esc, "LABEL"),
    "add": _maybe_json_list, "copy": _maybe_json_list, "volume": _maybe_json_list,
    "run": _maybe_json, "cmd": _maybe_json, "entrypoint": _maybe_json,
    "expose": _blank_separated, "arg": _words,
}
INSTRUCTIONS = frozenset(SHAPES) | {"onbuild"}


# -- lines ----------------------------------------------------------------------------------

def _instruction(line: str, escape: str, start: int, end: int) -> Instruction:
    parts = _WHITESPACE.split(line.strip(), maxsplit=1)
    cmd = parts[0].lower()
    rest, flags = split_flags(parts[1]) if len(parts) == 2 else ("", [])
    rest = rest.strip()
    if cmd == "onbuild":
        sub = _instruction(rest, escape, start, end) if rest else None
        return Instruction(cmd, (), tuple(flags), False, line, start, end, sub)
    shape = SHAPES.get(cmd)
    if shape is None:
        raise ParseError(f"unknown instruction: {parts[0].upper()}", line=start)
    try:
        args, is_json = shape(rest, escape)
    except _ArgError as exc:
        raise ParseError(str(exc), line=start, instruction=cmd) from None
    return Instruction(cmd, args, tuple(flags), is_json, line, start, end)


def parse(text: str, filename: str = "Svcfile") -> Svcfile:
    """Parse an instructions file.

    Raises:
        ParseError: naming ``filename``, the line and the instruction.
    """
    try:
        return _parse(text)
    except ParseError as exc:
        raise ParseError(exc.detail, line=exc.line, instruction=exc.instruction,
                         filename=filename) from None


def _directives(lines: list[str]) -> tuple[str, int]:
    """The escape character the leading ``# escape=`` directive sets (``\\`` without one)
    and the number of directive lines."""
    escape, count = "\\", 0
    for line in lines:
        found = _DIRECTIVE.match(line.lstrip().lower())
        if not found:
            break
        count += 1
        if count > 1:
            raise ParseError("only one escape parser directive can be used", line=count)
        escape = found.group("char")
        if escape not in ("\\", "`"):
            raise ParseError(f"invalid ESCAPE '{escape}'. Must be ` or \\", line=count)
    return escape, count


def _parse(text: str) -> Svcfile:
    lines = text.removeprefix(_BOM).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln.removesuffix("\r") for ln in lines]
    escape, i = _directives(lines)
    result = Svcfile(escape=escape)
    continuation = re.compile(re.escape(escape) + r"[ \t]*$")
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        start = i
        if not line or line.startswith("#"):
            continue
        joined = ""
        while continuation.search(line):
            joined += continuation.sub("", line)
            line = ""
            while i < len(lines):  # the next line that is neither blank nor a comment
                candidate = lines[i]
                i += 1
                if candidate.strip() and not candidate.strip().startswith("#"):
                    line = candidate
                    break
            if not line:
                break
        joined += line
        if joined.strip():
            result.instructions.append(_instruction(joined, escape, start, i))
    return result
