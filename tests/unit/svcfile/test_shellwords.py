"""Variable expansion and word splitting against moby v1.11.2's envVarTest and wordsTest
(tests/unit/svcfile/data, see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from svc.svcfile.shellwords import SubstitutionError, expand_word, expand_words, lookup

DATA = Path(__file__).parent / "data"


def _env_cases() -> list[tuple[str, str]]:
    cases = []
    for line in (DATA / "envVarTest").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            src, expected = (w.strip() for w in line.split("|"))
            cases.append((src, expected))
    return cases


def _word_cases() -> list[tuple[str, list[str], list[str]]]:
    cases, env = [], []
    for line in (DATA / "wordsTest").read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("ENV "):
            env.append(line[3:].lstrip(" "))
            continue
        src, expected = line.split("|")
        cases.append((src.strip(), expected.lstrip(" ").split(","), list(env)))
    return cases


@pytest.mark.parametrize(("src", "expected"), _env_cases())
def test_env_var_cases(src: str, expected: str) -> None:
    env = ["PWD=/home", "SHELL=bash", "KOREAN=한국어"]
    try:
        got = expand_word(src, env)
    except SubstitutionError:
        got = "error"
    assert got == expected


@pytest.mark.parametrize(("src", "expected", "env"), _word_cases())
def test_words_cases(src: str, expected: list[str], env: list[str]) -> None:
    assert expand_words(src, env) == expected


def test_lookup_first_entry_wins_and_bare_names_are_empty() -> None:
    assert lookup([], "foo") == ""
    assert lookup(["foo"], "foo") == ""
    assert lookup(["foo="], "foo") == ""
    assert lookup(["foo=bar", "car=hat", "car=bike"], "car") == "hat"


def test_backtick_escape() -> None:
    assert expand_word("a`$b`\\c", ["b=x"], escape="`") == "a$b\\c"
