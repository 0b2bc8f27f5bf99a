"""Metadata as a user reads it back: ``--label`` values with backslashes, quotes and dollars
kept exactly (the docker CLI, both escape characters), a redefined ENV keeping its place,
EXPOSE refusing an inverted range."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import trio

from tests.builds.conftest import BASE, build, built_id, stream_text
from tests.builds.test_build_clients import LEGACY
from tests.conftest import docker_cli
from tests.support.daemon import Daemon

ODD = {"p": "C:\\dir", "q": "ends in \\", "r": 'a \\"quoted\\" $HOME \\$x', "s": "`tick`\\`"}


async def test_cli_labels_are_kept_exactly(api: httpx.AsyncClient, bdaemon: Daemon,
                                           tmp_path: Path) -> None:
    for n, first_line in enumerate(("", "# escape=`\n")):
        (tmp_path / "Dockerfile").write_text(f"{first_line}FROM {BASE}\n")
        args = [a for k, v in ODD.items() for a in ("--label", f"{k}={v}")]
        proc = await trio.to_thread.run_sync(partial(
            docker_cli, bdaemon.url, "build", "-t", f"labels:{n}", *args, str(tmp_path),
            timeout=120, extra_env=LEGACY))
        assert proc.returncode == 0, proc.stderr
        r = await api.get(f"/images/labels:{n}/json")
        assert r.json()["Config"]["Labels"] == ODD, first_line


async def test_redefined_env_keeps_its_place(api: httpx.AsyncClient) -> None:
    files = {"Dockerfile": f"FROM {BASE}\nENV A=1 B=2 C=3\nENV B=changed\n"}
    r = await api.get(f"/images/{built_id(await build(api, files))}/json")
    env = r.json()["Config"]["Env"]
    assert [e for e in env if e[:2] in ("A=", "B=", "C=")] == ["A=1", "B=changed", "C=3"]


async def test_expose_refuses_an_inverted_range(api: httpx.AsyncClient) -> None:
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nEXPOSE 22 80-70/udp\n"})
    assert msgs[-1]["error"] == ("Invalid range specified for the Port: 80-70 (its end is "
                                 "below its start)")
    assert "Successfully built" not in stream_text(msgs)
