"""The process environment as moby's ReplaceOrAppendEnvValues makes it: compose's bare
``KEY`` entries unset a default and are never passed on; ``KEY=value`` replaces a default."""

from __future__ import annotations

from svc.engine.containers.spec import replace_or_append


def test_bare_keys_are_left_out_and_unset_defaults() -> None:
    defaults = ["PATH=/usr/bin", "HOSTNAME=abc", "TERM=xterm"]
    assert replace_or_append(defaults, ["EMPTY", "TERM", "A=1"]) == [
        "PATH=/usr/bin", "HOSTNAME=abc", "A=1"]


def test_values_replace_defaults_in_place_and_the_last_wins() -> None:
    defaults = ["PATH=/usr/bin", "HOSTNAME=abc"]
    assert replace_or_append(defaults, ["HOSTNAME=web", "X=1", "X=2", "Y="]) == [
        "PATH=/usr/bin", "HOSTNAME=web", "X=2", "Y="]


def test_a_key_unset_then_set_again_is_set() -> None:
    assert replace_or_append(["TERM=xterm"], ["TERM", "TERM=vt100"]) == ["TERM=vt100"]
