"""What the COPY/ADD cache key must tell apart: a renamed source (by a plain name, a glob,
several sources, a URL) and another ``--chown`` each miss the cache, and the image then has
the new name and owner (an ADD'd archive's files too)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.build.conftest import BASE, build, built_id, stream_text
from tests.build.test_build_context import _run


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
