"""What the COPY/ADD cache key must tell apart: a renamed source (by a plain name, a glob,
several sources, a URL) and another ``--chown`` each miss the cache, and the image then has
the new name and owner (an ADD'd archive's files too). A build without the cache computes its
keys later, with its images (its large files not hashed as they came), and names its steps
as a build with it does: a later build hits them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

from tests.builds.conftest import BASE, build, built_id, stream_text
from tests.builds.test_build_context import _run


async def test_a_renamed_source_misses_the_cache(api: httpx.AsyncClient) -> None:
    for copy in ("COPY {} /dst/", "COPY {}* /dst/", "COPY {} same.txt /dst/"):
        content = f"same for {copy}\n"  # each case its own content: its own cache entries
        first = {"Dockerfile": f"FROM {BASE}\n{copy.format('a.txt')}\n", "a.txt": content,
                 "same.txt": "s\n"}
        built_id(await build(api, first))
        second = {"Dockerfile": f"FROM {BASE}\n{copy.format('b.txt')}\n", "b.txt": content,
                  "same.txt": "s\n"}
        msgs = await build(api, second)
        assert "Using cache" not in stream_text(msgs), copy
        assert await _run(api, built_id(msgs), "ls /dst") in ("b.txt\n", "b.txt\nsame.txt\n")


async def test_urls_with_equal_content_keep_their_names(api: httpx.AsyncClient, web: str,
                                                        tmp_path: Path) -> None:
    (tmp_path / "other.txt").write_text("over http\n")  # what served.txt holds
    built_id(await build(api, {"Dockerfile": f"FROM {BASE}\nADD {web}/served.txt /u/\n"}))
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nADD {web}/other.txt /u/\n"})
    assert "Using cache" not in stream_text(msgs)
    assert await _run(api, built_id(msgs), "ls /u") == "other.txt\n"


async def test_another_chown_misses_the_cache(api: httpx.AsyncClient) -> None:
    files: dict[str, bytes | str] = {"Dockerfile": f"FROM {BASE}\nCOPY f /o/\n",
                                     "f": "owned\n"}
    built_id(await build(api, files))
    files["Dockerfile"] = f"FROM {BASE}\nCOPY --chown=1000 f /o/\n"
    msgs = await build(api, files)
    assert "Using cache" not in stream_text(msgs)
    assert await _run(api, built_id(msgs), "stat -c %u:%g /o/f") == "1000:1000\n"


async def test_a_nocache_build_names_its_copy_for_later_builds(api: httpx.AsyncClient) -> None:
    files: dict[str, bytes | str] = {
        "Dockerfile": f"FROM {BASE}\nCOPY big /k/big\nCOPY small /k/\nENV DONE=1\n",
        "big": os.urandom(5 << 20), "small": "small\n"}  # hashed later, and as it came
    msgs = await build(api, files, nocache="1")
    first = built_id(msgs)
    copies = re.findall(r"Step [23] : COPY \S+ /k/\S*\n ---> ([0-9a-f]{12})\n",
                        stream_text(msgs))
    assert len(copies) == 2, stream_text(msgs)
    for short, dest in zip(copies, ("/k/big", "/k/"), strict=True):
        cfg = (await api.get(f"/images/{short}/json")).json()["ContainerConfig"]
        assert re.fullmatch(rf"#\(nop\) COPY file:[0-9a-f]{{64}} in {dest}", cfg["Cmd"][-1]), \
            cfg["Cmd"]
    msgs = await build(api, files)
    text = stream_text(msgs)
    assert text.count(" ---> Using cache\n") == 3, text
    assert built_id(msgs) == first
