"""Plugin discovery: a name no file can have is "not found", not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from svc.plugins.discovery import Discovery, PluginNotFound


def test_a_name_longer_than_a_file_name_is_not_found(tmp_path: Path) -> None:
    d = Discovery(socket_dirs=[tmp_path / "s"], spec_dirs=[tmp_path / "p"])
    for name in ("x" * 251, "x" * 3000):
        with pytest.raises(PluginNotFound):
            d.lookup(name)


def test_the_longest_name_is_looked_for(tmp_path: Path) -> None:
    specs = tmp_path / "p"
    specs.mkdir()
    name = "x" * 250
    (specs / f"{name}.spec").write_text("tcp://127.0.0.1:2\n")
    d = Discovery(socket_dirs=[tmp_path / "s"], spec_dirs=[specs])
    assert d.lookup(name).addr == "tcp://127.0.0.1:2"
    with pytest.raises(PluginNotFound):
        d.lookup("y" * 250)  # looked for in both places: not there
