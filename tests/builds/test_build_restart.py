"""The cache survives a daemon restart (images keep their parents on disk), and a build's
directory left by a crash is gone at the next start."""

from __future__ import annotations

import os

import httpx
import pytest

from tests.builds.conftest import BASE, build, built_id, stream_text
from tests.conftest import http_client
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon


async def test_cache_survives_a_restart() -> None:
    if reason := skip_reason():
        pytest.skip(reason)
    d = Daemon()
    try:
        d.start()
        files = {"Dockerfile": f"FROM {BASE}\nRUN echo once > /f\nCOPY x /x\nCMD [\"cat\"]\n",
                 "x": "x"}
        async with http_client(d.sock) as c:
            c.timeout = httpx.Timeout(120)
            r = await c.post("/images/create", content=timg.busybox_rootfs_tar(),
                             params={"fromSrc": "-", "repo": "busybox", "tag": "latest"})
            assert r.status_code == 200
            first = built_id(await build(c, files))
        assert d.stop() == 0
        (d.root / "builds" / "left-by-a-crash").mkdir()
        d.start()
        assert os.listdir(d.root / "builds") == []
        async with http_client(d.sock) as c:
            c.timeout = httpx.Timeout(120)
            again = await build(c, files)
        assert built_id(again) == first
        assert stream_text(again).count(" ---> Using cache") == 3
    finally:
        d.cleanup()
