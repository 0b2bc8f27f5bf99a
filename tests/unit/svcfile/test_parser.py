"""The parser against moby v1.11.2's parser test pairs (and v1.13.0's escape-directive
pairs), kept in tests/unit/svcfile/data (see its README), plus errors naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from svc.svcfile.parser import ParseError, parse
from svc.svcfile.words import split_words

DATA = Path(__file__).parent / "data"
CASES = sorted(p for d in ("testfiles", "testfiles-escape") for p in (DATA / d).iterdir())
NEGATIVE = sorted((DATA / "testfiles-negative").iterdir())


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_dump_matches_result(case: Path) -> None:
    parsed = parse((case / "Dockerfile").read_text())
    dump = "".join(f"({i.dump()})\n" for i in parsed.instructions)
    assert dump == (case / "result").read_text()


@pytest.mark.parametrize("case", NEGATIVE, ids=lambda p: p.name)
def test_negative_cases_fail(case: Path) -> None:
    with pytest.raises(ParseError):
        parse((case / "Dockerfile").read_text())


def test_line_information() -> None:
    parsed = parse((DATA / "testfile-line" / "Dockerfile").read_text())
    assert [(i.start_line, i.end_line) for i in parsed.instructions] == \
        [(4, 4), (10, 11), (16, 30)]


@pytest.mark.parametrize(("text", "words"), [
    ("foo", ["foo"]), ("foo bar", ["foo", "bar"]), ("foo=bar", ["foo=bar"]),
    ("foo bar 'abc xyz'", ["foo", "bar", "'abc xyz'"]),
    ('foo bar "abc xyz"', ["foo", "bar", '"abc xyz"']),
])
def test_split_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_error_names_file_line_and_instruction() -> None:
    with pytest.raises(ParseError) as err:
        parse("FROM busybox\n\n# c\nENV PATH\n", filename="Dockerfile")
    assert str(err.value) == "Dockerfile parse error line 4: ENV: ENV must have two arguments"
    assert err.value.line == 4


def test_unknown_instruction_is_an_error_with_its_line() -> None:
    with pytest.raises(ParseError, match=r"Svcfile parse error line 2: unknown instruction: "
                                         r"FORM"):
        parse("FROM busybox\nFORM x\n")


def test_json_with_non_strings_is_an_error() -> None:
    with pytest.raises(ParseError, match="line 1: CMD: When using JSON array syntax"):
        parse('CMD ["a", 1]')


def test_escape_directive_backtick_joins_lines_and_keeps_backslashes() -> None:
    parsed = parse("# escape=`\nFROM x\nRUN dir c:\\ `\n  && echo hi\n")
    assert parsed.escape == "`"
    assert parsed.instructions[1].args == ("dir c:\\   && echo hi",)


def test_invalid_escape_and_second_directive_fail() -> None:
    with pytest.raises(ParseError, match="invalid ESCAPE"):
        parse("# escape=x\nFROM y\n")
    with pytest.raises(ParseError, match="only one escape"):
        parse("# escape=`\n# escape=`\nFROM y\n")


def test_flags_exec_and_shell_forms() -> None:
    inst = parse('COPY --chown=1:1 --from="a b" src /dst\nCMD ["x", "y"]\nCMD x y\n'
                 ).instructions
    assert inst[0].flags == ("--chown=1:1", "--from=a b") and inst[0].args == ("src", "/dst")
    assert inst[1].json and inst[1].args == ("x", "y")
    assert not inst[2].json and inst[2].args == ("x y",)


def test_onbuild_carries_its_instruction() -> None:
    (inst,) = parse("ONBUILD RUN echo hi").instructions
    assert inst.sub is not None and inst.sub.cmd == "run" and inst.sub.args == ("echo hi",)


def test_crlf_and_bom() -> None:
    inst = parse("\ufeffFROM a\r\nRUN b \\\r\n c\r\n").instructions
    assert [i.args for i in inst] == [("a",), ("b  c",)]
